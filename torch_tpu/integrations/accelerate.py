"""Hugging Face Accelerate (pinned: accelerate==1.15.0).

Accelerate names the device types it knows (cuda, mps, npu, xpu, ...); tpu is not
among them. Two places of accelerate/state.py are taught it:

- `PartialState.default_device` falls back to the CPU, so `Accelerator()`, and
  through it `transformers.Trainer`, left models on the CPU. Where it would answer
  cpu while tpu is the process's accelerator, it answers the current tpu device.
  `Accelerator(cpu=True)` / `use_cpu=True` and `ACCELERATE_TORCH_DEVICE` never ask
  it, so they still win.
- `PartialState._prepare_backend` finds no backend for a process launched by
  torchrun or `accelerate launch` (LOCAL_RANK set), so each rank trained alone as
  process 0 of 1, silently. There it now answers tpu_dist (with gloo for CPU
  tensors) and the multi-device type (MULTI_GPU, which accelerate treats as any
  accelerator's: DDP, samplers, gathers), and `set_device` places each rank on
  tpu:<local rank>.

The upstream fix would be a `torch.accelerator.current_accelerator()` branch in
both, before the CPU one.
"""
import os

import torch

BACKEND = "cpu:gloo,tpu:tpu_dist"


def _tpu_is_the_accelerator():
    accelerator = torch.accelerator.current_accelerator()
    return accelerator is not None and accelerator.type == "tpu"


def apply(state_module):
    state = state_module.PartialState
    original = state.default_device
    if getattr(original.fget, "_torch_tpu", False):
        return
    kinds = state_module.DistributedType

    def default_device(self):
        device = original.fget(self)
        if device.type == "cpu" and _tpu_is_the_accelerator():
            return torch.device("tpu", torch.tpu.current_device())
        return device

    default_device._torch_tpu = True
    state.default_device = property(default_device, doc=original.__doc__)

    prepare_backend = state._prepare_backend

    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        chosen, kind = prepare_backend(self, cpu, sagemaker_dp, backend)
        launched = int(os.environ.get("LOCAL_RANK", -1)) != -1
        if kind == kinds.NO and not cpu and launched and _tpu_is_the_accelerator():
            return backend or BACKEND, kinds.MULTI_GPU
        return chosen, kind

    state._prepare_backend = _prepare_backend

    set_device = state.set_device

    def _set_device(self):
        if self.device is None and self.distributed_type == kinds.MULTI_GPU and "tpu_dist" in (self.backend or ""):
            index = self.local_process_index % torch.tpu.device_count()
            torch.tpu.set_device(index)
            self.device = torch.device("tpu", index)
            return
        set_device(self)

    state.set_device = _set_device
