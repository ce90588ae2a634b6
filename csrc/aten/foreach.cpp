// _foreach_* ops: one program per call. Each list element runs its
// per-tensor op (same dtype rules, checks and lowerings as the op itself)
// inside a ProgramBatch, so the whole list is one launch in strict mode and
// one append to the pending graph in fused mode, as a CUDA multi-tensor
// kernel is one launch. Lists that are not all tpu tensors on one device
// (and inputs the one-program path does not cover) go to ATen's per-tensor
// kernels, which are correct by construction.
#include <ATen/core/Tensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/ForeachUtils.h>
#include <ATen/ops/_foreach_abs_native.h>
#include <ATen/ops/_foreach_acos_native.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_asin_native.h>
#include <ATen/ops/_foreach_atan_native.h>
#include <ATen/ops/_foreach_ceil_native.h>
#include <ATen/ops/_foreach_clamp_max_native.h>
#include <ATen/ops/_foreach_clamp_min_native.h>
#if __has_include(<ATen/ops/_foreach_clone_native.h>)  // torch >= 2.12
#include <ATen/ops/_foreach_clone_native.h>
#define TPU_HAS_FOREACH_CLONE 1
#endif
#include <ATen/ops/_foreach_copy_native.h>
#include <ATen/ops/_foreach_cos_native.h>
#include <ATen/ops/_foreach_cosh_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_erf_native.h>
#include <ATen/ops/_foreach_erfc_native.h>
#include <ATen/ops/_foreach_exp_native.h>
#include <ATen/ops/_foreach_expm1_native.h>
#include <ATen/ops/_foreach_floor_native.h>
#include <ATen/ops/_foreach_frac_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_lgamma_native.h>
#include <ATen/ops/_foreach_log10_native.h>
#include <ATen/ops/_foreach_log1p_native.h>
#include <ATen/ops/_foreach_log2_native.h>
#include <ATen/ops/_foreach_log_native.h>
#include <ATen/ops/_foreach_max_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_norm_native.h>
#include <ATen/ops/_foreach_pow_native.h>
#include <ATen/ops/_foreach_reciprocal_native.h>
#include <ATen/ops/_foreach_round_native.h>
#include <ATen/ops/_foreach_rsqrt_native.h>
#include <ATen/ops/_foreach_sigmoid_native.h>
#include <ATen/ops/_foreach_sign_native.h>
#include <ATen/ops/_foreach_sin_native.h>
#include <ATen/ops/_foreach_sinh_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/_foreach_tan_native.h>
#include <ATen/ops/_foreach_tanh_native.h>
#include <ATen/ops/_foreach_trunc_native.h>
#include <ATen/ops/_foreach_zero_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/pow.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/library.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aten/op_helpers.h"
#include "aten/op_memo.h"
#include "ir/ops.h"
#include "lowering/reduce.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using TL = at::TensorList;
using Scalars = at::ArrayRef<c10::Scalar>;
using Tensors = std::vector<at::Tensor>;
using at::native::check_foreach_api_restrictions;

// A foreach op's `Tensor other` scalar operand: 0-dim, a CPU scalar or a tpu
// tensor on `device` (anything else goes to ATen, which raises).
bool usable_scalar_tensor(const at::Tensor& t, int device) {
  if (!t.defined() || t.dim() != 0) return false;
  return t.device().is_cpu() || (t.is_privateuseone() && t.device().index() == device);
}

// Runs `element(i)` for every index inside one ProgramBatch and launches it once.
// `shared`: the list op's one Scalar argument, which every element reads.
template <class F>
void batched(const char* name, int device, size_t n, F&& element, const c10::Scalar* shared = nullptr) {
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  ProgramBatch batch(name, device, n, shared);
  for (size_t i = 0; i < n; ++i) element(i);
  batch.run();
}

// What an in-place list op's elements read besides their lists' tensors, for
// the memo (aten/op_memo.h): with `memo`, a whole batch is remembered as one
// recipe and a later call with alike lists applies it without running the
// elements (and bumps each self's version, as each element's op would).
// Only for ops whose elements' graphs depend on nothing else: a Scalar an
// element reads is wrapped once here (its dtype in the key); anything else they
// depend on (a formula chosen by a Scalar's value) goes in `captures`.
struct Operands {
  std::initializer_list<TL> lists;
  const c10::Scalar* scalar = nullptr;     // one Scalar every element reads
  Scalars scalars = {};                    // one Scalar per element
  const at::Tensor* tensor = nullptr;      // one 0-dim tensor every element reads
  std::span<const int64_t> captures = {};
  bool memo = true;
};

