"""Collectives over the tpu devices of this process, as one XLA program each.

Each call takes one tensor per device (distinct devices of this process) and
runs the collective as a single replicated program over those devices
(`stablehlo.all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`,
`collective_permute`): the values travel over the devices' own links, never
through host memory. Like NCCL's group calls, the call returns once the program
is launched; later ops on the outputs are ordered after it on each device.
Programs are compiled once per (collective, reduce op, shape, dtype, devices)
and cached like any other. `torch_tpu.metrics()` counts them as
`collectives_device_transport`.

Across processes, `torch.distributed` with the `tpu_dist` backend stages
collectives through host memory (docs/distributed.md).
"""
import torch
import torch.distributed as dist

from . import _C

_REDUCE_OPS = {"SUM": "sum", "AVG": "avg", "PRODUCT": "product", "MIN": "min", "MAX": "max",
               "BAND": "band", "BOR": "bor", "BXOR": "bxor"}


def _reduce_op_name(op):
    if isinstance(op, str):
        name = op.upper()
    else:
        red = getattr(op, "op", op)  # a ReduceOp instance wraps its RedOpType
        name = getattr(red, "name", None) or str(red).rsplit(".", 1)[-1]
    if name not in _REDUCE_OPS:
        raise ValueError("torch_tpu.distributed: reduce op %r is not supported (use one of %s)"
                         % (op, ", ".join(sorted(_REDUCE_OPS))))
    return _REDUCE_OPS[name]


def _tensors(tensors, what):
    tensors = list(tensors)
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError("torch_tpu.distributed.%s takes tensors, got %s" % (what, type(t).__name__))
    return tensors


def all_reduce(tensors, op=dist.ReduceOp.SUM):
    """Each tensor becomes the reduction (`op`) of all of them, in place."""
    tensors = _tensors(tensors, "all_reduce")
    _C._device_collective("all_reduce", tensors, tensors, _reduce_op_name(op))


def all_gather(outputs, inputs):
    """outputs[i] (shape [n * d0, ...]) gets every input, concatenated in list order."""
    _C._device_collective("all_gather", _tensors(inputs, "all_gather"), _tensors(outputs, "all_gather"))


def reduce_scatter(outputs, inputs, op=dist.ReduceOp.SUM):
    """outputs[i] (shape [d0 / n, ...]) gets part i of the reduction of the inputs."""
    _C._device_collective("reduce_scatter", _tensors(inputs, "reduce_scatter"), _tensors(outputs, "reduce_scatter"),
                          _reduce_op_name(op))


def all_to_all(outputs, inputs):
    """Each input is split into n parts along dim 0; outputs[i] gets part i of every input, in list order."""
    _C._device_collective("all_to_all", _tensors(inputs, "all_to_all"), _tensors(outputs, "all_to_all"))


def broadcast(tensors, src=0):
    """Every tensor gets the value of tensors[src], in place."""
    tensors = _tensors(tensors, "broadcast")
    _C._device_collective("broadcast", tensors, tensors, root=int(src))


def permute(outputs, inputs, pairs):
    """For each (source, target) in `pairs`, outputs[target] gets inputs[source]; an output no pair
    targets gets zeros (a ring shift: pairs = [(i, (i + 1) % n) for i in range(n)])."""
    pairs = [(int(s), int(t)) for s, t in pairs]
    if len({t for _, t in pairs}) != len(pairs) or len({s for s, _ in pairs}) != len(pairs):
        raise ValueError("torch_tpu.distributed.permute: each index may be a source once and a target once, "
                         "got %r" % (pairs,))
    _C._device_collective("permute", _tensors(inputs, "permute"), _tensors(outputs, "permute"), pairs=pairs)


__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "permute"]
