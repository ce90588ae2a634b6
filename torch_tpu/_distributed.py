"""tpu_dist: the c10d backend of tpu tensors.

Registered on import for device type "tpu", so code written for CUDA needs one
change: `dist.init_process_group("nccl")` becomes `dist.init_process_group()`
(or names "tpu_dist", or "cpu:gloo,tpu:tpu_dist" for groups that also
exchange CPU tensors). Collectives are staged through host memory over a gloo
backend on the same store (csrc/distributed/host_staged_backend.cpp): the
transport for plugins without cross-process XLA collectives, such as XLA:CPU.
torch_tpu.metrics() counts them ("collectives_host_transport",
"collective_host_bytes"). TORCH_TPU_DIST_TRANSPORT picks the transport
(`host`, the default; `device` needs a plugin whose client spans the group's
processes, which no plugin tested here has).
"""
import torch.distributed as dist

from . import _C
from . import _dtensor_rules
from . import config

TRANSPORT_ENV = "TORCH_TPU_DIST_TRANSPORT"


def _transport(group_size):
    """The transport a new group uses: TORCH_TPU_DIST_TRANSPORT, else `host`."""
    value = (config.get(TRANSPORT_ENV) or "host").strip().lower()
    if value not in ("host", "device"):
        raise ValueError("%s=%r: expected 'host' or 'device'" % (TRANSPORT_ENV, value))
    if value == "device" and group_size > 1:
        info = _C._init()
        spans = info["global_device_count"] > len(info["device_kinds"])
        raise RuntimeError(
            "%s=device: a group of %d processes needs one XLA program across them, and the %s plugin's client %s; "
            "tpu_dist runs collectives across processes through host memory (unset %s or set it to 'host'). "
            "Collectives over several devices of one process run on the devices: torch_tpu.distributed."
            % (TRANSPORT_ENV, group_size, info["platform"],
               "spans other processes' devices, but tpu_dist's cross-process device transport is not built yet"
               if spans else "holds only this process's devices", TRANSPORT_ENV))
    return value

BACKEND = "tpu_dist"


def _create_backend(options, backend_options=None):
    if not dist.is_gloo_available():
        raise RuntimeError(
            "tpu_dist stages collectives through host memory over gloo, and this torch build has no gloo "
            "(torch.distributed.is_gloo_available() is False)")
    _transport(options.group_size)
    _dtensor_rules.register()  # DTensor needs a process group: its rules are in place before its first op
    _C._register_host_staged_backend()
    host = dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, options.timeout)
    return _C._HostStagedBackend(host, options.store, options.group_rank, options.group_size)


def _default_groups_serve_cpu_too():
    """`init_process_group()` with no backend: torch gives the current accelerator
    its registered backend alone, yet makes gloo the group's default backend, so
    a third-party accelerator's default group fails in DDP and anything else that
    asks for the default ("Could not find backend type 1"). When the accelerator
    is tpu, such groups also get gloo for CPU tensors: the default exists, and
    CPU collectives work as they did with torch's former "cpu:gloo,cuda:nccl"."""
    from torch.distributed import distributed_c10d as c10d

    base = c10d.BackendConfig
    if getattr(base, "_torch_tpu_shim", False):
        return

    class BackendConfig(base):
        _torch_tpu_shim = True

        def __init__(self, backend):
            super().__init__(backend)
            undefined = str(backend) == dist.Backend.UNDEFINED
            if undefined and set(self.device_backend_map) == {"tpu"} and dist.is_gloo_available():
                self.device_backend_map = {"cpu": dist.Backend(dist.Backend.GLOO), **self.device_backend_map}

    c10d.BackendConfig = BackendConfig


def install():
    """Registers tpu_dist as the c10d backend of device type "tpu" (once)."""
    if not dist.is_available() or BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["tpu"])
    _default_groups_serve_cpu_too()


__all__ = ["BACKEND", "install"]