template <class F>
void batched_inplace(const char* name, int device, size_t n, F&& element, const Operands& operands) {
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  c10::SmallVector<const c10::Scalar*, 8> scalars;
  if (operands.scalar != nullptr) scalars.push_back(operands.scalar);
  for (const c10::Scalar& s : operands.scalars) scalars.push_back(&s);
  c10::SmallVector<at::Tensor, 8> wrapped;
  for (const c10::Scalar* s : scalars) wrapped.push_back(at::native::wrapped_scalar_tensor(*s));
  ProgramBatch batch(name, device, n, scalars, wrapped);
  bool applied = false;
  // A dispatch mode (a tracer, FakeTensorMode) sees each element's op: those run.
  if (operands.memo && op_memo::enabled() && !c10::impl::TorchDispatchModeTLS::any_modes_set()) {
    c10::SmallVector<const at::Tensor*, 64> tensors;
    for (TL list : operands.lists)
      for (const at::Tensor& t : list) tensors.push_back(&t);
    if (operands.tensor != nullptr) tensors.push_back(operands.tensor);
    for (const at::Tensor& w : wrapped) tensors.push_back(&w);
    op_memo::Key key;
    key.add(static_cast<int64_t>(n));
    key.add(static_cast<int64_t>(operands.lists.size()));
    key.add(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));  // integral inputs' float type
    for (int64_t c : operands.captures) key.add(c);
    auto record = [&](Program::Recipe& recipe) {
      ProgramBatch recording(name, device, n, scalars, wrapped);
      recording.program().record_into(&recipe, tensors);
      for (size_t i = 0; i < n; ++i) element(i);
      recording.end();
      return recording.program().finish_recording();
    };
    if (const Program::Recipe* recipe = op_memo::find_or_record(key, name, device, tensors, record))
      applied = batch.program().apply_alone(*recipe, tensors);
    // Each element's in-place op would have bumped its tensor's version (autograd's check that a
    // saved tensor was not changed); the list op's own layer does not.
    if (applied)
      for (const at::Tensor& t : *operands.lists.begin()) t.unsafeGetTensorImpl()->bump_version();
  }
  if (!applied)
    for (size_t i = 0; i < n; ++i) element(i);
  batch.run();
}

template <class F>
Tensors batched_map(const char* name, int device, size_t n, F&& element, const c10::Scalar* shared = nullptr) {
  Tensors result;
  result.reserve(n);
  batched(name, device, n, [&](size_t i) { result.push_back(element(i)); }, shared);
  return result;
}

// ------------------------------------------------------------ elementwise families
//
// NAME: the foreach op; OP: the per-tensor method each element runs;
// SLOW: the stem of ATen's per-tensor kernels (maximum/minimum run
// clamp_min/clamp_max, as in ATen).

// ARG(s): what each element's OP receives for the scalar `s`, made once per
// list for the arithmetic ops: ATen's add/sub/mul/div.Scalar wrap the number in
// a 0-dim CPU tensor and call the .Tensor overload, so the foreach op does that
// once instead of once per element (and skips a dispatch per element).
#define AS_SCALAR(s) (s)
#define AS_WRAPPED(s) scalar_operand(s)
// Whether a batch of the op is remembered: an element given a wrapped Scalar
// reads it as a runtime value; one given the Scalar may build its value in.
#define MEMO_AS_SCALAR false
#define MEMO_AS_WRAPPED true
// The batch's shared Scalar for an ARG: a Scalar passed on to every element (a
// wrapped number is already one tensor for the list).
const c10::Scalar* shared_scalar(const c10::Scalar& arg) { return &arg; }
const c10::Scalar* shared_scalar(const at::Tensor&) { return nullptr; }

// What an element's graph takes from an alpha (add/sub): whether it scales at
// all (then the alpha is a tensor of the element's own, which the memo refuses) and its type
// (which the op's checks read).
int64_t alpha_captures(const c10::Scalar& alpha) {
  return (alpha.isComplex() || !scalar_is(alpha, 1)) | static_cast<int64_t>(alpha.type()) << 1;
}
// lerp's formula is picked by |weight| < 0.5 (lerp_scalar_kernel).
int64_t lerp_captures(const c10::Scalar& w) { return std::abs(w.toComplexDouble()) < 0.5; }

