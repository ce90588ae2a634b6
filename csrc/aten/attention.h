// What the Python side tells scaled dot-product attention's backend choice (aten/attention.cpp).
#pragma once

namespace tpu::aten {

// A tensor subclass in eager code (DTensor) takes the fused kernels only once it
// knows them: torch_tpu registers DTensor's sharding rules for them
// (torch_tpu/_dtensor_rules.py) and then sets this. Until then such calls take
// the math path, whose ops every subclass knows.
void set_subclasses_take_fused_attention(bool take);

}  // namespace tpu::aten
