"""Printing a tpu tensor: one download, then CPU formatting.

torch formats a tensor's values with a dozen small ops (slices for the summary,
masked_select, abs, min/max in float64, ceil). On a tpu tensor each would be a
device program — compiled on first use, and float64, which TPUs lack. torch
copies xla/lazy/ipu/mtia tensors to the CPU first for the same reason; this does
the same for tpu, keeping every suffix (device, dtype, grad_fn) of the original.
It matters to torch.compile too: torch 2.11's Dynamo repr()s every parameter it
guards by identity, and a compiled gpt-tiny step's first call compiled 86
programs instead of 12 until printing stopped running ops on the device.

A tensor up to WHOLE_DOWNLOAD_BYTES is downloaded whole (no program to compile).
A larger one is summarised on the device first: one index_select per long
dimension keeps the edge items that torch prints (and one more in the middle,
so the CPU copy is still "long" there and torch writes its "..."), so printing a
multi-gigabyte tensor downloads kilobytes, as printing a CUDA tensor does.
"""
import torch
import torch._tensor_str as _tensor_str_module

# Larger tensors are summarised on the device before the download (see above).
WHOLE_DOWNLOAD_BYTES = 64 << 20


def _summary_on_host(t):
    """A CPU copy of `t`'s printed part: along each dimension longer than twice
    torch's edgeitems, the first and last edgeitems entries with one in between."""
    edge = _tensor_str_module.PRINT_OPTS.edgeitems
    for dim, size in enumerate(t.shape):
        if size > 2 * edge:
            keep = list(range(edge)) + [edge] + list(range(size - edge, size))
            t = t.index_select(dim, torch.tensor(keep, device=t.device))
    return t.to("cpu")


def _format_summarised(host):
    """torch's text for a summarised tensor, from its printed part `host`."""
    options = _tensor_str_module.PRINT_OPTS
    threshold = options.threshold
    options.threshold = min(threshold, host.numel() - 1)  # torch then summarises `host` too
    try:
        return _tensor_str_module._tensor_str(host, len("tensor("))
    finally:
        options.threshold = threshold


def _formatted_on_host(inp):
    """The values of `inp` formatted from a CPU copy, or None where torch's own path applies."""
    if not isinstance(inp, torch.Tensor) or inp.device.type != "tpu":
        return None
    if (inp.layout != torch.strided or inp.is_nested or inp.is_quantized or inp.is_meta
            or torch._C._functorch.is_functorch_wrapped_tensor(inp) or torch._is_functional_tensor(inp)):
        return None
    if type(inp) not in (torch.Tensor, torch.nn.Parameter):
        # Subclasses, FakeTensor among them (dynamo and AOTAutograd print those while
        # tracing: torch writes "..." for values that do not exist), keep torch's path.
        return None
    if inp.numel() == 0:
        return None  # printed as "[]" without reading values
    primal, _ = torch.autograd.forward_ad.unpack_dual(inp)
    summarised = inp.numel() > _tensor_str_module.PRINT_OPTS.threshold
    with torch.no_grad():
        if summarised and inp.numel() * inp.element_size() > WHOLE_DOWNLOAD_BYTES:
            return _format_summarised(_summary_on_host(primal.detach()))
        host = primal.detach().to("cpu")
    return _tensor_str_module._tensor_str(host, len("tensor("))


def install():
    original = _tensor_str_module._str_intern
    if getattr(original, "_torch_tpu", False):
        return

    def _str_intern(inp, *, tensor_contents=None, **kwargs):
        if tensor_contents is None:
            tensor_contents = _formatted_on_host(inp)
        return original(inp, tensor_contents=tensor_contents, **kwargs)

    _str_intern._torch_tpu = True
    _str_intern.__wrapped__ = original  # torch's own formatting, on the device (tests compare)
    _tensor_str_module._str_intern = _str_intern