#define FOREACH_SCALAR(NAME, OP, SLOW, ARG)                                                              \
  Tensors NAME##_scalar(TL self, const c10::Scalar& s) {                                                 \
    check_foreach_api_restrictions(self);                                                                \
    int d = common_device({self});                                                                       \
    if (d < 0) return at::native::foreach_tensor_##SLOW##_scalar_kernel_slow(self, s);                   \
    const auto arg = ARG(s);                                                                             \
    return batched_map("_foreach_" #NAME ".Scalar", d, self.size(), [&](size_t i) { return self[i].OP(arg); }, \
                       shared_scalar(arg));                                                              \
  }                                                                                                      \
  void NAME##_scalar_(TL self, const c10::Scalar& s) {                                                   \
    check_foreach_api_restrictions(self);                                                                \
    int d = common_device({self});                                                                       \
    if (d < 0) return at::native::foreach_tensor_##SLOW##_scalar_kernel_slow_(self, s);                  \
    batched_inplace("_foreach_" #NAME "_.Scalar", d, self.size(), [&](size_t i) { self[i].OP##_(ARG(s)); }, \
                    Operands{{self}, &s, {}, nullptr, {}, MEMO_##ARG});                                  \
  }

#define FOREACH_SCALARLIST(NAME, OP, SLOW, ARG)                                                          \
  Tensors NAME##_scalarlist(TL self, Scalars s) {                                                        \
    check_foreach_api_restrictions(self, s);                                                             \
    int d = common_device({self});                                                                       \
    if (d < 0) return at::native::foreach_tensor_##SLOW##_scalarlist_kernel_slow(self, s);               \
    return batched_map("_foreach_" #NAME ".ScalarList", d, self.size(),                                  \
                       [&](size_t i) { return self[i].OP(ARG(s[i])); });                                 \
  }                                                                                                      \
  void NAME##_scalarlist_(TL self, Scalars s) {                                                          \
    check_foreach_api_restrictions(self, s);                                                             \
    int d = common_device({self});                                                                       \
    if (d < 0) return at::native::foreach_tensor_##SLOW##_scalarlist_kernel_slow_(self, s);              \
    batched_inplace("_foreach_" #NAME "_.ScalarList", d, self.size(), [&](size_t i) { self[i].OP##_(ARG(s[i])); }, \
                    Operands{{self}, nullptr, s, nullptr, {}, MEMO_##ARG});                              \
  }

#define FOREACH_LIST(NAME, OP, SLOW)                                                                     \
  Tensors NAME##_list(TL self, TL other) {                                                               \
    check_foreach_api_restrictions(self, other);                                                         \
    int d = common_device({self, other});                                                                \
    if (d < 0) return at::native::foreach_tensor_##SLOW##_list_kernel_slow(self, other);                 \
    return batched_map("_foreach_" #NAME ".List", d, self.size(),                                        \
                       [&](size_t i) { return self[i].OP(other[i]); });                                  \
  }                                                                                                      \
  void NAME##_list_(TL self, TL other) {                                                                 \
    check_foreach_api_restrictions(self, other);                                                         \
    int d = common_device({self, other});                                                                \
    if (d < 0) return at::native::foreach_tensor_##SLOW##_list_kernel_slow_(self, other);                \
    batched_inplace("_foreach_" #NAME "_.List", d, self.size(), [&](size_t i) { self[i].OP##_(other[i]); }, \
                    Operands{{self, other}});                                                            \
  }

