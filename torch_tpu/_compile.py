"""torch.compile(backend="tpu") (also backend="openxla" when torch_xla is absent).

Dynamo hands each FX graph to AOTAutograd (core-ATen decompositions), which
gives a forward and a backward graph of ATen ops. Each runs once through the
same lowerings as eager, captured in the fused pending graph, and is sealed
into one XLA program; later calls with inputs of the same shapes, dtypes and
layouts bind the input buffers and launch that program directly, with no
per-op dispatch. A graph that reads data, falls back to the CPU or draws
random numbers while being captured cannot be sealed: it runs op by op in
fused mode on every call instead (counted in metrics as compile_eager_graphs).
"""
import importlib.abc
import importlib.util
import sys

import torch

from . import _C

_stats = {"compiled_graphs": 0, "captures": 0, "replays": 0, "compile_eager_graphs": 0}


def stats():
    return dict(_stats)


def _is_tpu(t):
    return isinstance(t, torch.Tensor) and t.device.type == "tpu"


def _signature(args):
    """What a sealed program depends on besides buffer contents."""
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.device.type == "tpu":
                parts.append(("tpu", a.dtype, tuple(a.shape), a.stride(), a.storage_offset(),
                              a.untyped_storage().nbytes()))
            elif a.dim() == 0:
                parts.append(("scalar", a.dtype))  # uploaded per call: a program input
            else:
                return None  # a CPU tensor operand: not sealable
        elif isinstance(a, (int, float, bool)) or a is None:
            parts.append(("value", a))
        else:
            return None
    return tuple(parts)


def _rng_state(device):
    return torch.tpu.get_rng_state(device)


class CompiledGraph:
    """One AOTAutograd graph (forward or backward) on tpu."""

    def __init__(self, gm):
        self.gm = gm
        self.programs = {}   # signature -> (sealed program, output layout)
        self.op_by_op = set()  # signatures that could not be sealed

    def _run_fused(self, args):
        from . import modes
        with modes.eager_mode("fused"):
            return self.gm(*args)

    def __call__(self, *args):
        device = next((a.device.index for a in args if _is_tpu(a)), None)
        signature = _signature(args) if device is not None else None
        uploads = {}
        if signature is not None:
            # 0-d CPU tensors (an optimizer's step count) change every call: program
            # inputs, not constants. They travel as tpu copies; mutations come back.
            args = list(args)
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor) and a.device.type == "cpu":
                    uploads[i] = a
                    args[i] = a.to(torch.device("tpu", device))
        if signature is None or signature in self.op_by_op:
            return self._run_fused(args)
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        sealed = self.programs.get(signature)
        if sealed is not None:
            program, layout = sealed
            _stats["replays"] += 1
            outputs = self._assemble(layout, program.run(inputs))
        else:
            outputs = self._capture(device, signature, args, inputs)
            sealed = self.programs.get(signature)
        if uploads:
            self._write_back(uploads, args, inputs, sealed)
        return outputs

    @staticmethod
    def _write_back(uploads, args, inputs, sealed):
        """Copies mutated uploads back into their CPU tensors."""
        if sealed is not None:
            position = {id(t): k for k, t in enumerate(inputs)}
            written = {position[id(args[i])] for i in uploads} & set(sealed[0].mutated_inputs)
            for i, cpu in uploads.items():
                if position[id(args[i])] in written:
                    cpu.copy_(args[i])
            return
        for i, cpu in uploads.items():  # run op by op: compare
            value = args[i].cpu()
            if not torch.equal(value, cpu):
                cpu.copy_(value)

    def _capture(self, device, signature, args, inputs):
        from . import modes
        _stats["captures"] += 1
        rng_before = _rng_state(device)
        previous = modes.get_eager_mode()
        token = _C._begin_capture(device)
        _C._set_eager_mode("fused")  # nothing pending: no cut
        try:
            outputs = self.gm(*args)
        except BaseException:
            _C._abandon_capture(device)
            _C._set_eager_mode(previous)
            raise
        flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        program = None
        if all(_is_tpu(o) or o is None for o in flat) and torch.equal(rng_before, _rng_state(device)):
            try:
                program = _C._end_capture(device, token, inputs, [o for o in flat if o is not None])
            except RuntimeError:
                _C._set_eager_mode(previous)
                raise
        # Restoring the mode runs what an unsealed capture left pending.
        _C._set_eager_mode(previous)
        if program is None:
            self.op_by_op.add(signature)
            _stats["compile_eager_graphs"] += 1
        else:
            self.programs[signature] = (program, (type(outputs), [o is None for o in flat]))
            _stats["compiled_graphs"] += 1
        return outputs

    @staticmethod
    def _assemble(layout, results):
        kind, is_none = layout
        it = iter(results)
        flat = [None if none else next(it) for none in is_none]
        if kind in (list, tuple):
            return kind(flat)
        return flat[0]


def _graph_compiler(gm, example_inputs):
    return CompiledGraph(gm)


def tpu_backend(gm, example_inputs, **kwargs):
    """The torch.compile backend: AOTAutograd over core-ATen decompositions."""
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    backend = aot_autograd(fw_compiler=_graph_compiler, bw_compiler=_graph_compiler,
                           decompositions=core_aten_decompositions(), keep_inference_input_mutations=True)
    return backend(gm, example_inputs, **kwargs)


tpu_backend._tags = ()  # what dynamo's registry expects of a backend


class _OpenXLAAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Points backend="openxla" at tpu_backend when torch_xla is not installed:
    code written for PyTorch/XLA then runs unchanged."""

    target = "torch._dynamo.backends.torchxla"

    def find_spec(self, name, path, target=None):
        if name != self.target:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        sys.meta_path.remove(self)
        if importlib.util.find_spec("torch_xla") is None:
            from torch._dynamo.backends import registry
            registry._COMPILER_FNS["openxla"] = tpu_backend


def install_openxla_alias():
    if "torch._dynamo.backends.torchxla" in sys.modules:
        if importlib.util.find_spec("torch_xla") is None:
            from torch._dynamo.backends import registry
            registry._COMPILER_FNS["openxla"] = tpu_backend
    elif not any(isinstance(f, _OpenXLAAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, _OpenXLAAlias())
