"""Hugging Face Accelerate (pinned: accelerate==1.15.0).

`PartialState.default_device` (accelerate/state.py) names the device types it
knows (cuda, mps, npu, xpu, ...) and falls back to the CPU; tpu is not among
them, so `Accelerator()`, and through it `transformers.Trainer`, left models on
the CPU. Where it would answer cpu while tpu is the process's accelerator, it
answers the current tpu device. `Accelerator(cpu=True)` / `use_cpu=True` and
`ACCELERATE_TORCH_DEVICE` never ask it, so they still win. The upstream fix
would be a `torch.accelerator.current_accelerator()` branch before the CPU one.
"""
import torch


def apply(state_module):
    state = state_module.PartialState
    original = state.default_device
    if getattr(original.fget, "_torch_tpu", False):
        return

    def default_device(self):
        device = original.fget(self)
        accelerator = torch.accelerator.current_accelerator()
        if device.type == "cpu" and accelerator is not None and accelerator.type == "tpu":
            return torch.device("tpu", torch.tpu.current_device())
        return device

    default_device._torch_tpu = True
    state.default_device = property(default_device, doc=original.__doc__)