#define FOREACH_LIST_ALPHA(NAME)                                                                         \
  Tensors NAME##_list(TL self, TL other, const c10::Scalar& alpha) {                                     \
    check_foreach_api_restrictions(self, other);                                                         \
    int d = common_device({self, other});                                                                \
    if (d < 0) return at::native::foreach_tensor_##NAME##_list_kernel_slow(self, other, alpha);          \
    return batched_map("_foreach_" #NAME ".List", d, self.size(),                                        \
                       [&](size_t i) { return self[i].NAME(other[i], alpha); });                         \
  }                                                                                                      \
  void NAME##_list_(TL self, TL other, const c10::Scalar& alpha) {                                       \
    check_foreach_api_restrictions(self, other);                                                         \
    int d = common_device({self, other});                                                                \
    if (d < 0) return at::native::foreach_tensor_##NAME##_list_kernel_slow_(self, other, alpha);         \
    const int64_t captures[] = {alpha_captures(alpha)};                                                  \
    batched_inplace("_foreach_" #NAME "_.List", d, self.size(),                                          \
                    [&](size_t i) { self[i].NAME##_(other[i], alpha); }, Operands{{self, other}, nullptr, {}, nullptr, captures}); \
  }

// `other` is one 0-dim tensor for the whole list (Adam's step counts, a
// device-side learning rate).
#define FOREACH_TENSOR(NAME)                                                                             \
  Tensors NAME##_tensor(TL self, const at::Tensor& other) {                                              \
    check_foreach_api_restrictions(self);                                                                \
    int d = common_device({self});                                                                       \
    if (d < 0 || !usable_scalar_tensor(other, d))                                                        \
      return at::native::foreach_tensor_##NAME##_tensor_kernel_slow(self, other);                        \
    return batched_map("_foreach_" #NAME ".Tensor", d, self.size(), [&](size_t i) { return self[i].NAME(other); }); \
  }                                                                                                      \
  void NAME##_tensor_(TL self, const at::Tensor& other) {                                                \
    check_foreach_api_restrictions(self);                                                                \
    int d = common_device({self});                                                                       \
    if (d < 0 || !usable_scalar_tensor(other, d))                                                        \
      return at::native::foreach_tensor_##NAME##_tensor_kernel_slow_(self, other);                       \
    batched_inplace("_foreach_" #NAME "_.Tensor", d, self.size(), [&](size_t i) { self[i].NAME##_(other); }, \
                    Operands{{self}, nullptr, {}, &other});                                                 \
  }

FOREACH_SCALAR(add, add, add, AS_WRAPPED)
FOREACH_SCALAR(sub, sub, sub, AS_WRAPPED)
FOREACH_SCALAR(mul, mul, mul, AS_WRAPPED)
FOREACH_SCALAR(div, div, div, AS_WRAPPED)
FOREACH_SCALAR(clamp_min, clamp_min, clamp_min, AS_SCALAR)
FOREACH_SCALAR(clamp_max, clamp_max, clamp_max, AS_SCALAR)
FOREACH_SCALAR(maximum, clamp_min, clamp_min, AS_SCALAR)
FOREACH_SCALAR(minimum, clamp_max, clamp_max, AS_SCALAR)
FOREACH_SCALAR(pow, pow, pow, AS_SCALAR)
FOREACH_SCALARLIST(add, add, add, AS_WRAPPED)
FOREACH_SCALARLIST(sub, sub, sub, AS_WRAPPED)
FOREACH_SCALARLIST(mul, mul, mul, AS_WRAPPED)
FOREACH_SCALARLIST(div, div, div, AS_WRAPPED)
FOREACH_SCALARLIST(clamp_min, clamp_min, clamp_min, AS_SCALAR)
FOREACH_SCALARLIST(clamp_max, clamp_max, clamp_max, AS_SCALAR)
FOREACH_SCALARLIST(maximum, clamp_min, clamp_min, AS_SCALAR)
FOREACH_SCALARLIST(minimum, clamp_max, clamp_max, AS_SCALAR)
FOREACH_SCALARLIST(pow, pow, pow, AS_SCALAR)
FOREACH_LIST_ALPHA(add)
FOREACH_LIST_ALPHA(sub)
FOREACH_LIST(mul, mul, mul)
FOREACH_LIST(div, div, div)
FOREACH_LIST(clamp_min, clamp_min, clamp_min)
FOREACH_LIST(clamp_max, clamp_max, clamp_max)
FOREACH_LIST(maximum, clamp_min, clamp_min)
FOREACH_LIST(minimum, clamp_max, clamp_max)
FOREACH_LIST(pow, pow, pow)
FOREACH_TENSOR(mul)
FOREACH_TENSOR(div)
#undef FOREACH_SCALAR
#undef AS_SCALAR
#undef AS_WRAPPED
#undef MEMO_AS_SCALAR
#undef MEMO_AS_WRAPPED
#undef FOREACH_SCALARLIST
#undef FOREACH_LIST
#undef FOREACH_LIST_ALPHA
#undef FOREACH_TENSOR

// add.Tensor has an alpha.
Tensors add_tensor(TL self, const at::Tensor& other, const c10::Scalar& alpha) {
  check_foreach_api_restrictions(self);
  int d = common_device({self});
  if (d < 0 || !usable_scalar_tensor(other, d))
    return at::native::foreach_tensor_add_tensor_kernel_slow(self, other, alpha);
  return batched_map("_foreach_add.Tensor", d, self.size(), [&](size_t i) { return self[i].add(other, alpha); });
}
void add_tensor_(TL self, const at::Tensor& other, const c10::Scalar& alpha) {
  check_foreach_api_restrictions(self);
  int d = common_device({self});
  if (d < 0 || !usable_scalar_tensor(other, d))
    return at::native::foreach_tensor_add_tensor_kernel_slow_(self, other, alpha);
  const int64_t captures[] = {alpha_captures(alpha)};
  batched_inplace("_foreach_add_.Tensor", d, self.size(), [&](size_t i) { self[i].add_(other, alpha); },
                  Operands{{self}, nullptr, {}, &other, captures});
}

