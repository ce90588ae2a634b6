// Programs from outside torch_tpu (StableHLO functions lowered by JAX), called
// on tpu tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace tpu::aten {

// Calls the StableHLO function `name` on `inputs`, writing its results into
// `outputs` (tpu tensors of the result types, on the inputs' device). `text`
// holds the function's definitions, renamed to start with `name`; it is read on
// the first call of `name` only (later calls may pass it empty).
void call_external(const std::string& name, const std::string& text, const std::vector<at::Tensor>& inputs,
                   const std::vector<at::Tensor>& outputs);

}  // namespace tpu::aten
