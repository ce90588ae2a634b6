"""Custom kernels written in JAX, run on tpu tensors (torch_tpu.jax_kernel).

    @torch_tpu.jax_kernel
    def gelu_mul(x, y):
        return jax.nn.gelu(x) * y

    z = gelu_mul(a, b)          # a, b: tpu tensors; z: a tpu tensor

JAX lowers the function, for the inputs' shapes and dtypes, to a StableHLO module
(once per signature); its functions are renamed apart and called from the op's
program as `func.call`, so the kernel runs as one op in every eager mode (in fused
mode inside the pending graph, compiled with the ops around it) and its programs
share the compilation cache. Outputs may be any pytree of arrays. Gradients flow
through `jax.vjp`: the backward pass is a second kernel lowered the same way.
JAX is needed only where kernels are defined; it runs nothing itself (its own
devices stay unused), so the kernel runs on whatever plugin torch_tpu uses.
"""
import functools
import hashlib
import re

import torch

from . import _C

_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float64: "float64",
           torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
           torch.uint8: "uint8", torch.bool: "bool", torch.complex64: "complex64"}
_FROM_JAX = {v: k for k, v in _DTYPES.items()}
_SYMBOL = re.compile(r"func\.func\s+(?:public\s+|private\s+)?@([\w$.-]+)")


def _import_jax():
    try:
        import jax
    except ImportError as e:
        raise ImportError("torch_tpu.jax_kernel needs JAX to lower the kernel: pip install jax") from e
    return jax


# A source location: loc(...) with up to two levels of nested parentheses.
_LOCATION = re.compile(r"\s*\bloc\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")


def _platform():
    """JAX's name for the platform the kernels will run on."""
    from . import plugin_info

    platform = plugin_info()["platform"].lower()
    return {"gpu": "cuda"}.get(platform, platform)


def _renamed_functions(module_text, prefix):
    """The func.func definitions of a lowered module, every symbol prefixed so
    that kernels of different origins never clash in one program, and all
    private (the program's own @main is its only entry). Source locations are
    dropped: they name aliases defined outside the functions."""
    lines = [line for line in module_text.strip().splitlines() if not line.startswith("#loc")]
    lines = [_LOCATION.sub("", line) for line in lines]
    if not lines or not lines[0].startswith("module") or lines[-1].strip() != "}":
        raise RuntimeError("torch_tpu.jax_kernel: unexpected StableHLO module layout from JAX:\n" + module_text[:500])
    body = "\n".join(lines[1:-1]) + "\n"
    names = _SYMBOL.findall(body)
    if "main" not in names:
        raise RuntimeError("torch_tpu.jax_kernel: the lowered module has no @main:\n" + module_text[:500])
    pattern = re.compile(r"@(%s)(?![\w$.-])" % "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)))
    body = pattern.sub(lambda m: "@%s_%s" % (prefix, m.group(1)), body)
    return re.sub(r"func\.func\s+public\s+@", "func.func private @", body)


class _Lowered:
    """One signature of a kernel: the renamed StableHLO and its outputs."""

    def __init__(self, fn, specs):
        jax = _import_jax()
        self.fn, self.specs = fn, specs
        from jax import export

        avals = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in specs]
        # Lowered for the plugin's platform (not JAX's own device), keeping one
        # parameter per tensor passed even where the function ignores it.
        lowered = export.export(jax.jit(fn, keep_unused=True), platforms=[_platform()])(*avals)
        got_in = [(tuple(a.shape), str(a.dtype)) for a in lowered.in_avals]
        if got_in != [(tuple(s), d) for s, d in specs]:
            raise TypeError(
                "torch_tpu.jax_kernel %s: JAX lowered the inputs %s as %s (64-bit types need "
                "jax.config.update('jax_enable_x64', True))" % (_name(fn), specs, got_in))
        leaves, self.treedef = list(lowered.out_avals), lowered.out_tree
        if not leaves:
            raise ValueError("torch_tpu.jax_kernel %s returns no arrays" % _name(fn))
        self.outputs = []
        for leaf in leaves:
            if str(leaf.dtype) not in _FROM_JAX:
                raise TypeError("torch_tpu.jax_kernel %s returns a %s array, which has no torch dtype"
                                % (_name(fn), leaf.dtype))
            self.outputs.append((tuple(leaf.shape), _FROM_JAX[str(leaf.dtype)]))
        text = lowered.mlir_module()
        self.name = "jax_%s_%s" % (re.sub(r"\W", "_", _name(fn))[:40], hashlib.sha256(text.encode()).hexdigest()[:16])
        self.text = _renamed_functions(text, self.name)
        self.defined = False
        self._backward = None

    def run(self, inputs):
        device = inputs[0].device if inputs else torch.device("tpu", torch.tpu.current_device())
        outputs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self.outputs]
        _C._call_external(self.name + "_main", "" if self.defined else self.text, list(inputs), outputs)
        self.defined = True
        return outputs

    def backward_kernel(self):
        """(inputs..., output cotangents...) -> cotangents of the floating inputs,
        through jax.vjp of the kernel; integer inputs are held constant."""
        if self._backward is None:
            jax = _import_jax()
            fn, treedef, n_in = self.fn, self.treedef, len(self.specs)
            floating = [i for i, (_, dtype) in enumerate(self.specs) if "float" in dtype or "complex" in dtype]

            def backward(*args):
                primals, cotangents = list(args[:n_in]), args[n_in:]

                def of_floating(*values):
                    full = list(primals)
                    for i, v in zip(floating, values):
                        full[i] = v
                    return fn(*full)

                _, pullback = jax.vjp(of_floating, *[primals[i] for i in floating])
                return tuple(pullback(jax.tree_util.tree_unflatten(treedef, list(cotangents))))

            backward.__name__ = _name(fn) + "_vjp"
            self._backward = (_Kernel(backward), floating)
        return self._backward