// pow(Scalar, Tensor[]).
Tensors pow_scalar_and_tensor(const c10::Scalar& base, TL exponent) {
  check_foreach_api_restrictions(exponent);
  int d = common_device({exponent});
  if (d < 0) return at::native::foreach_scalar_pow_list_kernel_slow(base, exponent);
  return batched_map("_foreach_pow.ScalarAndTensor", d, exponent.size(),
                     [&](size_t i) { return at::pow(base, exponent[i]); });
}

// ------------------------------------------------------------ addcmul / addcdiv

#define FOREACH_ADDC(NAME)                                                                                 \
  Tensors NAME##_scalar(TL self, TL t1, TL t2, const c10::Scalar& value) {                                 \
    check_foreach_api_restrictions(self, t1, t2);                                                          \
    int d = common_device({self, t1, t2});                                                                 \
    if (d < 0) return at::native::foreach_tensor_##NAME##_scalar_slow(self, t1, t2, value);                \
    return batched_map("_foreach_" #NAME ".Scalar", d, self.size(),                                        \
                       [&](size_t i) { return self[i].NAME(t1[i], t2[i], value); }, &value);              \
  }                                                                                                        \
  void NAME##_scalar_(TL self, TL t1, TL t2, const c10::Scalar& value) {                                   \
    check_foreach_api_restrictions(self, t1, t2);                                                          \
    int d = common_device({self, t1, t2});                                                                 \
    if (d < 0) return at::native::foreach_tensor_##NAME##_scalar_slow_(self, t1, t2, value);               \
    batched_inplace("_foreach_" #NAME "_.Scalar", d, self.size(),                                          \
                    [&](size_t i) { self[i].NAME##_(t1[i], t2[i], value); }, Operands{{self, t1, t2}, &value}); \
  }                                                                                                        \
  Tensors NAME##_scalarlist(TL self, TL t1, TL t2, Scalars s) {                                            \
    check_foreach_api_restrictions(self, t1, t2, s);                                                       \
    int d = common_device({self, t1, t2});                                                                 \
    if (d < 0) return at::native::foreach_tensor_##NAME##_scalarlist_slow(self, t1, t2, s);                \
    return batched_map("_foreach_" #NAME ".ScalarList", d, self.size(),                                    \
                       [&](size_t i) { return self[i].NAME(t1[i], t2[i], s[i]); });                        \
  }                                                                                                        \
  void NAME##_scalarlist_(TL self, TL t1, TL t2, Scalars s) {                                              \
    check_foreach_api_restrictions(self, t1, t2, s);                                                       \
    int d = common_device({self, t1, t2});                                                                 \
    if (d < 0) return at::native::foreach_tensor_##NAME##_scalarlist_slow_(self, t1, t2, s);               \
    batched_inplace("_foreach_" #NAME "_.ScalarList", d, self.size(),                                      \
                    [&](size_t i) { self[i].NAME##_(t1[i], t2[i], s[i]); }, Operands{{self, t1, t2}, nullptr, s}); \
  }                                                                                                        \
  /* The Tensor overload packs one scalar per element in a 1-d CPU tensor. */                              \
  Tensors NAME##_tensor(TL self, TL t1, TL t2, const at::Tensor& scalars) {                                \
    check_foreach_api_restrictions(self, t1, t2);                                                          \
    return NAME##_scalarlist(self, t1, t2, at::native::convert_tensor_to_scalar_list(scalars, self.size())); \
  }                                                                                                        \
  void NAME##_tensor_(TL self, TL t1, TL t2, const at::Tensor& scalars) {                                  \
    check_foreach_api_restrictions(self, t1, t2);                                                          \
    NAME##_scalarlist_(self, t1, t2, at::native::convert_tensor_to_scalar_list(scalars, self.size()));     \
  }
FOREACH_ADDC(addcmul)
FOREACH_ADDC(addcdiv)
#undef FOREACH_ADDC

// ------------------------------------------------------------ lerp

