"""What third-party libraries need to be told about tpu: one module per library,
applied when (and only when) that library is imported, and tested against the
version requirements.txt pins.

- accelerate (accelerate.py): its default device is tpu where it would fall back
  to the CPU, so `Accelerator()` and Hugging Face's `Trainer` use tpu with no
  argument; `use_cpu=True` and `ACCELERATE_TORCH_DEVICE` still win. Under torchrun
  it runs DDP over tpu_dist, one rank per tpu device; `accelerate launch` starts one
  process per tpu device by default, and several processes as a multi-device run.
- safetensors (safetensors.py): `safe_open` and `load_file` take a tpu device
  ("tpu", "tpu:N", torch.device), which its device parser refuses.
- PyTorch's own flex attention (flex_attention.py): its device check lets tpu
  tensors through.
- torch.nn.DataParallel (data_parallel.py): its scatter, replicate and gather of
  tpu tensors are device-to-device copies (torch's helpers are CUDA-only).
"""
import importlib.abc
import importlib.machinery
import sys

# module whose import triggers the integration -> function(module) applying it
_HOOKS = {}


def _register(module_name, apply):
    if module_name in sys.modules:
        apply(sys.modules[module_name])
    else:
        _HOOKS[module_name] = apply


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a hooked module with the other finders, and applies its integration
    once the module has run (so nothing is imported that the user did not import)."""

    def find_spec(self, name, path=None, target=None):
        if name not in _HOOKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader, apply = spec.loader, _HOOKS.pop(name)
        exec_module = loader.exec_module

        def exec_and_apply(module):
            exec_module(module)
            apply(module)

        loader.exec_module = exec_and_apply
        return spec


def install():
    from . import accelerate, data_parallel, flex_attention, safetensors
    _register("accelerate.state", accelerate.apply)
    _register("accelerate.commands.launch", accelerate.apply_launch)
    _register("safetensors", safetensors.apply)
    _register("torch.nn.attention.flex_attention", flex_attention.apply)
    _register("torch.nn.parallel.comm", data_parallel.apply)
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