def _name(fn):
    return getattr(fn, "__name__", "kernel")


class _Kernel:
    def __init__(self, fn):
        self.fn = fn
        self._lowered = {}
        functools.update_wrapper(self, fn)

    def lowered(self, tensors):
        specs = []
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                raise TypeError("torch_tpu.jax_kernel %s takes tensors, got %r" % (_name(self.fn), type(t)))
            if t.device.type != "tpu":
                raise ValueError("torch_tpu.jax_kernel %s takes tpu tensors, got one on %s" % (_name(self.fn), t.device))
            if t.dtype not in _DTYPES:
                raise TypeError("torch_tpu.jax_kernel %s: no JAX dtype for %s" % (_name(self.fn), t.dtype))
            specs.append((tuple(t.shape), _DTYPES[t.dtype]))
        key = tuple(specs)
        if key not in self._lowered:
            self._lowered[key] = _Lowered(self.fn, specs)
        return self._lowered[key]

    def __call__(self, *tensors):
        lowered = self.lowered(tensors)
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            outputs = _JaxFunction.apply(lowered, *tensors)
        else:
            outputs = lowered.run(tensors)
        return lowered.treedef.unflatten(list(outputs))


class _JaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, lowered, *tensors):
        ctx.lowered = lowered
        ctx.save_for_backward(*tensors)
        return tuple(lowered.run(tensors))

    @staticmethod
    def backward(ctx, *grads):
        lowered, inputs = ctx.lowered, ctx.saved_tensors
        device = inputs[0].device
        # an output that did not reach the loss has no gradient: zeros, as JAX expects one per output
        grads = [g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
                 for g, (shape, dtype) in zip(grads, lowered.outputs)]
        kernel, floating = lowered.backward_kernel()
        arguments = list(inputs) + grads
        cotangents = kernel.lowered(arguments).run(arguments)
        result = [None] * len(inputs)
        for i, c in zip(floating, cotangents):
            result[i] = c if ctx.needs_input_grad[i + 1] else None
        return (None, *result)


def jax_kernel(fn):
    """Wraps a JAX function so that it runs on tpu tensors as one op (see module doc)."""
    return _Kernel(fn)
