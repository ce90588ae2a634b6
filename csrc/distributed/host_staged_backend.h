// The tpu_dist c10d backend, host-staged transport: each collective copies its
// tpu tensors to host memory, runs the same collective on a CPU backend (gloo)
// over the process group's store, and copies the results back. It is the
// transport for plugins without cross-process XLA collectives (XLA:CPU) and
// the reference the device-native transport is tested against.
#pragma once

namespace pybind11 {
class module_;
}

namespace tpu::distributed {

// Adds torch_tpu._C._HostStagedBackend(cpu_backend, rank, size).
void bind(pybind11::module_& m);

}  // namespace tpu::distributed
