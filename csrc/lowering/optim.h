// Optimizer updates of PyTorch's fused kernels (torch.optim's fused=True):
// one tensor's new state from its old state, in the opmath dtype.
#pragma once

#include <optional>

#include "ir/graph.h"

namespace tpu::lowering {

// Hyperparameters are 0-dim values (runtime parameters: schedules do not recompile).
struct AdamHyper {
  ir::Value lr, beta1, beta2, weight_decay, eps;
  bool amsgrad = false, maximize = false;
  bool decoupled_weight_decay = false;  // AdamW
  bool has_weight_decay = false;        // weight_decay != 0 (0 * inf would be NaN)
};

struct AdamState {
  ir::Value param, grad, exp_avg, exp_avg_sq;
  std::optional<ir::Value> max_exp_avg_sq;  // amsgrad only
};

// `step` (0-dim) is the step count after this update's increment.
AdamState adam_update(ir::Graph& g, const AdamState& s, ir::Value step, const AdamHyper& h);

struct SgdHyper {
  ir::Value lr, weight_decay, momentum, dampening;
  bool nesterov = false, maximize = false, first_step = false, has_momentum = false, has_weight_decay = false;
};

// Returns (param, momentum buffer); the buffer is unused without momentum.
std::pair<ir::Value, std::optional<ir::Value>> sgd_update(ir::Graph& g, ir::Value param, ir::Value grad,
                                                          std::optional<ir::Value> momentum_buffer,
                                                          const SgdHyper& h);

// torch.amp.GradScaler's two kernels.
// One gradient unscaled: grad * inv_scale (0-dim, converted to grad's dtype), and
// whether grad held an inf or NaN (0-dim pred).
struct Unscaled {
  ir::Value grad, non_finite;
};
Unscaled amp_unscale(ir::Graph& g, ir::Value grad, ir::Value inv_scale);
// The scale after a step (all 0-dim; scale f32, growth_tracker s32): times backoff
// after an inf/NaN (found_inf != 0; the growth count restarts), times growth after
// growth_interval clean steps in a row unless that overflows, the growth count
// otherwise counting the clean step.
struct ScaleUpdate {
  ir::Value scale, growth_tracker;
};
ScaleUpdate amp_update_scale(ir::Graph& g, ir::Value scale, ir::Value growth_tracker, ir::Value found_inf,
                             ir::Value growth_factor, ir::Value backoff_factor, ir::Value growth_interval);

}  // namespace tpu::lowering
