// Shared machinery of the op entry points: ATen semantics (output
// allocation and resizing, type promotion, broadcasting, out=/in-place
// variants) around the lowerings. Each op family lives in its own file.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>
#include <torch/library.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <typeinfo>
#include <string>
#include <tuple>
#include <vector>

#include "aten/program.h"
#include "ir/graph.h"

namespace tpu::aten {

using Build = std::function<ir::Value(ir::Graph&, const std::vector<ir::Value>&)>;
using OptTensor = std::optional<at::Tensor>;

// Whether an optional tensor argument was given (present and defined).
inline bool defined(const OptTensor& t) { return t.has_value() && t->defined(); }
// The value of an optional tensor argument, or nullopt when it was not given.
inline std::optional<ir::Value> read_opt(Program& p, const OptTensor& t) {
  if (!defined(t)) return std::nullopt;
  return p.read(*t);
}

// An op's tensor operands, held by reference, never copied: copying an
// at::Tensor that Python also holds increfs its PyObject under the GIL (torch's
// PyObject preservation), and the copy and its release cost more than the rest
// of recording the op. Valid while the tensors it refers to are.
class TensorRefs {
 public:
  // One operand of a braced list; a temporary in the list lives as long as the call.
  struct Ref {
    Ref(const at::Tensor& t) : tensor(&t) {}  // NOLINT: implicit, for braced lists
    const at::Tensor* tensor;
  };
  TensorRefs(std::initializer_list<Ref> tensors) {
    for (Ref r : tensors) refs_.push_back(r.tensor);
  }
  TensorRefs(at::ArrayRef<at::Tensor> tensors) {
    for (const at::Tensor& t : tensors) refs_.push_back(&t);
  }
  TensorRefs(const std::vector<at::Tensor>& tensors) : TensorRefs(at::ArrayRef<at::Tensor>(tensors)) {}
  void push_back(const at::Tensor& t) { refs_.push_back(&t); }
  size_t size() const { return refs_.size(); }
  const at::Tensor& operator[](size_t i) const { return *refs_[i]; }
  struct Iterator {
    const at::Tensor* const* p;
    const at::Tensor& operator*() const { return **p; }
    Iterator& operator++() { ++p; return *this; }
    bool operator!=(const Iterator& o) const { return p != o.p; }
  };
  Iterator begin() const { return {refs_.data()}; }
  Iterator end() const { return {refs_.data() + refs_.size()}; }

