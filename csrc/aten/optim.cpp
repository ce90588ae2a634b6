// torch.optim's fused=True kernels (_fused_adam_, _fused_adamw_, _fused_sgd_):
// every tensor of every list updated by one program, hyperparameters as
// runtime scalars. grad_scale unscales the gradients (written back, as on
// CUDA); found_inf == 1 leaves every tensor as it was. Math in lowering/optim.
// Also torch.amp.GradScaler's two kernels (unscale + inf/NaN check, scale
// update), each one program instead of a CPU fallback with its copies.
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "aten/op_helpers.h"
#include "aten/program.h"
#include "ir/ops.h"
#include "lowering/elementwise.h"
#include "lowering/optim.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using TL = at::TensorList;

// The device of every tensor in `lists`, which must all be tpu tensors on one device.
int list_device(const char* name, std::initializer_list<TL> lists) {
  int device = common_device(lists);
  if (device >= 0) return device;
  for (TL list : lists)
    for (const at::Tensor& t : list)
      TORCH_CHECK(t.defined() && t.is_privateuseone(), name, ": expected every tensor on a tpu device, got one on ",
                  t.defined() ? t.device().str() : std::string("(undefined)"));
  TORCH_CHECK(false, name, ": expected every tensor on one tpu device");
}

// What grad_scale / found_inf make of a program's updates.
struct AmpScaling {
  std::optional<ir::Value> scale;     // 0-dim
  std::optional<ir::Value> skip;      // 0-dim pred: found_inf == 1
  ir::Value unscale(Program& p, ir::Value grad) const {
    if (!scale) return grad;
    return ir::binary(p.graph(), ir::Op::Divide, grad,
                      ir::broadcast_to(p.graph(), *scale, p.graph().type(grad).shape));
  }
  // Writes `updated` into t, or t's old value when the step is skipped.
  void write(Program& p, const at::Tensor& t, ir::Value old, ir::Value updated) const {
    if (skip) updated = ir::select(p.graph(), ir::broadcast_to(p.graph(), *skip, p.graph().type(old).shape),
                                   old, updated);
    p.write(t, updated);
  }
};

AmpScaling amp_scaling(Program& p, const std::optional<at::Tensor>& grad_scale,
                       const std::optional<at::Tensor>& found_inf, c10::ScalarType opmath) {
  AmpScaling amp;
  if (grad_scale && grad_scale->defined()) amp.scale = p.read_as(*grad_scale, opmath);
  if (found_inf && found_inf->defined()) {
    ir::Value found = p.read_as(*found_inf, opmath);
    amp.skip = ir::compare(p.graph(), found, ir::full(p.graph(), lowering::to_ir(opmath), 1, {}), ir::Compare::EQ);
  }
  return amp;
}

// The dtype the update computes in (f32 for half types); every param has one dtype.
c10::ScalarType opmath_of(const char* name, TL params) {
  for (const at::Tensor& t : params)
    TORCH_CHECK(t.scalar_type() == params[0].scalar_type(), name, ": expected all params of one dtype");
  return lowering::opmath_type(params[0].scalar_type());
}

// The learning rate: a tensor (read on the device) or a runtime scalar.
ir::Value lr_value(Program& p, const std::optional<at::Tensor>& lr_tensor, double lr, c10::ScalarType opmath) {
  return lr_tensor ? p.read_as(*lr_tensor, opmath) : p.scalar(lr, lowering::to_ir(opmath));
}

void fused_adam(const char* name, bool adamw, TL params, TL grads, TL exp_avgs, TL exp_avg_sqs,
                TL max_exp_avg_sqs, TL state_steps, const std::optional<at::Tensor>& lr_tensor, double lr,
                double beta1, double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && state_steps.size() == n &&
                  (!amsgrad || max_exp_avg_sqs.size() == n),
              name, ": expected lists of equal length");
  if (n == 0) return;
  int device = list_device(name, {params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps});
  c10::DeviceGuard guard(params[0].device());
  Program p(name, device);
  ir::Graph& g = p.graph();
  c10::ScalarType opmath = opmath_of(name, params);
  ir::DType dt = lowering::to_ir(opmath);
  lowering::AdamHyper h{lr_value(p, lr_tensor, lr, opmath), p.scalar(beta1, dt), p.scalar(beta2, dt),
                        p.scalar(weight_decay, dt), p.scalar(eps, dt), amsgrad, maximize, adamw,
                        weight_decay != 0};
  AmpScaling amp = amp_scaling(p, grad_scale, found_inf, opmath);
  for (size_t i = 0; i < n; ++i) {
    lowering::AdamState old{p.read_as(params[i], opmath), p.read_as(grads[i], opmath),
                            p.read_as(exp_avgs[i], opmath), p.read_as(exp_avg_sqs[i], opmath), std::nullopt};
    if (amsgrad) old.max_exp_avg_sq = p.read_as(max_exp_avg_sqs[i], opmath);
    lowering::AdamState in = old;
    in.grad = amp.unscale(p, old.grad);
    lowering::AdamState next = lowering::adam_update(g, in, p.read_as(state_steps[i], opmath), h);
    amp.write(p, params[i], old.param, next.param);
    amp.write(p, exp_avgs[i], old.exp_avg, next.exp_avg);
    amp.write(p, exp_avg_sqs[i], old.exp_avg_sq, next.exp_avg_sq);
    if (amsgrad) amp.write(p, max_exp_avg_sqs[i], *old.max_exp_avg_sq, *next.max_exp_avg_sq);
    if (amp.scale) amp.write(p, grads[i], old.grad, in.grad);
  }
  p.run();
}

