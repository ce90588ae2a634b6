"""torch.nn.DataParallel (torch 2.13): its copies between devices.

DataParallel itself is device-generic (it finds tpu through
`torch.accelerator`), but the helpers in `torch.nn.parallel.comm` that scatter
inputs, replicate parameters and gather outputs call `torch._C._scatter`,
`_broadcast_coalesced` and `_gather`, which exist only in CUDA builds of torch
and take devices as bare CUDA indices. For tpu tensors the same operations are
made of tensor copies, which go device to device (`Tensor.to(tpu:N)` copies
through the plugin, never the host); every other tensor goes to torch's own
helpers as before. `reduce_add` (the gradient reduction of replicas) asks
whether NCCL can run it, which warns on every backward in torch builds without
NCCL; for tpu tensors it adds the copies on the destination device directly.

The upstream fix: let `torch.nn.parallel.comm` fall back to tensor copies for
devices without NCCL, as `reduce_add` already does.
"""
import torch


def _is_tpu(tensor):
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "tpu"


def _tpu(device):
    """torch.device("tpu", i) for the index forms comm's callers pass (int, "tpu:i", device)."""
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        return torch.device(device)
    return torch.device("tpu", int(device))


def broadcast(tensor, devices=None, *, out=None):
    if out is not None:
        for o in out:
            o.copy_(tensor)
        return tuple(out)
    return tuple(tensor if _tpu(d) == tensor.device else tensor.to(_tpu(d)) for d in devices)


def broadcast_coalesced(tensors, devices, buffer_size=None):
    # As torch's: the first device's list holds the inputs themselves (they live there).
    return [[t if _tpu(d) == t.device else t.to(_tpu(d)) for t in tensors] for d in devices]


def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    if out is not None:
        chunk_sizes = [o.size(dim) for o in out]
        for o, chunk in zip(out, tensor.split(chunk_sizes, dim)):
            o.copy_(chunk)
        return tuple(out)
    chunks = tensor.split(list(chunk_sizes), dim) if chunk_sizes else tensor.chunk(len(devices), dim)
    return tuple(chunk.to(_tpu(d)).contiguous() for chunk, d in zip(chunks, devices))


def gather(tensors, dim=0, destination=None, *, out=None):
    if out is not None:
        if destination is not None:
            raise RuntimeError("'destination' must not be specified when 'out' is specified, "
                               "but got destination=%s" % (destination,))
        return torch.cat([t.to(out.device) for t in tensors], dim, out=out)
    if destination is None:
        target = torch.device("tpu", torch.tpu.current_device())
    elif destination == -1 or (isinstance(destination, str) and destination == "cpu") or (
            isinstance(destination, torch.device) and destination.type == "cpu"):
        target = torch.device("cpu")
    else:
        target = _tpu(destination)
    return torch.cat([t.to(target) for t in tensors], dim)


def reduce_add(inputs, destination=None):
    target = torch.device("tpu", torch.tpu.current_device()) if destination is None else _tpu(destination)
    root = next((t for t in inputs if t.device == target), None)
    if root is None:
        raise RuntimeError("reduce_add expects destination to be on the same GPU with one of the tensors, "
                           "but got destination=%s" % (destination,))
    result = root.clone()
    for t in inputs:
        if t is not root:
            result.add_(t.to(target))
    return result


def apply(comm):
    if getattr(comm, "_torch_tpu", False):
        return
    ours = {"broadcast": broadcast, "broadcast_coalesced": broadcast_coalesced, "scatter": scatter, "gather": gather,
            "reduce_add": reduce_add}
    originals = {name: getattr(comm, name) for name in ours}

    def routed(name):
        def call(first, *args, **kwargs):
            probe = first if isinstance(first, torch.Tensor) else next(iter(first), None)
            return (ours if _is_tpu(probe) else originals)[name](first, *args, **kwargs)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = originals[name].__doc__
        return call

    for name in ours:
        setattr(comm, name, routed(name))
    comm._torch_tpu = True
