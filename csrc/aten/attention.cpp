// Scaled dot-product attention: F.scaled_dot_product_attention picks ATen's
// "overrideable" fused backend on tpu (the choice below), whose forward and
// backward are one program each (lowering/attention.*) instead of the math
// decomposition's ~20 ops (scale, matmul, mask, safe softmax, matmul; the
// key and value copied per query head under enable_gqa). Inputs the fused
// kernels do not take (dropout, other ranks, mixed dtypes) go the math way.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>

#include "aten/attention.h"
#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/attention.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using sdp::SDPBackend;

// q [B, Hq, L, E], k [B, Hk, S, E] and v [B, Hk, S, Ev] agree, Hk > 0 dividing Hq. Sizes are
// read as SymInts: under torch.compile the choice is made on fake tensors whose sizes may be
// symbolic (comparing them guards on the answer).
bool shapes_agree(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const c10::SymInt hk = k.sym_size(1);
  return q.sym_size(0) == k.sym_size(0) && q.sym_size(0) == v.sym_size(0) && hk == v.sym_size(1) &&
         k.sym_size(2) == v.sym_size(2) && q.sym_size(3) == k.sym_size(3) && hk > 0 && q.sym_size(1) % hk == 0;
}

// The bias (rank <= 4) broadcasts to the scores' shape [B, Hq, L, S].
bool bias_broadcasts(const at::Tensor& bias, const at::Tensor& q, const at::Tensor& k) {
  if (bias.dim() > 4) return false;
  const c10::SymInt full[] = {q.sym_size(0), q.sym_size(1), q.sym_size(2), k.sym_size(2)};
  for (int64_t i = 0; i < bias.dim(); ++i) {
    const c10::SymInt size = bias.sym_size(bias.dim() - 1 - i);
    if (size != 1 && size != full[3 - i]) return false;
  }
  return true;
}

// The fused kernels' domain: 4-d q, k, v of one floating dtype whose shapes agree (more query
// heads than key heads only under enable_gqa, as the math path requires), no dropout, a mask of
// q's dtype or bool that broadcasts, nothing empty.
bool fused_kernels_take(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& mask, double dropout_p, bool enable_gqa) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || dropout_p != 0.0) return false;
  if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type() || !at::isFloatingType(q.scalar_type()))
    return false;
  if (q.is_nested() || k.is_nested() || v.is_nested()) return false;
  if (q.sym_numel() == 0 || k.sym_numel() == 0 || v.sym_numel() == 0) return false;
  if (!shapes_agree(q, k, v) || (q.sym_size(1) != k.sym_size(1) && !enable_gqa)) return false;
  if (mask.has_value() && mask->defined())
    return (mask->scalar_type() == at::kBool || mask->scalar_type() == q.scalar_type()) && bias_broadcasts(*mask, q, k);
  return true;
}

std::atomic<bool> subclasses_take_fused{false};

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool /*is_causal*/,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  const at::Context& ctx = at::globalContext();
  // A tensor subclass in eager code takes the math path, whose ops it knows, until DTensor has
  // sharding rules for the fused ops (see attention.h); under torch.compile's tracing modes
  // the fused op is traced.
  const bool math_subclass = q.key_set().has(c10::DispatchKey::Python) && !c10::impl::dispatch_mode_enabled() &&
                             !subclasses_take_fused.load(std::memory_order_relaxed);
  if (ctx.userEnabledOverrideableSDP() && !math_subclass && fused_kernels_take(q, k, v, mask, dropout_p, enable_gqa))
    return static_cast<int64_t>(SDPBackend::overrideable);
  return static_cast<int64_t>(ctx.userEnabledMathSDP() ? SDPBackend::math : SDPBackend::error);
}

double scale_for(const at::Tensor& q, std::optional<double> scale) {
  return scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

void check_inputs(const char* name, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const OptTensor& bias, double dropout_p) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, name,
              ": query, key and value must be 4-dimensional, got ", q.dim(), ", ", k.dim(), " and ", v.dim());
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(), name,
              ": query, key and value must have the same dtype, got ", q.scalar_type(), ", ", k.scalar_type(),
              " and ", v.scalar_type());
  TORCH_CHECK(at::isFloatingType(q.scalar_type()), name, ": expected a floating dtype, got ", q.scalar_type());
  TORCH_CHECK(shapes_agree(q, k, v), name, ": incompatible shapes: query ", q.sizes(), ", key ", k.sizes(),
              ", value ", v.sizes());
  TORCH_CHECK_NOT_IMPLEMENTED(dropout_p == 0.0, name, ": dropout is not supported by tpu's fused attention "
                              "(scaled_dot_product_attention with dropout takes the math path)");
  TORCH_CHECK(!defined(bias) || bias_broadcasts(*bias, q, k), name, ": attn_bias of shape ", bias->sizes(),
              " does not broadcast to ", c10::IntArrayRef{q.size(0), q.size(1), q.size(2), k.size(2)});
}

