// One op's program: reads tpu tensors (through their views) into IR values,
// writes IR values back into tensors (through their views), then compiles or
// finds the program in the cache and launches it asynchronously.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <span>
#include <vector>

#include "engine/pending_graph.h"
#include "ir/graph.h"
#include "runtime/device_allocator.h"

namespace tpu::aten {

class Program {
 public:
  // `device` is the tpu device every tensor operand must be on.
  Program(const char* op_name, int device);
  // The device of the op's reference operand. Not a tpu device (a CPU tensor
  // where the op also has tpu operands): the first tpu operand read raises the
  // device mismatch error, naming both devices, as CUDA's kernels do.
  Program(const char* op_name, c10::Device device);

  ir::Graph& graph() {
    alone_ = nullptr;  // nodes added directly: the program holds more than a recipe
    return graph_;
  }
  int device() const { return device_; }

  // The value of `t` (its shape and dtype). A 0-dim CPU tensor is accepted as a
  // scalar, as on CUDA; any other CPU tensor is a device mismatch error.
  ir::Value read(const at::Tensor& t);
  // read(t) converted to `dtype`; a CPU scalar is uploaded in `dtype` directly,
  // so Python numbers of any type share one program.
  ir::Value read_as(const at::Tensor& t, c10::ScalarType dtype);
  // Applies t's lazy conjugation and negation to `v`: the logical value of t
  // from its raw one, and (both are involutions) the raw value to store into t
  // from a logical one. Only the ops that the Conjugate and Negative dispatch
  // keys pass through unresolved (matrix products, linalg_solve_triangular)
  // see tensors with those bits; every other op gets them resolved.
  ir::Value apply_lazy_bits(const at::Tensor& t, ir::Value v);
  ir::Value read_logical(const at::Tensor& t) { return apply_lazy_bits(t, read(t)); }
  // A runtime scalar parameter: changing values do not recompile.
  ir::Value scalar(const c10::Scalar& s, ir::DType dtype);
  // The same for the value of `wrapped`, a 0-dim CPU tensor (a Scalar argument
  // wrapped by the op), which names it to the memo (aten/op_memo.h).
  ir::Value scalar_of(const at::Tensor& wrapped, ir::DType dtype) { return read_cpu_scalar(wrapped, dtype); }
  // The same, broadcast to a flat [n].
  ir::Value flat_scalar(const c10::Scalar& s, ir::DType dtype, int64_t n);
  // Writes `v` (shape dst.sizes(), converted to dst's dtype) through dst's view.
  void write(const at::Tensor& dst, ir::Value v);
  // Binds a device buffer as a program input.
  ir::Value bind(const engine::BufferRef& buffer, const ir::Type& type);
  // Asks for `v` as a fresh buffer from run(), beside the storage writes.
  void add_result(ir::Value v) {
    alone_ = nullptr;
    results_.push_back(v);
  }
  // Compiles/looks up and launches the program (in fused mode: appends it to
  // the pending graph); binds written storages and returns the buffers asked
  // for with add_result() (which, in fused mode, runs the pending graph).
  std::vector<engine::BufferRef> run();
  engine::BufferRef run_for_result(ir::Value v) {
    add_result(v);
    return run().at(0);
  }
  // Room for `operands` tensor and scalar operands without regrowing (a batch
  // of many ops would otherwise reallocate its lists as they grow).
  void reserve(size_t operands);

  // An op's graph as one build made it, kept to be applied to later calls of
  // the op whose operands are alike (aten/op_memo.h). Its parameters are the
  // flat values of the storages the op read, the CPU scalars it read and the
  // storage offsets it took as runtime values, each named by the position of
  // its tensor in the op's tensor list; `writes` names the node each written
  // storage's new flat value is.
  struct Recipe;
  // Records what this (fresh) program builds into `recipe` instead of binding
  // anything: `tensors` is the op's tensor list, which every storage and
  // scalar the build reads must come from.
  void record_into(Recipe* recipe, std::span<const at::Tensor* const> tensors);
  // Completes the recording; false when the build did something a recipe
  // cannot repeat (read a storage that has no value, bound a buffer, asked for
  // a result, read a tensor from outside the list).
  bool finish_recording();
  // Adds the nodes of `recipe` for the op's tensors `tensors` (alike, as the
  // memo's key vouches, to those it was recorded with), as building them would.
  // False, with nothing added, when a storage's value here has another type
  // than the recipe's parameter (e.g. a batch's earlier op rewrote it in
  // another dtype), or has no value.
  bool apply(const Recipe& recipe, std::span<const at::Tensor* const> tensors);
  // apply() for a recipe that is all this (fresh) program will hold: in fused
  // mode its nodes go straight to the pending graph, as run() would have put
  // them there (one copy of the nodes, not two), and run() has nothing left to do.
  // Called as soon as the memo found the recipe for `tensors`: its key, just taken
  // on this thread, vouches for each storage's content type.
  bool apply_alone(const Recipe& recipe, std::span<const at::Tensor* const> tensors);

