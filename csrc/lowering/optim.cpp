#include "lowering/optim.h"

#include "ir/ops.h"
#include "lowering/formula.h"
#include "lowering/reduce.h"

namespace tpu::lowering {
AdamState adam_update(ir::Graph& g, const AdamState& s, ir::Value step, const AdamHyper& h) {
  Formula o{g};
  auto at = [&](ir::Value scalar) { return ir::broadcast_to(g, scalar, g.type(s.param).shape); };
  ir::Value param = s.param, grad = s.grad;
  if (h.maximize) grad = o.neg(grad);
  if (h.has_weight_decay && h.decoupled_weight_decay)
    param = o.mul(param, at(o.sub(o.c(h.lr, 1), o.mul(h.lr, h.weight_decay))));
  else if (h.has_weight_decay)
    grad = o.add(grad, o.mul(at(h.weight_decay), param));
  // exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad^2
  ir::Value exp_avg = o.add(s.exp_avg, o.mul(at(o.sub(o.c(h.beta1, 1), h.beta1)), o.sub(grad, s.exp_avg)));
  ir::Value exp_avg_sq = o.add(o.mul(at(h.beta2), s.exp_avg_sq),
                               o.mul(at(o.sub(o.c(h.beta2, 1), h.beta2)), o.mul(grad, grad)));
  ir::Value bias_correction1 = o.sub(o.c(step, 1), o.pow(h.beta1, step));
  ir::Value bias_correction2_sqrt = o.sqrt(o.sub(o.c(step, 1), o.pow(h.beta2, step)));
  AdamState next{param, s.grad, exp_avg, exp_avg_sq, std::nullopt};
  ir::Value second = exp_avg_sq;
  if (h.amsgrad) {
    second = o.max(*s.max_exp_avg_sq, exp_avg_sq);
    next.max_exp_avg_sq = second;
  }
  ir::Value denom = o.add(o.div(o.sqrt(second), at(bias_correction2_sqrt)), at(h.eps));
  ir::Value step_size = o.div(h.lr, bias_correction1);
  next.param = o.sub(param, o.mul(at(step_size), o.div(exp_avg, denom)));
  return next;
}

std::pair<ir::Value, std::optional<ir::Value>> sgd_update(ir::Graph& g, ir::Value param, ir::Value grad,
                                                          std::optional<ir::Value> momentum_buffer,
                                                          const SgdHyper& h) {
  Formula o{g};
  auto at = [&](ir::Value scalar) { return ir::broadcast_to(g, scalar, g.type(param).shape); };
  if (h.maximize) grad = o.neg(grad);
  if (h.has_weight_decay) grad = o.add(grad, o.mul(at(h.weight_decay), param));
  std::optional<ir::Value> buffer;
  if (h.has_momentum) {
    // The first step starts the buffer at the gradient; later ones decay it.
    buffer = h.first_step ? grad
                          : o.add(o.mul(at(h.momentum), *momentum_buffer),
                                  o.mul(at(o.sub(o.c(h.dampening, 1), h.dampening)), grad));
    grad = h.nesterov ? o.add(grad, o.mul(at(h.momentum), *buffer)) : *buffer;
  }
  return {o.sub(param, o.mul(at(h.lr), grad)), buffer};
}

Unscaled amp_unscale(ir::Graph& g, ir::Value grad, ir::Value inv_scale) {
  ir::Value scaled = ir::binary(g, ir::Op::Multiply, grad,
                                ir::broadcast_to(g, ir::convert(g, inv_scale, g.type(grad).dtype), g.type(grad).shape));
  return {scaled, ir::unary(g, ir::Op::Not, all_finite(g, grad))};
}

ScaleUpdate amp_update_scale(ir::Graph& g, ir::Value scale, ir::Value tracker, ir::Value found_inf,
                             ir::Value growth_factor, ir::Value backoff_factor, ir::Value growth_interval) {
  using ir::DType;
  ir::Value found = ir::compare(g, found_inf, ir::constant(g, DType::F32, 0), ir::Compare::NE);
  ir::Value successful = ir::binary(g, ir::Op::Add, tracker, ir::constant(g, DType::S32, 1));
  ir::Value grow_now = ir::compare(g, successful, growth_interval, ir::Compare::EQ);
  ir::Value grown = ir::binary(g, ir::Op::Multiply, scale, growth_factor);
  ir::Value grown_finite = g.add(ir::Op::IsFinite, {grown}, ir::Type{DType::Pred, {}});
  ir::Value backed_off = ir::binary(g, ir::Op::Multiply, scale, backoff_factor);
  ir::Value clean_scale = ir::select(g, grow_now, ir::select(g, grown_finite, grown, scale), scale);
  ir::Value zero = ir::constant(g, DType::S32, 0);
  ir::Value clean_tracker = ir::select(g, grow_now, zero, successful);
  return {ir::select(g, found, backed_off, clean_scale), ir::select(g, found, zero, clean_tracker)};
}

}  // namespace tpu::lowering