Tensors lerp_scalar(TL self, TL end, const c10::Scalar& w) {
  check_foreach_api_restrictions(self, end);
  int d = common_device({self, end});
  if (d < 0) return at::native::foreach_tensor_lerp_list_kernel_slow(self, end, w);
  return batched_map("_foreach_lerp.Scalar", d, self.size(), [&](size_t i) { return self[i].lerp(end[i], w); }, &w);
}
void lerp_scalar_(TL self, TL end, const c10::Scalar& w) {
  check_foreach_api_restrictions(self, end);
  int d = common_device({self, end});
  if (d < 0) return at::native::foreach_tensor_lerp_list_kernel_slow_(self, end, w);
  const int64_t captures[] = {lerp_captures(w)};
  batched_inplace("_foreach_lerp_.Scalar", d, self.size(), [&](size_t i) { self[i].lerp_(end[i], w); },
                  Operands{{self, end}, &w, {}, nullptr, captures});
}
Tensors lerp_scalarlist(TL self, TL end, Scalars w) {
  check_foreach_api_restrictions(self, end, w);
  int d = common_device({self, end});
  if (d < 0) return at::native::foreach_tensor_lerp_scalarlist_kernel_slow(self, end, w);
  return batched_map("_foreach_lerp.ScalarList", d, self.size(), [&](size_t i) { return self[i].lerp(end[i], w[i]); });
}
void lerp_scalarlist_(TL self, TL end, Scalars w) {
  check_foreach_api_restrictions(self, end, w);
  int d = common_device({self, end});
  if (d < 0) return at::native::foreach_tensor_lerp_scalarlist_kernel_slow_(self, end, w);
  std::vector<int64_t> captures;
  for (const c10::Scalar& s : w) captures.push_back(lerp_captures(s));
  batched_inplace("_foreach_lerp_.ScalarList", d, self.size(), [&](size_t i) { self[i].lerp_(end[i], w[i]); },
                  Operands{{self, end}, nullptr, w, nullptr, captures});
}
Tensors lerp_list(TL self, TL end, TL w) {
  check_foreach_api_restrictions(self, end, w);
  int d = common_device({self, end, w});
  if (d < 0) return at::native::foreach_tensor_ternary_lerp_slow(self, end, w);
  return batched_map("_foreach_lerp.List", d, self.size(), [&](size_t i) { return self[i].lerp(end[i], w[i]); });
}
void lerp_list_(TL self, TL end, TL w) {
  check_foreach_api_restrictions(self, end, w);
  int d = common_device({self, end, w});
  if (d < 0) return at::native::foreach_tensor_ternary_lerp_slow_(self, end, w);
  batched_inplace("_foreach_lerp_.List", d, self.size(), [&](size_t i) { self[i].lerp_(end[i], w[i]); },
                  Operands{{self, end, w}});
}

// ------------------------------------------------------------ unary

#define FOREACH_UNARY(NAME)                                                                              \
  Tensors NAME##_unary(TL self) {                                                                        \
    check_foreach_api_restrictions(self);                                                                \
    int d = common_device({self});                                                                       \
    if (d < 0) return at::native::foreach_tensor_##NAME##_slow(self);                                    \
    return batched_map("_foreach_" #NAME, d, self.size(), [&](size_t i) { return self[i].NAME(); });     \
  }                                                                                                      \
  void NAME##_unary_(TL self) {                                                                          \
    check_foreach_api_restrictions(self);                                                                \
    int d = common_device({self});                                                                       \
    if (d < 0) return at::native::foreach_tensor_##NAME##_slow_(self);                                   \
    batched_inplace("_foreach_" #NAME "_", d, self.size(), [&](size_t i) { self[i].NAME##_(); }, Operands{{self}}); \
  }
// Every per-tensor op here builds through elementwise() (ProgramBatch's rule).
#define UNARY_OPS(X)                                                                                     \
  X(abs) X(acos) X(asin) X(atan) X(ceil) X(cos) X(cosh) X(erf) X(erfc) X(exp) X(expm1) X(floor) X(frac)  \
  X(lgamma) X(log) X(log10) X(log1p) X(log2) X(neg) X(reciprocal) X(round) X(rsqrt) X(sigmoid) X(sign)   \
  X(sin) X(sinh) X(sqrt) X(tan) X(tanh) X(trunc)
UNARY_OPS(FOREACH_UNARY)
#undef FOREACH_UNARY

// ------------------------------------------------------------ norm, zero_, copy_, clone
// These build into the batch's program directly (their per-tensor ops do
// not go through elementwise()).