 private:
  c10::SmallVector<const at::Tensor*, 4> refs_;
};

ir::Shape to_shape(c10::IntArrayRef sizes);

// Which overload of an op is running: ATen's name for it (in errors and as the
// program's name) and, for out= and in-place, the tensor the result goes to.
struct Overload {
  const char* name;
  at::Tensor* out = nullptr;
  bool inplace = false;
  at::Tensor* out2 = nullptr;  // out='s second tensor, for ops with two results
};

// An op name as a template argument (C++20 class-type parameter): the
// overload templates below bake each overload's name in at compile time.
template <size_t N>
struct OpName {
  constexpr OpName(const char (&name)[N]) { std::copy_n(name, N, chars); }  // NOLINT: implicit, for literals
  char chars[N];
};

namespace detail {
template <auto kKernel, OpName kName, typename Kernel = decltype(kKernel)>
struct Overloads;
template <auto kKernel, OpName kName, typename... Args>
struct Overloads<kKernel, kName, at::Tensor (*)(Overload, Args...)> {
  static at::Tensor functional(Args... args) { return kKernel({kName.chars}, args...); }
  static at::Tensor& out(Args... args, at::Tensor& out) {
    kKernel({kName.chars, &out}, args...);
    return out;
  }
};
template <auto kKernel, OpName kName, typename... Args>
struct Overloads<kKernel, kName, std::tuple<at::Tensor, at::Tensor> (*)(Overload, Args...)> {
  static std::tuple<at::Tensor, at::Tensor> functional(Args... args) { return kKernel({kName.chars}, args...); }
  static std::tuple<at::Tensor&, at::Tensor&> out(Args... args, at::Tensor& out, at::Tensor& out2) {
    kKernel({kName.chars, &out, false, &out2}, args...);
    return {out, out2};
  }
};
template <auto kKernel, OpName kName, typename Kernel = decltype(kKernel)>
struct InplaceOverload;
template <auto kKernel, OpName kName, typename... Rest>
struct InplaceOverload<kKernel, kName, at::Tensor (*)(Overload, const at::Tensor&, Rest...)> {
  static at::Tensor& call(at::Tensor& self, Rest... rest) {
    kKernel({kName.chars, &self, true}, self, rest...);
    return self;
  }
};
}  // namespace detail

// ATen's functional, out= and in-place overloads of one op, made from one
// kernel `at::Tensor kernel(Overload, Args...)` whose Args are the functional
// overload's: out= takes Args and then `out`, in-place writes its first
// argument (self). A kernel with two results returns a tuple; its out= takes
// two tensors. kName is the overload's name as the kernel reports it.
// Each is a function pointer for TORCH_LIBRARY_IMPL, named beside its kernel:
//   constexpr auto glu_out = out_overload<glu_op, "glu.out">;
template <auto kKernel, OpName kName>
constexpr auto functional_overload = detail::Overloads<kKernel, kName>::functional;
template <auto kKernel, OpName kName>
constexpr auto out_overload = detail::Overloads<kKernel, kName>::out;
template <auto kKernel, OpName kName>
constexpr auto inplace_overload = detail::InplaceOverload<kKernel, kName>::call;

// ATen's name of an overload of `op`: "op", "op_" (in-place) or "op.out".
std::string variant(const char* op, const at::Tensor* out, bool inplace);
inline std::string variant(const Overload& o) { return variant(o.name, o.out, o.inplace); }

// The names of an op's functional, in-place and out= overloads after its base
// name, as ATen spells them; nullptr where ATen has no such overload.
struct OverloadNames {
  const char* functional = "";
  const char* inplace = "_";
  const char* out = ".out";
};
inline constexpr OverloadNames kTensorOverloads{".Tensor", "_.Tensor", ".Tensor_out"};
inline constexpr OverloadNames kScalarOverloads{".Scalar", "_.Scalar", ".Scalar_out"};
inline constexpr OverloadNames kFunctionalAndOut{"", nullptr, ".out"};
// A backward op: its out= form is ATen's ".grad_input".
inline constexpr OverloadNames kFunctionalAndGradInput{"", nullptr, ".grad_input"};

// Registers the overloads of op kName made from one kernel (at::Tensor
// kernel(Overload, Args...)); the kernel sees kName as o.name, and o.out /
// o.inplace tell which overload runs.
template <auto kKernel, OpName kName>
void impl_variants(torch::Library& m, OverloadNames names = {}) {
  const std::string base = kName.chars;
  if (names.functional) m.impl((base + names.functional).c_str(), functional_overload<kKernel, kName>);
  if constexpr (requires { detail::InplaceOverload<kKernel, kName>::call; }) {  // self comes first
    if (names.inplace) m.impl((base + names.inplace).c_str(), inplace_overload<kKernel, kName>);
  } else {
    TORCH_CHECK(names.inplace == nullptr, kName.chars, ": an in-place overload needs self first");
  }
  if (names.out) m.impl((base + names.out).c_str(), out_overload<kKernel, kName>);
}

// A new contiguous tpu tensor: what at::empty(shape, dtype, device) gives, made
// without a trip through the dispatcher (as CPU's structured kernels make their
// results); an op's results are made this way.
at::Tensor new_tensor(c10::IntArrayRef shape, c10::ScalarType dtype, c10::Device device);

// A new elementwise result laid out as CPU and CUDA lay it out: their TensorIterator
// orders the result's dimensions as the inputs' strides order them, the first input's
// first (a transposed input, a transposed result), and code that views the result
// relies on it, as do torch.compile's fake tensors. All inputs contiguous (nearly every
// call): contiguous, without asking; otherwise TensorIterator itself decides, on meta tensors.
at::Tensor new_elementwise_output(const TensorRefs& inputs, c10::IntArrayRef shape, c10::ScalarType dtype,
                                  c10::Device device);

// The result tensor of an op: `out` (in-place: shape must match; out=: resized
// as ATen does) or a fresh tensor of `shape` and `dtype` on `device`. A fresh or
// resized result takes `format` where it fits the rank (the channels-last layout
// ATen's CPU kernels keep for a channels-last input), else contiguous.
at::Tensor prepare_output(const char* name, const at::Tensor* out, c10::IntArrayRef shape,
                          c10::ScalarType dtype, c10::Device device, bool inplace,
                          at::MemoryFormat format = at::MemoryFormat::Contiguous);
// A linalg result as LAPACK lays it out on CPU: a batch of column-major matrices
// (views of it, and torch.compile's fake strides, rely on that). An `out` that must
// be resized takes that layout too, as CPU's structured kernels give it.
at::Tensor prepare_matrix_output(const char* name, const at::Tensor* out, c10::IntArrayRef shape,
                                 c10::ScalarType dtype, c10::Device device);

// One program for many elementwise ops (a _foreach_* op runs each list
// element's per-tensor op, with its own dtype rules and checks, into one
// program): while a ProgramBatch is alive on this thread, elementwise()
// builds into its program instead of launching one per call; run() launches
// them all at once. Only ops that go through elementwise() may be called
// inside a batch: any other op would run before the batch's writes.
class ProgramBatch {
 public:
  // `ops`: how many ops the batch will hold, to size its lists once. `shared`:
  // a Scalar argument of the list op that every element's op reads, alive for
  // the whole batch: scalar_operand() gives each element one wrapped tensor for
  // it, so the program reads it as one parameter (by that object's identity,
  // never by value).
  ProgramBatch(const char* name, int device, size_t ops, const c10::Scalar* shared = nullptr);
  // `scalars`: the list op's Scalar arguments its elements read (by address),
  // each already wrapped, in `wrapped`, by the caller (which names them to the memo).
  ProgramBatch(const char* name, int device, size_t ops, std::span<const c10::Scalar* const> scalars,
               std::span<const at::Tensor> wrapped);
  ~ProgramBatch();
  ProgramBatch(const ProgramBatch&) = delete;
  ProgramBatch& operator=(const ProgramBatch&) = delete;
  Program& program() { return program_; }
  // Ends the batch (this thread's batch is the enclosing one again).
  void end();
  // Ends the batch and launches its program.
  void run();
  // The batch of this thread, or nullptr.
  static ProgramBatch* active();
  // The wrapped tensor of `s` when `s` is one of the batch's Scalars, else nullptr.
  const at::Tensor* shared_operand(const c10::Scalar& s) const {
    for (size_t i = 0; i < scalars_.size(); ++i)
      if (scalars_[i] == &s) return &wrapped_[i];
    return nullptr;
  }

