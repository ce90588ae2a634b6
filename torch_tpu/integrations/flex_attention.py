"""PyTorch's flex attention (torch.nn.attention.flex_attention, torch 2.13).

`flex_attention` checks its inputs' device against a fixed set ("cuda", "cpu",
"xpu", "hpu", "mps") in `_validate_device` and raises ValueError for any other,
although what it runs there is device-neutral: eagerly, the higher-order op's
dense implementation (scores materialised, mask and score mods applied with
vmap), and under torch.compile a graph of ATen ops that backend "tpu" (or the
default backend, which hands tpu graphs to it) seals into one program, forward
and backward. For tpu tensors the check is skipped; every other device is still
checked as before. TorchTitan's llama3 models use flex attention by default.

The upstream fix: let a PrivateUse1 backend declare flex support (or check for a
dense-capable device) instead of a fixed set of device types.
"""


def apply(module):
    validate = module._validate_device
    if getattr(validate, "_torch_tpu", False):
        return

    def _validate_device(query, key, value):
        if query.device.type == "tpu":
            return None
        return validate(query, key, value)

    _validate_device._torch_tpu = True
    module._validate_device = _validate_device
