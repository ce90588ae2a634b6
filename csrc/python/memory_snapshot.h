// torch.tpu.memory's recording and snapshot bindings (CUDA's snapshot shape).
#pragma once

namespace pybind11 {
class module_;
}

namespace tpu::python {

// _record_memory_history(enabled, python_stacks, cpp_stacks, max_entries) and
// _memory_snapshot() -> {"segments": [...], "device_traces": [[...] per device]}.
void bind_memory_history(pybind11::module_& m);

}  // namespace tpu::python
