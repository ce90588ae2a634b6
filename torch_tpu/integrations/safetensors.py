"""safetensors (pinned by transformers' requirement; tested with 0.8.0).

`safe_open(..., device=...)` (Rust, safetensors/bindings) parses the device
string against a fixed list (cpu, cuda, mps, npu, xpu, xla, ...) and raises
`device tpu is invalid` for ours. An integer device it accepts and hands to torch
as an index on the current accelerator, which is tpu. So `safetensors.safe_open`
is wrapped to pass a tpu device ("tpu", "tpu:1", torch.device("tpu", 1)) as its
index; `safetensors.torch.load_file` goes through it. The upstream fix would be
to pass device strings it does not know to torch.device instead of refusing them.
"""
import torch


def _as_index(device):
    if isinstance(device, (str, torch.device)):
        try:
            parsed = torch.device(device)
        except (RuntimeError, TypeError):
            return device  # safetensors' own error for what torch does not know either
        if parsed.type == "tpu":
            return parsed.index if parsed.index is not None else torch.tpu.current_device()
    return device


def apply(module):
    original = module.safe_open
    if getattr(original, "_torch_tpu", False):
        return

    def safe_open(filename, framework, device="cpu", **kwargs):
        return original(filename, framework, device=_as_index(device), **kwargs)

    safe_open._torch_tpu = True
    safe_open.__doc__ = original.__doc__
    module.safe_open = safe_open
    # safetensors.torch imported before torch_tpu bound the original.
    import sys
    if "safetensors.torch" in sys.modules:
        sys.modules["safetensors.torch"].safe_open = safe_open