#define ADAM_KERNELS(NAME, ADAMW)                                                                              \
  void NAME(TL self, TL grads, TL exp_avgs, TL exp_avg_sqs, TL max_exp_avg_sqs, TL state_steps, double lr,      \
            double beta1, double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,            \
            const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {           \
    fused_adam(#NAME, ADAMW, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, std::nullopt, lr, \
               beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);                       \
  }                                                                                                            \
  void NAME##tensor_lr(TL self, TL grads, TL exp_avgs, TL exp_avg_sqs, TL max_exp_avg_sqs, TL state_steps,      \
                       const at::Tensor& lr, double beta1, double beta2, double weight_decay, double eps,        \
                       bool amsgrad, bool maximize, const std::optional<at::Tensor>& grad_scale,                 \
                       const std::optional<at::Tensor>& found_inf) {                                             \
    fused_adam(#NAME, ADAMW, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, 0, beta1,     \
               beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);                              \
  }
ADAM_KERNELS(_fused_adam_, false)
ADAM_KERNELS(_fused_adamw_, true)
#undef ADAM_KERNELS

void fused_sgd(TL params, TL grads, TL momentum_buffers, double weight_decay, double momentum,
               const std::optional<at::Tensor>& lr_tensor, double lr, double dampening, bool nesterov,
               bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
               const std::optional<at::Tensor>& found_inf) {
  const char* name = "_fused_sgd_";
  size_t n = params.size();
  bool has_momentum = momentum != 0;
  TORCH_CHECK(grads.size() == n && (!has_momentum || momentum_buffers.size() == n), name,
              ": expected lists of equal length");
  if (n == 0) return;
  int device = list_device(name, {params, grads, momentum_buffers});
  c10::DeviceGuard guard(params[0].device());
  Program p(name, device);
  c10::ScalarType opmath = opmath_of(name, params);
  ir::DType dt = lowering::to_ir(opmath);
  lowering::SgdHyper h{lr_value(p, lr_tensor, lr, opmath), p.scalar(weight_decay, dt), p.scalar(momentum, dt),
                       p.scalar(dampening, dt), nesterov, maximize, is_first_step, has_momentum,
                       weight_decay != 0};
  AmpScaling amp = amp_scaling(p, grad_scale, found_inf, opmath);
  for (size_t i = 0; i < n; ++i) {
    ir::Value param = p.read_as(params[i], opmath), grad = p.read_as(grads[i], opmath);
    std::optional<ir::Value> buffer;
    if (has_momentum && !is_first_step) buffer = p.read_as(momentum_buffers[i], opmath);
    ir::Value unscaled = amp.unscale(p, grad);
    auto [next, next_buffer] = lowering::sgd_update(p.graph(), param, unscaled, buffer, h);
    amp.write(p, params[i], param, next);
    // A first step's buffer is fresh (empty_like): a skipped first step leaves it zero
    // rather than holding the inf/NaN gradient.
    if (has_momentum) {
      ir::Value before = buffer ? *buffer : ir::full(p.graph(), dt, 0, p.graph().type(param).shape);
      amp.write(p, momentum_buffers[i], before, *next_buffer);
    }
    if (amp.scale) amp.write(p, grads[i], grad, unscaled);
  }
  p.run();
}

void fused_sgd_(TL self, TL grads, TL momentum_buffer_list, double weight_decay, double momentum, double lr,
                double dampening, bool nesterov, bool maximize, bool is_first_step,
                const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  fused_sgd(self, grads, momentum_buffer_list, weight_decay, momentum, std::nullopt, lr, dampening, nesterov,
            maximize, is_first_step, grad_scale, found_inf);
}

