"""Target of the `torch.backends` entry point that `import torch` runs.

It lives in a submodule so that `import torch_tpu` first (which imports torch,
which runs the entry point) finds the package already importing instead of
asking a half-initialised torch_tpu for an attribute."""
import glob
import os

from . import config


def load():
    if not should_autoload():
        return
    import torch_tpu  # noqa: F401  (registers the tpu device on first import)


def should_autoload():
    """Whether `import torch` loads torch_tpu: yes, except on a machine with a CUDA
    (or ROCm) GPU for torch, where TORCH_TPU_PLUGIN must ask for it.

    Once torch_tpu is loaded, its PrivateUse1 device is torch's accelerator (torch
    prefers PrivateUse1 in at::getAccelerator()), and torch's autograd engine then
    fails on every backward over CUDA tensors (an internal assert in engine.cpp;
    seen with torch 2.11 on an H200). Installing torch_tpu must not break CUDA
    training, so there `import torch_tpu` or TORCH_TPU_PLUGIN loads it."""
    if (config.get("TORCH_TPU_PLUGIN") or "").strip():
        return True
    return not _gpu_torch_can_use()


def _gpu_torch_can_use():
    # Device files, not torch.cuda.is_available(): that initialises the CUDA driver,
    # after which forked children (DataLoader workers) cannot use CUDA.
    import torch

    if not (torch.version.cuda or torch.version.hip):
        return False
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False  # every GPU hidden from torch
    return bool(_gpu_device_files())


def _gpu_device_files():
    # NVIDIA, ROCm, and WSL2 (whose GPUs appear as /dev/dxg).
    return glob.glob("/dev/nvidia[0-9]*") + glob.glob("/dev/kfd") + glob.glob("/dev/dxg")