 private:
  struct StorageState {
    c10::Storage storage;   // keeps the storage alive while the program is built
    engine::StorageValue* value;
    ir::Value current;      // the storage's value as of now in the program
    bool written = false;
    int parameter = -1;     // position of the storage's old value among the parameters
  };
  StorageState& state_for(const at::Tensor& t);
  std::optional<ir::Value> dynamic_offset(const at::Tensor& t);
  void check_device(const at::Tensor& t) const;
  void check_outputs(const std::vector<engine::BufferRef>& outputs) const;
  void log_launch(const engine::LaunchInfo& info) const;

  const char* op_name_;
  int device_;
  c10::Device reference_device_{c10::DeviceType::PrivateUse1, 0};  // the constructor's, for the mismatch error
  ir::Graph graph_;
  std::vector<engine::BufferRef> run_now();
  // Inline capacities fit a plain op (two reads, one write): no allocation.
  c10::SmallVector<engine::ProgramArgument, 4> arguments_;  // by parameter position
  c10::SmallVector<ir::Value, 2> results_;
  // CPU scalars read so far, by tensor identity (held, so no other tensor takes
  // the address): a batch reads a foreach op's one wrapped number once per
  // element, and it becomes one parameter. Never by value: a program's structure
  // must not depend on which scalars happen to be equal, or a learning rate that
  // meets another hyperparameter's value would compile a new program.
  struct ReadScalar {
    c10::intrusive_ptr<c10::TensorImpl> tensor;
    ir::DType dtype;
    ir::Value value;
  };
  c10::SmallVector<ReadScalar, 2> read_scalars_;
  ir::Value read_cpu_scalar(const at::Tensor& t, ir::DType dtype);
  // The device buffer (from the scalar cache) that scalar() binds for `s`.
  engine::BufferRef scalar_buffer(const c10::Scalar& s, ir::DType dtype) const;
  // The buffer a recipe's CPU-scalar (of `dtype`) or runtime-offset parameter (`source`) is bound to for `t`.
  engine::BufferRef value_parameter_buffer(uint8_t source, ir::DType dtype, const at::Tensor& t) const;
  // What each operand read was, for error messages and logs; formatted only
  // when needed (operands() ), since building text per op costs more than the op.
  struct Operand {
    c10::SmallVector<int64_t, 6> sizes;
    c10::ScalarType dtype;
    c10::Device device;
    bool scalar;  // a CPU number read as a scalar parameter
  };
  // The first kShownOperands reads; a batch of many ops reads more.
  static constexpr size_t kShownOperands = 8;
  c10::SmallVector<Operand, 4> operands_;
  size_t num_operands_ = 0;
  void note_operand(Operand&& operand);
  std::string operands() const;  // "[2, 3] float32, scalar float32, ..."
  // Storages read or written, in first-use order. Most programs touch a few,
  // found by a scan; a batch indexes them once it grows.
  c10::SmallVector<StorageState, 4> storages_;
  // storages_ by value (open addressing, power-of-two size; empty until built).
  std::vector<std::pair<engine::StorageValue*, uint32_t>> storage_index_;
  StorageState* find_storage(engine::StorageValue* value);
  StorageState& add_storage(StorageState&& state);
  void index_storage(engine::StorageValue* value, uint32_t position);
  // The type of the flat value a storage read binds (fused mode: the storage's
  // content as of the pending graph; else its buffer, flattened); false when it has no value.
  bool content_type(engine::StorageValue* value, ir::Type* flat, ir::Type* bound) const;
  StorageState& bind_storage(const at::Tensor& t, engine::StorageValue* value, const ir::Type& flat,
                             const ir::Type& bound);

  // The recipe this program holds alone in strict mode (apply_alone(), then run() at once).
  const Recipe* alone_ = nullptr;
  // Strict mode: launches the program `recipe` made before for these operands'
  // donations, if kept (Recipe::launches); false, with nothing done, otherwise.
  bool launch_kept(const Recipe& recipe, std::span<const at::Tensor* const> tensors);
  // run_now()'s launch of a program holding `alone_`, kept for launch_kept().
  std::vector<engine::BufferRef> launch_alone(const std::vector<engine::BufferRef>& args);