 private:
  Program program_;
  const c10::Scalar* shared_ = nullptr;  // the one-Scalar form's, and its tensor
  at::Tensor shared_operand_;
  std::span<const c10::Scalar* const> scalars_;
  std::span<const at::Tensor> wrapped_;
  ProgramBatch* previous_;
  bool ended_ = false;
};

// Runs an elementwise op: inputs are converted to `compute` and broadcast to
// one shape, `build` combines them, the result lands in `out` (in-place or
// out=) or in a new tensor of dtype `result`.
// `captures`: everything `build` captured, packed in one word (an op
// enumerator, a flag), when that is all it depends on besides its operands; the
// op's graph is then remembered and reused for alike operands (aten/op_memo.h).
// Left out for a build that captures anything else (a constant's value, a shape).
at::Tensor elementwise(const char* name, const TensorRefs& inputs, c10::ScalarType compute,
                       c10::ScalarType result, const Build& build, const at::Tensor* out = nullptr,
                       bool inplace = false, std::optional<uint64_t> captures = std::nullopt);

// Builds an op into `p` (a fresh program or a batch's) with `build`, or applies
// the graph the memo remembers for an alike call (aten/op_memo.h). `tensors`:
// every tensor `build` reads or writes, outputs included, a Scalar it reads as
// a wrapped CPU tensor among them (Program::scalar_of); `captures`: everything
// else its graph depends on (flags, dims).
// Which build it is, the key's first word, is the type of `build` (one per call site).
void build_or_apply(Program& p, const char* name, std::span<const at::Tensor* const> tensors,
                    const std::type_info& site, std::span<const int64_t> captures,
                    c10::function_ref<void(Program&)> build);
template <class F>
void build_or_apply(Program& p, const char* name, std::span<const at::Tensor* const> tensors,
                    std::span<const int64_t> captures, F&& build) {
  build_or_apply(p, name, tensors, typeid(F), captures, build);
}

// The tpu device that every tensor of every list is on; -1 when some tensor
// is undefined, not a tpu tensor, or on another tpu device.
int common_device(std::initializer_list<at::TensorList> lists);

// The default float dtype for integral inputs (true division, exp, ...);
// floating and complex types are kept.
c10::ScalarType float_type_for(c10::ScalarType t);
// Program::read_as that also takes complex targets: a CPU scalar becomes a
// complex value built from two real runtime parameters.
ir::Value read_operand(Program& p, const at::Tensor& t, c10::ScalarType dtype);
// A runtime scalar parameter of any dtype, complex included.
ir::Value scalar_value(Program& p, const c10::Scalar& s, ir::DType dtype);
// Raises NotImplementedError naming `name` and the dtype unless the op (by
// its base name: "add" for "add_", "add.out") has a complex lowering.
void check_complex_support(const char* name, c10::ScalarType dtype);
// A Python number as an operand: a wrapped 0-dim CPU tensor, as ATen makes them.
// Each call makes a new tensor, so each is its own program parameter, except for
// a ProgramBatch's shared Scalar (one tensor for the whole list).
at::Tensor scalar_operand(const c10::Scalar& s);
// Accumulation type of sums and products (f32 for half types, as ATen on CPU/CUDA).
ir::DType accumulate_type(c10::ScalarType t);
// Whether a Scalar equals `value` (alpha == 1, beta == 0 shortcuts).
bool scalar_is(const c10::Scalar& s, double value);
// The out= tensor of linspace/logspace (`op`): checks steps and out's dtype
// and resizes out to [steps]; false when there is nothing to compute.
bool prepare_steps_out(const char* op, int64_t steps, at::Tensor& out);

}  // namespace tpu::aten