std::string ord_name(double p) {
  if (std::isinf(p)) return p > 0 ? "inf" : "-inf";
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", p);
  return buffer;
}

// linalg_vector_norm(t, ord, dim=None, keepdim=False, dtype) of each element.
Tensors norm(TL self, const c10::Scalar& ord, std::optional<c10::ScalarType> dtype) {
  check_foreach_api_restrictions(self);
  int d = common_device({self});
  bool complex = false;
  for (const at::Tensor& t : self) complex = complex || t.is_complex();
  if (d < 0 || complex || ord.isComplex()) return at::native::foreach_tensor_norm_slow(self, ord, dtype);
  double p = ord.toDouble();
  for (const at::Tensor& t : self) {
    TORCH_CHECK(c10::isFloatingType(t.scalar_type()),
                "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", t.scalar_type());
    // Only 0 and positive finite orders have an identity (ATen names +inf itself).
    TORCH_CHECK(!(p == INFINITY) || t.numel() != 0, "_foreach_norm cannot compute the infinity norm on an empty "
                "tensor because the operation does not have an identity");
    TORCH_CHECK(!(p < 0) || t.numel() != 0, "linalg.vector_norm cannot compute the ", ord_name(p),
                " norm on an empty tensor because the operation does not have an identity");
  }
  c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(d));
  return batched_map("_foreach_norm.Scalar", d, self.size(), [&](size_t i) {
    const at::Tensor& t = self[i];
    c10::ScalarType result = dtype.value_or(t.scalar_type());
    at::Tensor out = at::empty({}, at::TensorOptions().dtype(result).device(where));
    Program& prog = ProgramBatch::active()->program();
    ir::Dims all = lowering::reduction_dims({}, t.dim());
    prog.write(out, lowering::vector_norm(prog.graph(), prog.read(t), p, all, false, lowering::to_ir(result)));
    return out;
  });
}

// max(t) of each element; NaN propagates.
Tensors max(TL self) {
  check_foreach_api_restrictions(self);
  int d = common_device({self});
  bool plain = true;
  for (const at::Tensor& t : self) plain = plain && !t.is_complex() && t.scalar_type() != c10::kBool;
  if (d < 0 || !plain) return at::native::foreach_tensor_max_slow(self);
  for (const at::Tensor& t : self)
    TORCH_CHECK(t.numel() > 0, "_foreach_max cannot compute the maximum of an empty tensor; max over zero elements "
                "is undefined.");
  c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(d));
  return batched_map("_foreach_max", d, self.size(), [&](size_t i) {
    const at::Tensor& t = self[i];
    at::Tensor out = at::empty({}, t.options().device(where));
    Program& prog = ProgramBatch::active()->program();
    prog.write(out, lowering::amax(prog.graph(), prog.read(t), lowering::reduction_dims({}, t.dim()), false));
    return out;
  });
}

void zero_(TL self) {
  check_foreach_api_restrictions(self);
  int d = common_device({self});
  if (d < 0) return at::native::foreach_tensor_zero_slow_(self);
  batched("_foreach_zero_", d, self.size(), [&](size_t i) {
    Program& prog = ProgramBatch::active()->program();
    const at::Tensor& t = self[i];
    prog.write(t, ir::full(prog.graph(), lowering::to_ir(t.scalar_type()), 0, to_shape(t.sizes())));
  });
}

// copy_ between tpu tensors of one device: src broadcast to self and
// converted to its dtype. Lazy conj/neg bits and complex-to-real copies
// (a warning in ATen) take copy_'s own path.
void copy_(TL self, TL src, bool non_blocking) {
  check_foreach_api_restrictions(self, src);
  int d = common_device({self, src});
  bool plain = true;
  for (TL list : {self, src})
    for (const at::Tensor& t : list) plain = plain && !t.is_conj() && !t.is_neg();
  for (size_t i = 0; plain && i < self.size(); ++i) plain = !(src[i].is_complex() && !self[i].is_complex());
  if (d < 0 || !plain) return at::native::foreach_tensor_copy_list_kernel_slow_(self, src, non_blocking);
  batched("_foreach_copy_", d, self.size(), [&](size_t i) {
    Program& prog = ProgramBatch::active()->program();
    // copy_'s error for shapes that do not broadcast, before any building.
    c10::DimVector shape = at::infer_size_dimvector(self[i].sizes(), src[i].sizes());
    TORCH_CHECK(c10::IntArrayRef(shape).equals(self[i].sizes()), "output with shape ", self[i].sizes(),
                " doesn't match the broadcast shape ", c10::IntArrayRef(shape));
    prog.write(self[i], ir::broadcast_to(prog.graph(), prog.read(src[i]), to_shape(self[i].sizes())));
  });
}