  // Recording (record_into): where parameters come from, and whether the build stayed repeatable.
  Recipe* recording_ = nullptr;
  std::span<const at::Tensor* const> recorded_tensors_;
  bool recording_failed_ = false;
  // A parameter of the recipe; `tensor` < 0 (not from the list) fails the recording.
  ir::Value recorded_parameter(uint8_t source, int tensor, const ir::Type& type);
  int recorded_tensor_of_storage(engine::StorageValue* value) const;
  int recorded_tensor_of(const at::Tensor& t) const;

 public:
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  // A batch's lists, kept by its thread for the next batch (see reserve()).
  struct SpareLists {
    decltype(arguments_) arguments;
    decltype(storages_) storages;
    decltype(storage_index_) storage_index;
  };
};

struct Program::Recipe {
  enum Source : uint8_t { Storage, CpuScalar, Offset };
  struct Parameter {
    Source source;
    ir::DType dtype;   // a scalar's
    uint32_t tensor;   // position in the op's tensor list
    int node;          // the parameter's node in `graph`
  };
  struct Write {
    uint32_t tensor;
    int node;
  };
  ir::Graph graph;
  // Names `graph`, which never changes once recorded, for the process's life
  // (ir::Graph::append_remembered): a later recipe at this address gets another.
  uint64_t stamp = 0;
  std::vector<Parameter> parameters;  // in the order of the graph's parameters
  std::vector<Write> writes;
  c10::SmallVector<Operand, 4> operands;  // what the build noted, for error messages
  size_t num_operands = 0;
  // Strict mode: the programs the recipe made when applied alone
  // (Program::apply_alone), one per set of buffers donated (all the rest of a
  // program follows from the recipe and the key), kept with their executables
  // so that a later call launches one without building, hashing or looking it up.
  struct Launch {
    std::vector<std::pair<int, int>> aliases;  // (parameter, output) donations
    std::shared_ptr<const ir::Graph> graph;
    engine::ExecutableRef executable;
    int device;
  };
  mutable c10::SmallVector<Launch, 2> launches;
  // Per write: the parameter whose buffer its result may take (the storage read
  // in the same type), or -1; known once a program was made.
  mutable std::vector<int> donors;
};

// The value of a 0-dim CPU tensor (a wrapped Python number, mostly): the dtypes
// numbers wrap to are read in place, without item()'s dispatcher round trip.
c10::Scalar cpu_scalar_value(const at::Tensor& t);

// TORCH_TPU_LOG_OPS=1: each launch is logged to stderr (op, operands, cache, time).
bool log_ops_enabled();

// A tpu copy of the 0-dim CPU tensor `scalar` whose buffer comes from the scalar
// buffer cache: equal values (a compiled optimizer step's step counts) share one
// upload. Safe to write: a write gives the storage a new buffer, and every
// donation first checks that nothing else (here: the cache) holds the buffer.
at::Tensor scalar_to_device(const at::Tensor& scalar, int device);
// The scalar buffer cache's buffer (shaped [1], as a storage's) holding the value
// of the 0-dim CPU tensor `scalar` on `device`: scalar_to_device without the tensor.
engine::BufferRef scalar_storage_buffer(const at::Tensor& scalar, int device);

// Whether `t` is its whole storage, contiguous from offset 0: writing it needs
// no old storage content.
bool covers_whole_storage(const at::Tensor& t);
// covers_whole_storage in any dimension order: dense from offset 0 and all of its
// storage (a transposed input's elementwise result), its storage the value transposed.
bool fills_whole_storage(const at::Tensor& t);

// t's dtype and shape as an IR type.
ir::Type tensor_type(const at::Tensor& t);

// The value of `t` (its raw values, shaped and typed as t) as a device buffer:
// its storage's own buffer where t is all of it (no copy), else a copy made by a
// program that reads t through its view. Either runs t's pending work first.
engine::BufferRef value_buffer(const at::Tensor& t, const char* op_name);
// Gives `t` the raw values in `buffer` (of type `type`, t's shape): as its
// storage's new buffer where t is all of it in that type (no program), else
// written through its view (converted to t's dtype) by a program.
void assign_buffer(const at::Tensor& t, engine::BufferRef buffer, const ir::Type& type, const char* op_name);

// Raises CUDA's error for operands on two devices, naming both and the op.
[[noreturn]] void raise_device_mismatch(c10::Device first, c10::Device second, const std::string& op);

// Raises "<what> failed: <the plugin's error>" as CUDA would: torch.OutOfMemoryError when
// the plugin ran out of memory (with the device's memory in use and, while
// torch.tpu.memory records, its largest storages and the Python lines that made them),
// else RuntimeError.
[[noreturn]] void raise_device_error(const std::string& what, const engine::Error& error, int device);

// Device of a tpu tensor operand set (the first tpu tensor's device).
int device_of(std::initializer_list<const at::Tensor*> tensors);

}  // namespace tpu::aten
