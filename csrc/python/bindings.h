// The parts of torch_tpu._C that live beside module.cpp, each installed by it.
#pragma once

namespace pybind11 {
class module_;
}

namespace tpu::python {

// Registers torch_tpu's Kineto activity profiler as PyTorch's PrivateUse1
// profiler (profiler.cpp); false when this torch was built without Kineto's
// plugin registry.
bool register_profiler();

// torch.tpu.memory's recording and snapshot in CUDA's shape (memory_snapshot.cpp):
// _record_memory_history(enabled, python_stacks, cpp_stacks, max_entries) and
// _memory_snapshot() -> {"segments": [...], "device_traces": [[...] per device]}.
void bind_memory_history(pybind11::module_& m);

}  // namespace tpu::python
