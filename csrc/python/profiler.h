// The device's events in torch.profiler (see profiler.cpp).
#pragma once

namespace tpu::python {

// Registers torch_tpu's Kineto activity profiler as PyTorch's PrivateUse1
// profiler; false when this torch was built without Kineto's plugin registry.
bool register_profiler();

}  // namespace tpu::python
