// What csrc/distributed/ gives the Python module (csrc/python/module.cpp).
//
// Two transports move tpu tensors between ranks or devices:
// - host_staged_backend.cpp, tpu_dist's c10d backend: each collective copies its
//   tpu tensors to host memory, runs the same collective on a CPU backend (gloo)
//   over the process group's store, and copies the results back. It is the
//   transport between processes for plugins without cross-process XLA programs
//   (XLA:CPU).
// - device_collectives.cpp, the device-native transport: a collective over tpu
//   tensors is one replicated XLA program (stablehlo.all_reduce, all_gather, ...)
//   over the devices that hold them, compiled once per (collective, reduction,
//   shape, dtype, devices) and cached like any program; the values never leave
//   the devices.
#pragma once

namespace pybind11 {
class module_;
}

namespace tpu::distributed {

// Adds torch_tpu._C._register_host_staged_backend(), which adds
// _HostStagedBackend(host_backend, store, rank, size).
void bind_host_staged_backend(pybind11::module_& m);

// Adds torch_tpu._C._device_collective(kind, inputs, outputs, reduce_op, root, pairs):
// the collective over one tensor per device of this process (torch_tpu/distributed.py).
void bind_device_collectives(pybind11::module_& m);

}  // namespace tpu::distributed