// The output laid out as the query (PyTorch's meta kernel for this op: what
// torch.compile's fake tensors say), so that a compiled graph copies nothing.
at::Tensor output_like(const at::Tensor& q, int64_t ev) {
  c10::DimVector shape(q.sizes().begin(), q.sizes().end());
  shape[3] = ev;
  if (ev == q.size(3)) return at::empty_like(q);
  std::array<int64_t, 4> order{0, 1, 2, 3};
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return q.stride(a) > q.stride(b); });
  c10::DimVector strides(4);
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= shape[*it];
  }
  return at::empty_strided(shape, strides, q.options());
}

using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt,
                                 at::Tensor, at::Tensor, at::Tensor>;

ForwardResult attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const OptTensor& bias,
                        double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  constexpr const char* kName = "_scaled_dot_product_fused_attention_overrideable";
  check_inputs(kName, q, k, v, bias, dropout_p);
  TORCH_CHECK_NOT_IMPLEMENTED(!return_debug_mask, kName, ": return_debug_mask is not supported on tpu");
  c10::DeviceGuard guard(q.device());
  const double s = scale_for(q, scale);
  at::Tensor out = output_like(q, v.size(3));
  at::Tensor lse = new_tensor({q.size(0), q.size(1), q.size(2)}, at::kFloat, q.device());
  // No dropout: the seed and offset are zeros (written, as a compiled graph's saved outputs must be).
  at::Tensor seed = new_tensor({}, at::kLong, q.device()), offset = new_tensor({}, at::kLong, q.device());
  Program p(kName, q.device());
  const at::Tensor none;
  const at::Tensor* tensors[] = {&q, &k, &v, defined(bias) ? &*bias : &none, &out, &lse, &seed, &offset};
  const int64_t captures[] = {is_causal, std::bit_cast<int64_t>(s)};
  build_or_apply(p, kName, tensors, captures, [&](Program& b) {
    lowering::AttentionForward f = lowering::attention(b.graph(), b.read(q), b.read(k), b.read(v),
                                                       read_opt(b, bias), is_causal, s,
                                                       lowering::to_ir(q.scalar_type()));
    b.write(out, f.out);
    b.write(lse, f.logsumexp);
    b.write(seed, ir::constant_int(b.graph(), ir::DType::S64, 0));
    b.write(offset, ir::constant_int(b.graph(), ir::DType::S64, 0));
  });
  p.run();
  return {out, lse, at::Tensor(), at::Tensor(), q.size(2), k.size(2), seed, offset, at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& attn_bias, std::array<bool, 4> mask, const at::Tensor& /*out*/, const at::Tensor& /*lse*/,
    const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/,
    std::optional<double> scale) {
  constexpr const char* kName = "_scaled_dot_product_fused_attention_overrideable_backward";
  const OptTensor bias = attn_bias.defined() ? OptTensor(attn_bias) : std::nullopt;
  check_inputs(kName, q, k, v, bias, dropout_p);
  TORCH_CHECK(grad_out.sizes().equals(c10::IntArrayRef{q.size(0), q.size(1), q.size(2), v.size(3)}), kName,
              ": grad_out of shape ", grad_out.sizes(), " does not match the output's");
  c10::DeviceGuard guard(q.device());
  mask[3] = mask[3] && bias.has_value();
  // Laid out as their inputs (PyTorch's meta kernel: empty_like).
  at::Tensor gq = mask[0] ? at::empty_like(q) : at::Tensor(), gk = mask[1] ? at::empty_like(k) : at::Tensor(),
             gv = mask[2] ? at::empty_like(v) : at::Tensor(), gb = mask[3] ? at::empty_like(attn_bias) : at::Tensor();
  if (!(mask[0] || mask[1] || mask[2] || mask[3])) return {gq, gk, gv, gb};
  const double s = scale_for(q, scale);
  Program p(kName, q.device());
  const at::Tensor none;
  const at::Tensor* tensors[] = {&grad_out, &q, &k, &v, bias ? &attn_bias : &none, &gq, &gk, &gv, &gb};
  const int64_t captures[] = {is_causal, std::bit_cast<int64_t>(s),
                              mask[0] | mask[1] << 1 | mask[2] << 2 | mask[3] << 3};
  build_or_apply(p, kName, tensors, captures, [&](Program& b) {
    lowering::AttentionGrads r = lowering::attention_backward(b.graph(), b.read(grad_out), b.read(q), b.read(k),
                                                              b.read(v), read_opt(b, bias), is_causal, s, mask);
    if (gq.defined()) b.write(gq, r.q);
    if (gk.defined()) b.write(gk, r.k);
    if (gv.defined()) b.write(gv, r.v);
    if (gb.defined()) b.write(gb, r.bias);
  });
  p.run();
  return {gq, gk, gv, gb};
}

}  // namespace

void set_subclasses_take_fused_attention(bool take) { subclasses_take_fused.store(take); }

}  // namespace tpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &tpu::aten::fused_sdp_choice);
}  // namespace at::native

namespace tpu::aten {
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", fused_sdp_choice);
  m.impl("_scaled_dot_product_fused_attention_overrideable", attention);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", attention_backward);
}
}  // namespace tpu::aten