#ifdef TPU_HAS_FOREACH_CLONE
Tensors clone(TL self, std::optional<c10::MemoryFormat> memory_format) {
  check_foreach_api_restrictions(self);
  int d = common_device({self});
  bool preserve = !memory_format.has_value() || *memory_format == c10::MemoryFormat::Preserve;
  bool plain = preserve;
  for (const at::Tensor& t : self) plain = plain && t.is_contiguous() && !t.is_conj() && !t.is_neg();
  if (d < 0 || !plain) return at::native::foreach_tensor_clone_slow(self, memory_format);
  c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(d));
  return batched_map("_foreach_clone", d, self.size(), [&](size_t i) {
    Program& prog = ProgramBatch::active()->program();
    at::Tensor out = at::empty(self[i].sizes(), self[i].options().device(where));
    prog.write(out, prog.read(self[i]));
    return out;
  });
}
#endif

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define REGISTER_BINARY(NAME)                                \
  m.impl("_foreach_" #NAME ".Scalar", NAME##_scalar);        \
  m.impl("_foreach_" #NAME "_.Scalar", NAME##_scalar_);      \
  m.impl("_foreach_" #NAME ".ScalarList", NAME##_scalarlist); \
  m.impl("_foreach_" #NAME "_.ScalarList", NAME##_scalarlist_); \
  m.impl("_foreach_" #NAME ".List", NAME##_list);            \
  m.impl("_foreach_" #NAME "_.List", NAME##_list_);
  REGISTER_BINARY(add)
  REGISTER_BINARY(sub)
  REGISTER_BINARY(mul)
  REGISTER_BINARY(div)
  REGISTER_BINARY(clamp_min)
  REGISTER_BINARY(clamp_max)
  REGISTER_BINARY(maximum)
  REGISTER_BINARY(minimum)
  REGISTER_BINARY(pow)
#undef REGISTER_BINARY
  m.impl("_foreach_add.Tensor", add_tensor);
  m.impl("_foreach_add_.Tensor", add_tensor_);
  m.impl("_foreach_mul.Tensor", mul_tensor);
  m.impl("_foreach_mul_.Tensor", mul_tensor_);
  m.impl("_foreach_div.Tensor", div_tensor);
  m.impl("_foreach_div_.Tensor", div_tensor_);
  m.impl("_foreach_pow.ScalarAndTensor", pow_scalar_and_tensor);
#define REGISTER_ADDC(NAME)                                    \
  m.impl("_foreach_" #NAME ".Scalar", NAME##_scalar);          \
  m.impl("_foreach_" #NAME "_.Scalar", NAME##_scalar_);        \
  m.impl("_foreach_" #NAME ".ScalarList", NAME##_scalarlist);  \
  m.impl("_foreach_" #NAME "_.ScalarList", NAME##_scalarlist_); \
  m.impl("_foreach_" #NAME ".Tensor", NAME##_tensor);          \
  m.impl("_foreach_" #NAME "_.Tensor", NAME##_tensor_);
  REGISTER_ADDC(addcmul)
  REGISTER_ADDC(addcdiv)
#undef REGISTER_ADDC
  m.impl("_foreach_lerp.Scalar", lerp_scalar);
  m.impl("_foreach_lerp_.Scalar", lerp_scalar_);
  m.impl("_foreach_lerp.ScalarList", lerp_scalarlist);
  m.impl("_foreach_lerp_.ScalarList", lerp_scalarlist_);
  m.impl("_foreach_lerp.List", lerp_list);
  m.impl("_foreach_lerp_.List", lerp_list_);
#define REGISTER_UNARY(NAME)                       \
  m.impl("_foreach_" #NAME, NAME##_unary);         \
  m.impl("_foreach_" #NAME "_", NAME##_unary_);
  UNARY_OPS(REGISTER_UNARY)
#undef REGISTER_UNARY
  m.impl("_foreach_norm.Scalar", norm);
  m.impl("_foreach_max", max);
  m.impl("_foreach_zero_", zero_);
  m.impl("_foreach_copy_", copy_);
#ifdef TPU_HAS_FOREACH_CLONE
  m.impl("_foreach_clone", clone);
#endif
}
#undef UNARY_OPS

}  // namespace tpu::aten
