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

And one place of accelerate/commands/launch.py:

- `_validate_launch_command` counts devices with `torch.cuda` (and the other types
  it knows), so `accelerate launch --num_processes 2 train.py` ran one process,
  and `accelerate launch train.py` defaulted to `torch.cuda.device_count()`
  processes. With no config file it now defaults to the tpu devices' count, and
  more than one process on more than one tpu device is a multi-device launch,
  as it is for CUDA.

The upstream fix would be a `torch.accelerator.current_accelerator()` branch in
each, before the CPU one (in the launcher: `torch.accelerator.device_count()`).
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


def apply_launch(launch_module):
    validate = launch_module._validate_launch_command
    if getattr(validate, "_torch_tpu", False):
        return

    def _validate_launch_command(args):
        on_tpu = not args.cpu and _tpu_is_the_accelerator()
        configured = args.config_file is not None or os.path.isfile(launch_module.default_config_file)
        if on_tpu and args.num_processes is None and not configured:
            args.num_processes = torch.tpu.device_count()
        args, defaults, from_config = validate(args)
        chosen = (args.multi_gpu, args.tpu, args.use_deepspeed, args.use_fsdp, args.use_megatron_lm)
        if on_tpu and not any(chosen) and args.num_processes > 1 and torch.tpu.device_count() > 1:
            args.multi_gpu = True
        return args, defaults, from_config

    _validate_launch_command._torch_tpu = True
    launch_module._validate_launch_command = _validate_launch_command