void fused_sgd_tensor_lr(TL self, TL grads, TL momentum_buffer_list, double weight_decay, double momentum,
                         const at::Tensor& lr, double dampening, bool nesterov, bool maximize, bool is_first_step,
                         const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  fused_sgd(self, grads, momentum_buffer_list, weight_decay, momentum, lr, 0, dampening, nesterov, maximize,
            is_first_step, grad_scale, found_inf);
}

// ------------------------------------------------------------ GradScaler

// A 1-element tensor's value as a 0-dim one.
ir::Value read_single(Program& p, const at::Tensor& t) { return ir::reshape(p.graph(), p.read(t), {}); }

void check_single(const char* name, const at::Tensor& t, const char* what, c10::ScalarType dtype) {
  TORCH_CHECK(t.numel() == 1, name, ": ", what, " must be a 1-element tensor, got ", t.numel(), " elements");
  TORCH_CHECK(t.scalar_type() == dtype, name, ": ", what, " must have dtype ", c10::toString(dtype), ", got ",
              t.scalar_type());
}

// Each gradient *= inv_scale (computed in f32 for half types, as on CUDA);
// found_inf becomes 1 if any gradient held an inf or NaN, and keeps its value otherwise.
void amp_unscale(TL self, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  const char* name = "_amp_foreach_non_finite_check_and_unscale_";
  check_single(name, inv_scale, "inv_scale", at::kFloat);
  check_single(name, found_inf, "found_inf", at::kFloat);
  if (self.empty()) return;
  int device = list_device(name, {self, at::TensorList(found_inf), at::TensorList(inv_scale)});
  c10::DeviceGuard guard(found_inf.device());
  Program p(name, device);
  ir::Graph& g = p.graph();
  ir::Value scale = read_single(p, inv_scale);
  ir::Value any_bad = ir::constant(g, ir::DType::Pred, 0);
  for (const at::Tensor& t : self) {
    TORCH_CHECK(c10::isFloatingType(t.scalar_type()), name, ": expected floating-point gradients, got ",
                t.scalar_type());
    ir::DType opmath = lowering::to_ir(lowering::opmath_type(t.scalar_type()));
    lowering::Unscaled u = lowering::amp_unscale(g, ir::convert(g, p.read(t), opmath), scale);
    any_bad = ir::binary(g, ir::Op::Or, any_bad, u.non_finite);
    p.write(t, u.grad);
  }
  ir::Value found = ir::select(g, any_bad, ir::constant(g, ir::DType::F32, 1), read_single(p, found_inf));
  p.write(found_inf, ir::reshape(g, found, to_shape(found_inf.sizes())));
  p.run();
}

// The scale after a step: times backoff after an inf/NaN (and the growth count
// restarts), times growth after growth_interval clean steps in a row unless that
// overflows float32; the growth count otherwise counts the clean step.
at::Tensor& amp_update_scale(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  const char* name = "_amp_update_scale_";
  check_single(name, self, "current_scale", at::kFloat);
  check_single(name, growth_tracker, "growth_tracker", at::kInt);
  check_single(name, found_inf, "found_inf", at::kFloat);
  int device = list_device(name, {at::TensorList(self), at::TensorList(growth_tracker), at::TensorList(found_inf)});
  c10::DeviceGuard guard(self.device());
  Program p(name, device);
  ir::Graph& g = p.graph();
  lowering::ScaleUpdate next = lowering::amp_update_scale(
      g, read_single(p, self), read_single(p, growth_tracker), read_single(p, found_inf),
      p.scalar(growth_factor, ir::DType::F32), p.scalar(backoff_factor, ir::DType::F32),
      p.scalar(growth_interval, ir::DType::S32));
  p.write(self, ir::reshape(g, next.scale, to_shape(self.sizes())));
  p.write(growth_tracker, ir::reshape(g, next.growth_tracker, to_shape(growth_tracker.sizes())));
  p.run();
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", amp_unscale);
  m.impl("_amp_update_scale_", amp_update_scale);
  m.impl("_fused_adam_", _fused_adam_);
  m.impl("_fused_adam_.tensor_lr", _fused_adam_tensor_lr);
  m.impl("_fused_adamw_", _fused_adamw_);
  m.impl("_fused_adamw_.tensor_lr", _fused_adamw_tensor_lr);
  m.impl("_fused_sgd_", fused_sgd_);
  m.impl("_fused_sgd_.tensor_lr", fused_sgd_tensor_lr);
}

}  // namespace tpu::aten
