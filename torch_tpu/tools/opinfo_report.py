"""OpInfo consistency report: every op in PyTorch's `op_db`, run on CPU and on tpu.

For each OpInfo, dtype and sample input the op runs on CPU and on tpu copies of the
sample (only tensors move), and the results -- and, for differentiable ops in floating
dtypes, the gradients of the sum of the floating outputs -- are compared with
`torch.testing.assert_close`. Each op+dtype+direction is classified:

  native    passes with TORCH_TPU_FALLBACK=error
  fallback  needs the CPU fallback (NotImplementedError with fallback=error) and passes
            with fallback allowed; the ATen ops that fell back are recorded
  fails     wrong results (assert_close failure) with fallback allowed
  errors    an exception other than the fallback one, where CPU succeeded; also a
            worker that crashed or an op that ran past the time limit
  skipped   no sample ran on CPU (not counted)

Eigenvectors and singular vectors are unique only up to the sign of each vector: for
the ops in `_SIGN_GAUGE` (their vector outputs only) both sides are normalized before the
comparison so that the largest-magnitude entry of each vector is positive. Nothing else
is normalized.

A floating result that differs from CPU's beyond the tolerance still counts as correct when,
over the elements where the two differ, its largest error against the float64 result (CPU, on
the same inputs upcast) is at most CPU's -- the test PyTorch's test_ops applies to its
reference implementations, restricted to where the results disagree.
Such samples are listed in the report with both errors; nothing else is relaxed.

The backward direction classifies the backward pass only: its forward pass runs with
fallback allowed (the forward direction already classifies the forward ops).

    python -m torch_tpu.tools.opinfo_report [--ops a,b] [--dtypes float32,...]
        [--limit-samples N] [--out-dir reports] [--no-backward] [--jobs N]

writes <out-dir>/opinfo.json and <out-dir>/opinfo.md; the last printed line is
`native: N/M ops (P%)` for float32 forward.

Ops run in worker processes (spawn), one op at a time per worker: a worker that dies
records "worker crashed" for its op and is replaced; an op past --op-timeout seconds is
killed and recorded as "timeout".
"""
import argparse
import contextlib
import json
import os
import re
import sys
import time

from torch_tpu import config

STATUSES = ("native", "fallback", "fails", "errors")
# Worst first: an aggregate over samples takes the worst sample status.
_RANK = {"fails": 0, "errors": 1, "fallback": 2, "native": 3}

DEFAULT_DTYPES = ("float32", "bfloat16", "float16", "int64", "int32", "bool")
FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float64")
# assert_close's defaults are for one rounding; the two backends may round differently at
# every step of a low-precision computation.
_LOW_PRECISION_TOL = {"bfloat16": (3e-2, 3e-2), "float16": (5e-3, 5e-3)}
_MSG_LEN = 300


def _torch():
    import torch
    return torch


def _dtype(name):
    return getattr(_torch(), name)


# ---------------------------------------------------------------------------------------
# op_db access

def op_key(op):
    """A unique name per OpInfo: name, plus '.variant' for variant tests."""
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def load_op_db():
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def find_ops(names=None):
    """OpInfos of op_db, all or those named (op_key or plain name: all its variants)."""
    ops = load_op_db()
    if not names:
        return list(ops)
    wanted = set(names)
    found = [op for op in ops if op_key(op) in wanted or op.name in wanted]
    missing = wanted - {op_key(op) for op in found} - {op.name for op in found}
    if missing:
        raise ValueError("unknown OpInfo(s): %s" % ", ".join(sorted(missing)))
    return found


def _decorations(op):
    for info in op.decorators or ():
        for dec in getattr(info, "decorators", None) or ():
            yield info, dec


def tolerances(op, dtype):
    """(rtol, atol) for comparing op's results in dtype: the loosest tolerance override
    the OpInfo declares for that dtype (any test), else None (assert_close's defaults),
    loosened for bfloat16/float16."""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
    rtol = atol = None
    for info, dec in _decorations(op):
        if info.dtypes is not None and dtype not in info.dtypes:
            continue
        if isinstance(dec, toleranceOverride) and dtype in dec.d:
            tol = dec.d[dtype]
            rtol = max(rtol or 0.0, tol.rtol)
            atol = max(atol or 0.0, tol.atol)
        elif isinstance(dec, precisionOverride) and dtype in dec.d:
            atol = max(atol or 0.0, dec.d[dtype])
    low = _LOW_PRECISION_TOL.get(str(dtype).replace("torch.", ""))
    if low is not None:
        rtol = max(rtol or 0.0, low[0])
        atol = max(atol or 0.0, low[1])
    if rtol is None and atol is None:
        return None, None
    # assert_close wants both or neither.
    from torch.testing._comparison import default_tolerances
    d_rtol, d_atol = default_tolerances(dtype)
    return (rtol if rtol is not None else d_rtol), (atol if atol is not None else d_atol)


def values_comparable(op):
    """False for ops that return uninitialised memory (empty, new_empty, ...): only
    structure, shape and dtype are compared. Random ops are found per sample instead
    (see `_reproducible`)."""
    return "empty" not in op.name


def _reproducible(run):
    """Whether run() (on CPU) gives identical results under two different seeds: random
    samples (dropout, randn, ...) are then compared by structure, shape and dtype only.
    Costs three more CPU runs per sample, negligible beside the tpu side's compiles."""
    torch = _torch()
    state = torch.random.get_rng_state()
    # PyTorch's random OpInfos reseed with torch.manual_seed(42) before each call
    # (torch.testing._utils.wrapper_set_seed): silenced here, so that two different
    # seeds show whether the op draws random numbers.
    manual_seed = torch.manual_seed
    torch.manual_seed = lambda seed: torch.random.default_generator
    try:
        def none_safe(x):   # assert_close does not take None inside a list
            return [torch.zeros(0) if y is None else y for y in x] if isinstance(x, list) else x
        torch.random.default_generator.manual_seed(1)
        a = none_safe(run())
        for seed in (2, 3, 4):   # a few draws: small random results can coincide
            torch.random.default_generator.manual_seed(seed)
            torch.testing.assert_close(none_safe(run()), a, rtol=0, atol=0, equal_nan=True)
        return True
    except Exception:  # noqa: BLE001
        return False
    finally:
        torch.manual_seed = manual_seed
        torch.random.set_rng_state(state)


# ---------------------------------------------------------------------------------------
# moving and comparing

@contextlib.contextmanager
def fallback_mode(mode):
    """TORCH_TPU_FALLBACK set to mode ('error' or 'allow') inside the block."""
    old = config.get("TORCH_TPU_FALLBACK")
    os.environ["TORCH_TPU_FALLBACK"] = mode
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TORCH_TPU_FALLBACK", None)
        else:
            os.environ["TORCH_TPU_FALLBACK"] = old


def tree_map(fn, obj):
    """fn applied to every tensor inside lists, tuples (also named), dicts; the rest kept."""
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, torch.Size):
        return obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(tree_map(fn, x) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(tree_map(fn, x) for x in obj)
    if isinstance(obj, dict):
        return {k: tree_map(fn, v) for k, v in obj.items()}
    return obj


def tree_tensors(obj):
    torch = _torch()
    out = []
    tree_map(lambda t: out.append(t) or t, obj)
    return [t for t in out if isinstance(t, torch.Tensor)]


def _device_to_tpu(obj):
    """torch.device('cpu') (also inside containers) -> tpu, for factory ops' arguments."""
    torch = _torch()
    if isinstance(obj, torch.device):
        return torch.device("tpu") if obj.type == "cpu" else obj
    if isinstance(obj, str) and obj == "cpu":
        return "tpu"
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size) and not hasattr(obj, "_fields"):
        return type(obj)(_device_to_tpu(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _device_to_tpu(v) for k, v in obj.items()}
    return obj


def replicate(t, device):
    """A detached copy of t on device with t's view geometry: the whole storage is copied
    and viewed with t's sizes, strides and offset, so partial views and strided inputs
    reach the op as the sample built them, on CPU and on tpu alike."""
    torch = _torch()
    t = t.detach()
    plain = (t.layout == torch.strided and not t.is_conj() and not t.is_neg()
             and type(t) is torch.Tensor and t.device.type == "cpu")
    if not plain or t.untyped_storage().nbytes() % t.element_size():
        return t.clone() if device == "cpu" else t.to(device)
    n = t.untyped_storage().nbytes() // t.element_size()
    whole = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (n,), (1,))
    return whole.to(device, copy=True).as_strided(t.size(), t.stride(), t.storage_offset())


def to_tpu(obj):
    """Detached tpu copies of the tensors in obj; a cpu device argument becomes tpu."""
    return _device_to_tpu(tree_map(lambda t: replicate(t, "tpu"), obj))


# Ops whose tensor arguments (after the input) PyTorch requires on the CPU whatever the
# device (their sample functions build them with device="cpu").
_ARGS_STAY_ON_CPU = {"tensor_split"}


def _sample_to_tpu(op, sample):
    inp = to_tpu(sample.input)
    if op.name in _ARGS_STAY_ON_CPU:
        return inp, _device_to_tpu(sample.args), _device_to_tpu(sample.kwargs)
    return inp, to_tpu(sample.args), to_tpu(sample.kwargs)


def _to_cpu(obj):
    return tree_map(lambda t: t.detach().cpu(), obj)


def _first_line(text, limit=_MSG_LEN):
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _mismatch_message(exc):
    """assert_close's message condensed to one line: what differs and by how much."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    keep = [lines[0]] if lines else []
    keep += [ln for ln in lines[1:] if ln.startswith(("Mismatched", "Greatest", "The failure", "The values"))]
    return _first_line("; ".join(keep), 2 * _MSG_LEN)


def _is_fallback_error(exc):
    return isinstance(exc, NotImplementedError) and "TORCH_TPU_FALLBACK" in str(exc)


def _fallback_op_of(exc):
    m = re.search(r"operator '([^']+)'", str(exc))
    return m.group(1) if m else None


def _describe(sample):
    """A short description of a sample's tensor shapes, for failure messages."""
    torch = _torch()

    def one(x):
        if isinstance(x, torch.Tensor):
            return "%s%s" % (str(x.dtype).replace("torch.", ""), list(x.shape))
        if isinstance(x, (list, tuple)) and any(isinstance(y, torch.Tensor) for y in x):
            return "[%s]" % ", ".join(one(y) for y in x)
        text = repr(x)
        return text if len(text) <= 30 else text[:27] + "..."

    parts = [one(sample.input)] + [one(a) for a in sample.args]
    parts += ["%s=%s" % (k, one(v)) for k, v in sample.kwargs.items()]
    return "(" + ", ".join(parts) + ")"


# Outputs holding eigenvectors / singular vectors, by OpInfo name: output index -> whether
# the vectors are the matrix's columns (U, V, eigenvectors) or its rows (Vh). Each vector
# is defined only up to sign, so both sides get the sign that makes its largest-|.| entry
# positive (see `normalize_signs`).
_SIGN_GAUGE = {
    "linalg.eigh": {1: "columns"},
    "linalg.svd": {0: "columns", 2: "rows"},
    "svd": {0: "columns", 2: "columns"},
    "svd_lowrank": {0: "columns", 2: "columns"},
    "pca_lowrank": {0: "columns", 2: "columns"},
}


def normalize_signs(op, result):
    """result (CPU tensors) with the vector outputs of `_SIGN_GAUGE` ops sign-normalized."""
    gauge = _SIGN_GAUGE.get(op.name)
    if not gauge or not isinstance(result, tuple):
        return result
    torch = _torch()
    items = list(result)
    for index, kind in gauge.items():
        t = items[index] if index < len(items) else None
        if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.numel() == 0 or not t.dtype.is_floating_point:
            continue
        axis = -2 if kind == "columns" else -1   # the axis running along each vector
        pick = t.abs().argmax(dim=axis, keepdim=True)
        sign = torch.where(torch.gather(t, axis, pick) < 0, -1.0, 1.0).to(t.dtype)
        items[index] = t * sign
    return type(result)(*items) if hasattr(result, "_fields") else type(result)(items)


def _check_on_tpu(got, expected):
    for t in tree_tensors(got):
        if t.device.type != "tpu" and any(e.device.type == "cpu" for e in tree_tensors(expected)):
            raise AssertionError("a result is on %s, not tpu" % t.device)


def compare(got, expected, rtol, atol, values=True, normalize=None):
    """Raises AssertionError unless got (tpu results, their device checked by the caller
    with `_check_on_tpu`) matches expected (CPU results). `normalize` (applied to the CPU
    copy of got) canonicalizes gauge freedom."""
    torch = _torch()
    got = _to_cpu(got)   # reads the data: a device error surfaces here (not an AssertionError)
    if normalize is not None:
        got = normalize(got)
    if values:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        return
    g, e = tree_tensors(got), tree_tensors(expected)
    if len(g) != len(e):
        raise AssertionError("%d results, expected %d" % (len(g), len(e)))
    for a, b in zip(g, e):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise AssertionError("result %s %s, expected %s %s" % (a.dtype, list(a.shape), b.dtype, list(b.shape)))


# ---------------------------------------------------------------------------------------
# one sample

class Outcome:
    __slots__ = ("status", "message", "fallback_ops", "accuracy")

    def __init__(self, status, message="", fallback_ops=()):
        self.status, self.message, self.fallback_ops = status, message, sorted(set(fallback_ops))
        self.accuracy = ""   # set when the sample passed by being closer to float64 than CPU

    def __repr__(self):
        return "Outcome(%s, %r, %r)" % (self.status, self.message, self.fallback_ops)


def _fallback_ops_now():
    import torch_tpu
    return list(torch_tpu.metrics().get("fallback_ops", {}))


def _reset_metrics():
    import torch_tpu
    torch_tpu.reset_metrics()


def _classify(attempt, check):
    """attempt() runs the tpu side and returns its result; check(result) raises on a
    mismatch. First with fallback=error; on the fallback's NotImplementedError, again with
    fallback allowed, recording the ATen ops that fell back."""
    try:
        with fallback_mode("error"):
            result = attempt()
            check(result)
        return Outcome("native")
    except AssertionError as e:
        return Outcome("fails", _mismatch_message(e))
    except Exception as e:  # noqa: BLE001 - every failure is recorded
        if not _is_fallback_error(e):
            return Outcome("errors", "%s: %s" % (type(e).__name__, _first_line(e)))
        first = _fallback_op_of(e)
    _reset_metrics()
    try:
        with fallback_mode("allow"):
            result = attempt()
            check(result)
        ops = _fallback_ops_now() or ([first] if first else [])
        return Outcome("fallback", "", ops)
    except AssertionError as e:
        return Outcome("fails", _mismatch_message(e), _fallback_ops_now())
    except Exception as e:  # noqa: BLE001
        return Outcome("errors", "%s: %s" % (type(e).__name__, _first_line(e)), _fallback_ops_now())


# ---------------------------------------------------------------------------------------
# accuracy against float64

def _upcast(obj):
    """obj with its floating tensors in float64 (complex in complex128), keeping
    requires_grad and the identity of tensors that appear twice."""
    torch = _torch()
    wide = {torch.float32: torch.float64, torch.float16: torch.float64, torch.bfloat16: torch.float64,
            torch.complex64: torch.complex128, torch.complex32: torch.complex128}
    memo = {}

    def up(t):
        if t.dtype not in wide:
            return t
        if id(t) not in memo:
            memo[id(t)] = t.detach().to(wide[t.dtype]).requires_grad_(t.requires_grad)
        return memo[id(t)]
    return tree_map(up, obj)


def _errors(x, p):
    """|x - p| per element in float64 (x a result, p the float64 result): 0 where x
    equals p rounded to x's dtype (so inf past float16's range, or a NaN where the
    float64 result is NaN, is exact), inf for a NaN that float64 does not have."""
    torch = _torch()
    rounded = p.to(x.dtype).to(p.dtype)
    x = x.to(p.dtype)
    exact = (x == rounded) | (torch.isnan(x) & torch.isnan(rounded))
    err = (x - p).abs()
    err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
    return torch.where(exact, torch.zeros_like(err), err)


def _leaves(obj):
    """Every leaf of obj (tensors and anything else) in order."""
    if isinstance(obj, (list, tuple)) and not isinstance(obj, _torch().Size):
        return [x for item in obj for x in _leaves(item)]
    if isinstance(obj, dict):
        return [x for key in obj for x in _leaves(obj[key])]
    return [obj]


def _same_structure(got, expected):
    """Whether got and expected have the same leaves, tensors of equal dtype, shape
    and layout, and equal non-tensor leaves: only values may differ."""
    torch = _torch()
    a, b = _leaves(got), _leaves(expected)
    if len(a) != len(b):
        return False
    for x, e in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(e, torch.Tensor):
            return False
        if not isinstance(x, torch.Tensor):
            if not (x == e or (x != x and e != e)):   # equal, or both NaN
                return False
        elif (x.dtype, x.shape, x.layout) != (e.dtype, e.shape, e.layout) or x.layout != torch.strided:
            return False
    return any(isinstance(x, torch.Tensor) and (x.dtype.is_floating_point or x.dtype.is_complex) for x in a)


def _closer_to_float64(got, expected, precise_run, rtol, atol, normalize=None):
    """'' unless got (tpu results, on CPU now) differs from expected (CPU's) only in
    floating values, and over the elements where the two differ beyond the tolerance
    got's largest error against the float64 result is at most expected's; then a note
    with both. (Elements where they agree are left out: a shared error there, at a
    discontinuity for instance, would otherwise hide any disagreement.) Where CPU's
    error is infinite, got must moreover be within the tolerance of the float64 result."""
    if not _same_structure(got, expected):
        return ""
    torch = _torch()
    from torch.testing._comparison import default_tolerances
    ours = theirs = 0.0
    try:
        precise = precise_run()
        if normalize is not None:
            precise = normalize(precise)
        a, b, c = tree_tensors(got), tree_tensors(expected), tree_tensors(precise)
        if len(c) != len(a):
            return ""
        for x, e, p in zip(a, b, c):
            if not (x.dtype.is_floating_point or x.dtype.is_complex):
                if not torch.equal(x, e):
                    return ""
                continue
            rt, at = (rtol, atol) if rtol is not None else default_tolerances(x.dtype)
            differs = ~torch.isclose(x.to(p.dtype), e.to(p.dtype), rtol=rt, atol=at, equal_nan=True)
            if not bool(differs.any()):
                continue
            mine, cpu = float(_errors(x, p)[differs].max()), float(_errors(e, p)[differs].max())
            if mine > cpu:
                return ""
            if cpu == float("inf"):
                torch.testing.assert_close(x, p.to(x.dtype), rtol=rt, atol=at, equal_nan=True)
            ours, theirs = max(ours, mine), max(theirs, cpu)
    except Exception:  # noqa: BLE001 - no float64 kernel, or not close: nothing proves got right
        return ""
    return "closer to float64 than CPU where they differ: max error there %.3g (CPU %.3g)" % (ours, theirs)


def _clone(obj):
    return tree_map(lambda t: replicate(t, "cpu"), obj)


def run_forward(op, sample, dtype):
    """Outcome of the op's forward on one sample, or None when CPU itself fails."""
    torch = _torch()
    def cpu_run():
        inp, args, kwargs = _clone(sample.input), _clone(sample.args), _clone(sample.kwargs)
        with torch.no_grad():
            return _to_cpu(op(inp, *args, **kwargs))

    try:
        expected = cpu_run()
    except Exception:  # noqa: BLE001 - CPU rejects the sample: not counted
        return None
    rtol, atol = tolerances(op, dtype)
    values = values_comparable(op) and _reproducible(cpu_run)

    def attempt():
        t_inp, t_args, t_kwargs = _sample_to_tpu(op, sample)
        with torch.no_grad():
            return op(t_inp, *t_args, **t_kwargs)

    normalize = lambda result: normalize_signs(op, result)   # noqa: E731
    expected = normalize(expected)
    accuracy = []

    def precise_run():
        inp, args, kwargs = _upcast((sample.input, sample.args, sample.kwargs))
        with torch.no_grad():
            return _to_cpu(op(inp, *args, **kwargs))

    def check(got):
        _check_on_tpu(got, expected)
        try:
            compare(got, expected, rtol, atol, values, normalize)
        except AssertionError:
            note = values and dtype.is_floating_point and _closer_to_float64(
                normalize(_to_cpu(got)), expected, precise_run, rtol, atol, normalize)
            if not note:
                raise
            accuracy.append(note)

    return _with_accuracy(_classify(attempt, check), accuracy)


def _with_accuracy(outcome, notes):
    if notes and outcome.status in ("native", "fallback"):
        outcome.accuracy = notes[-1]
    return outcome


def _grad_leaves(sample):
    torch = _torch()
    seen, leaves = set(), []
    for t in tree_tensors((sample.input, sample.args, sample.kwargs)):
        if t.requires_grad and t.dtype.is_floating_point and id(t) not in seen:
            seen.add(id(t))
            leaves.append(t)
    return leaves


def _grads(op, sample, device):
    """(gradients of the sum of the floating outputs w.r.t. the sample's differentiable
    tensors, number of leaves) on device; None where nothing is differentiable. The forward
    runs with fallback allowed when device is tpu; the backward under the current mode."""
    torch = _torch()
    leaves = _grad_leaves(sample)
    if not leaves:
        return None
    mapping = {id(t): replicate(t, device).requires_grad_(True) for t in leaves}

    def move(t):
        if id(t) in mapping:
            return mapping[id(t)]
        return replicate(t, device)

    def move_arg(t):
        if device != "cpu" and op.name in _ARGS_STAY_ON_CPU and id(t) not in mapping:
            return t.detach()
        return move(t)

    inp = tree_map(move, sample.input)
    args, kwargs = tree_map(move_arg, sample.args), tree_map(move_arg, sample.kwargs)
    if device != "cpu":
        args, kwargs = _device_to_tpu(args), _device_to_tpu(kwargs)
    new_leaves = [mapping[id(t)] for t in leaves]
    with (fallback_mode("allow") if device != "cpu" else contextlib.nullcontext()):
        out = op(inp, *args, **kwargs)
        out = sample.output_process_fn_grad(out)
        outs = [o for o in tree_tensors(out) if o.dtype.is_floating_point and o.requires_grad]
        if not outs:
            return None
        loss = sum(o.sum() for o in outs)
    grads = torch.autograd.grad(loss, new_leaves, allow_unused=True)
    return [None if g is None else g.detach().cpu() for g in grads]


def run_backward(op, sample, dtype):
    """Outcome of the op's backward on one sample, or None when CPU itself fails or the
    sample has nothing differentiable."""
    try:
        expected = _grads(op, sample, "cpu")
    except Exception:  # noqa: BLE001
        return None
    if expected is None:
        return None
    rtol, atol = tolerances(op, dtype)
    values = values_comparable(op) and _reproducible(lambda: _grads(op, sample, "cpu"))

    def attempt():
        return _grads(op, sample, "tpu")

    def precise_run():
        import types
        inp, args, kwargs = _upcast((sample.input, sample.args, sample.kwargs))
        wide = types.SimpleNamespace(input=inp, args=args, kwargs=kwargs,
                                     output_process_fn_grad=sample.output_process_fn_grad)
        return _grads(op, wide, "cpu")

    accuracy = []

    def check(got):
        if got is None:
            raise AssertionError("tpu outputs are not differentiable")
        for i, (g, e) in enumerate(zip(got, expected)):
            if (g is None) != (e is None):
                raise AssertionError("gradient %d is %s on tpu, %s on CPU" % (
                    i, "None" if g is None else "defined", "None" if e is None else "defined"))
            if g is not None and (g.shape != e.shape or g.dtype != e.dtype):
                raise AssertionError("gradient %d is %s %s, expected %s %s" % (
                    i, g.dtype, list(g.shape), e.dtype, list(e.shape)))
        if not values:
            return
        try:
            for g, e in zip(got, expected):
                if g is not None:
                    _torch().testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError:
            note = _closer_to_float64(got, expected, precise_run, rtol, atol)
            if not note:
                raise
            accuracy.append(note)

    return _with_accuracy(_classify(attempt, check), accuracy)


# ---------------------------------------------------------------------------------------
# one op

def _aggregate(outcomes):
    """(record) for one op+dtype+direction from its per-sample (index, description, Outcome)."""
    if not outcomes:
        return {"status": "skipped", "samples": 0}
    counts = {s: 0 for s in STATUSES}
    fallback_ops = set()
    for _, _, o in outcomes:
        counts[o.status] += 1
        fallback_ops.update(o.fallback_ops)
    worst = min(outcomes, key=lambda x: _RANK[x[2].status])
    rec = {"status": worst[2].status, "samples": len(outcomes),
           "counts": {k: v for k, v in counts.items() if v}}
    if fallback_ops:
        rec["fallback_ops"] = sorted(fallback_ops)
    closer = ["sample %d %s: %s" % (i, d, o.accuracy) for i, d, o in outcomes if o.accuracy]
    if closer:
        rec["closer_to_float64"] = closer
    if worst[2].status in ("fails", "errors"):
        rec["message"] = worst[2].message
        rec["sample"] = "sample %d %s" % (worst[0], worst[1])
    return rec


def check_op(op, dtype_names=("float32",), limit_samples=6, backward=True, on_result=None):
    """Runs op for each dtype (those its OpInfo supports on CPU); returns
    {dtype: {"forward": record, "backward": record}}. on_result(dtype, entry) is called as
    each dtype completes."""
    supported = op.supported_dtypes("cpu")
    results = {}
    for name in dtype_names:
        dtype = _dtype(name)
        if dtype not in supported:
            continue
        grad = backward and op.supports_autograd and name in FLOAT_DTYPES
        entry = {}
        fwd, bwd = [], []
        try:
            samples = op.sample_inputs("cpu", dtype, requires_grad=grad)
            for i, sample in enumerate(samples):
                if i >= limit_samples:
                    break
                desc = _describe(sample)
                o = run_forward(op, sample, dtype)
                if o is not None:
                    fwd.append((i, desc, o))
                if grad:
                    o = run_backward(op, sample, dtype)
                    if o is not None:
                        bwd.append((i, desc, o))
        except Exception as e:  # noqa: BLE001 - sample generation itself failed on CPU
            entry["sample_error"] = "%s: %s" % (type(e).__name__, _first_line(e))
        entry["forward"] = _aggregate(fwd)
        if grad:
            entry["backward"] = _aggregate(bwd)
        results[name] = entry
        if on_result is not None:
            on_result(name, entry)
    return results


# ---------------------------------------------------------------------------------------
# worker processes

def _worker(conn, dtype_names, limit_samples, backward):
    os.environ.setdefault("TORCH_TPU_FALLBACK", "allow")
    import warnings
    warnings.filterwarnings("ignore")
    torch = _torch()
    torch.set_num_threads(1)
    import torch_tpu  # noqa: F401
    by_key = {op_key(op): op for op in load_op_db()}
    conn.send(("ready",))
    while True:
        try:
            key = conn.recv()
        except EOFError:
            return
        if key is None:
            return
        op = by_key[key]
        try:
            check_op(op, dtype_names, limit_samples, backward,
                     on_result=lambda d, e: conn.send(("dtype", key, d, e)))
        except Exception as e:  # noqa: BLE001
            conn.send(("op_error", key, "%s: %s" % (type(e).__name__, _first_line(e))))
        conn.send(("done", key))


def _failed_entries(op_dtypes, done, message, backward_for):
    """Records for the dtypes of an op that never completed (crash, timeout)."""
    out = {}
    for name in op_dtypes:
        if name in done:
            continue
        rec = {"status": "errors", "samples": 0, "message": message}
        out[name] = {"forward": dict(rec)}
        if name in backward_for:
            out[name]["backward"] = dict(rec)
    return out


def run_ops(keys, dtype_names=DEFAULT_DTYPES, limit_samples=6, backward=True, jobs=2,
            op_timeout=60.0, max_ops_per_worker=150, progress=None):
    """Runs the named OpInfos in `jobs` worker processes; returns {key: {dtype: entry}}."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    by_key = {op_key(op): op for op in load_op_db()}
    torch = _torch()
    plan = {}
    for key in keys:
        op = by_key[key]
        supported = op.supported_dtypes("cpu")
        names = [n for n in dtype_names if _dtype(n) in supported]
        grads = {n for n in names if backward and op.supports_autograd and n in FLOAT_DTYPES}
        plan[key] = (names, grads)
    del torch

    queue = list(keys)
    queue.reverse()
    results = {}
    workers = []

    def start():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, tuple(dtype_names), limit_samples, backward),
                           daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "ready": False, "key": None, "t0": 0.0, "count": 0}

    def finish(w, key):
        results.setdefault(key, {})
        w["key"] = None
        if progress:
            progress(key, results[key])

    def retire(w, message):
        key = w["key"]
        if key is not None:
            names, grads = plan[key]
            results.setdefault(key, {}).update(_failed_entries(names, results.get(key, {}), message, grads))
            finish(w, key)
        with contextlib.suppress(Exception):
            w["proc"].kill()
        w["proc"].join(5)
        w["conn"].close()

    for _ in range(max(1, min(jobs, len(queue)))):
        workers.append(start())

    while workers:
        for w in list(workers):
            if w["ready"] and w["key"] is None:
                if not queue or w["count"] >= max_ops_per_worker:
                    with contextlib.suppress(Exception):
                        w["conn"].send(None)
                    w["proc"].join(10)
                    if w["proc"].is_alive():
                        w["proc"].kill()
                    w["conn"].close()
                    workers.remove(w)
                    if queue:
                        workers.append(start())
                    continue
                w["key"] = queue.pop()
                w["t0"] = time.monotonic()
                w["count"] += 1
                w["conn"].send(w["key"])
        if not workers:
            break
        now = time.monotonic()
        deadlines = [w["t0"] + op_timeout - now for w in workers if w["key"] is not None]
        timeout = max(0.05, min(deadlines)) if deadlines else 5.0
        handles = {}
        for w in workers:
            handles[w["conn"]] = w
            handles[w["proc"].sentinel] = w
        ready = wait(list(handles), timeout)
        for w in {id(handles[h]): handles[h] for h in ready}.values():
            if w not in workers:
                continue
            try:
                while w["conn"].poll():
                    msg = w["conn"].recv()
                    if msg[0] == "ready":
                        w["ready"] = True
                    elif msg[0] == "dtype":
                        results.setdefault(msg[1], {})[msg[2]] = msg[3]
                    elif msg[0] == "op_error":
                        names, grads = plan[msg[1]]
                        results.setdefault(msg[1], {}).update(
                            _failed_entries(names, results.get(msg[1], {}), msg[2], grads))
                    elif msg[0] == "done":
                        finish(w, msg[1])
            except (EOFError, OSError):
                w["proc"].join(5)
            if not w["proc"].is_alive():
                retire(w, "worker crashed (exit code %s)" % w["proc"].exitcode)
                workers.remove(w)
                if queue:
                    workers.append(start())
        now = time.monotonic()
        for w in list(workers):
            if w["key"] is not None and now - w["t0"] > op_timeout:
                retire(w, "timeout (over %g s)" % op_timeout)
                workers.remove(w)
                if queue:
                    workers.append(start())
    return {key: results.get(key, {}) for key in keys}


# ---------------------------------------------------------------------------------------
# totals and report

def totals(results, dtype="float32"):
    """Per direction: counted ops, native ops, correct ops (native or fallback), per status."""
    out = {}
    for direction in ("forward", "backward"):
        counted = native = correct = 0
        by_status = {s: 0 for s in STATUSES}
        for per_dtype in results.values():
            rec = per_dtype.get(dtype, {}).get(direction)
            if not rec or rec["status"] == "skipped":
                continue
            counted += 1
            by_status[rec["status"]] += 1
            native += rec["status"] == "native"
            correct += rec["status"] in ("native", "fallback")
        out[direction] = {"ops": counted, "native": native, "correct_with_fallback": correct,
                          "by_status": by_status}
    return out


def _pct(n, m):
    return 100.0 * n / m if m else 0.0


def summary_lines(tot):
    f, b = tot["forward"], tot["backward"]
    return [
        "float32 backward: native %d/%d ops (%.1f%%), correct with fallback allowed %d/%d (%.1f%%)"
        % (b["native"], b["ops"], _pct(b["native"], b["ops"]), b["correct_with_fallback"], b["ops"],
           _pct(b["correct_with_fallback"], b["ops"])),
        "float32 forward: correct with fallback allowed %d/%d ops (%.1f%%)"
        % (f["correct_with_fallback"], f["ops"], _pct(f["correct_with_fallback"], f["ops"])),
        "native: %d/%d ops (%.1f%%)" % (f["native"], f["ops"], _pct(f["native"], f["ops"])),
    ]


def _reason_key(message):
    """A failure message with its numbers and shapes blanked, to group like failures."""
    text = (message or "").split("; ")[0]
    text = re.sub(r"\[[^\]]*\]", "[..]", text)
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    return text[:120]


def write_markdown(path, results, tot, meta, dtype_names):
    short = {"native": "N", "fallback": "F", "fails": "**X**", "errors": "**E**", "skipped": "-"}
    lines = ["# OpInfo consistency report (tpu vs CPU)", ""]
    lines.append("Generated by `python -m torch_tpu.tools.opinfo_report` in %.0f s; %s." % (
        meta["wall_seconds"], ", ".join("%s=%s" % (k, meta[k]) for k in ("limit_samples", "backward", "jobs"))))
    lines += ["", "N native, F fallback, **X** wrong result, **E** error, - no sample ran on CPU, "
              "blank: dtype not supported by the OpInfo. Each cell: forward/backward.", "",
              "Eigenvectors and singular vectors (the vector outputs of %s) are compared after "
              "normalizing each vector's sign on both sides (largest-magnitude entry positive): "
              "they are unique only up to sign." % ", ".join(sorted(_SIGN_GAUGE)), "", "## Totals", ""]
    lines += ["- " + ln for ln in summary_lines(tot)]
    for d in ("forward", "backward"):
        lines.append("- float32 %s by status: %s" % (d, ", ".join("%s %d" % kv for kv in tot[d]["by_status"].items())))
    lines += ["", "## Ops", "", "| op | " + " | ".join(dtype_names) + " | fallback ops |",
              "|---|" + "---|" * len(dtype_names) + "---|"]
    for key in sorted(results):
        cells, fb = [], set()
        for name in dtype_names:
            entry = results[key].get(name)
            if not entry:
                cells.append("")
                continue
            parts = [short[entry["forward"]["status"]]]
            if "backward" in entry:
                parts.append(short[entry["backward"]["status"]])
            for rec in (entry.get("forward", {}), entry.get("backward", {})):
                fb.update(rec.get("fallback_ops", ()))
            cells.append("/".join(parts))
        lines.append("| %s | %s | %s |" % (key, " | ".join(cells), ", ".join(sorted(fb))))
    groups = {}
    for key in sorted(results):
        for name, entry in results[key].items():
            for d in ("forward", "backward"):
                rec = entry.get(d)
                if rec and rec["status"] in ("fails", "errors"):
                    groups.setdefault((rec["status"], _reason_key(rec.get("message"))), []).append(
                        (key, name, d, rec))
    closer = [(key, name, d, note) for key in sorted(results) for name, entry in results[key].items()
              for d in ("forward", "backward") for note in (entry.get(d) or {}).get("closer_to_float64", ())]
    lines += ["", "## Differs from CPU, closer to float64 (%d samples, counted as correct)" % len(closer), ""]
    lines += ["- %s %s %s: %s" % item for item in closer]
    lines += ["", "## Failures and errors, grouped by reason", ""]
    for (status, reason), items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append("### %s (%d): %s" % (status, len(items), reason))
        lines.append("")
        for key, name, d, r in items:
            lines.append("- %s %s %s: %s -- %s" % (key, name, d, r.get("message", ""), r.get("sample", "")))
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m torch_tpu.tools.opinfo_report", description=__doc__.split("\n")[0])
    p.add_argument("--ops", help="comma-separated OpInfo names (default: all of op_db)")
    p.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES))
    p.add_argument("--limit-samples", type=int, default=6)
    p.add_argument("--out-dir", default="reports")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--op-timeout", type=float, default=60.0, help="seconds per op (all its dtypes)")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    dtype_names = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    for d in dtype_names:
        if not isinstance(getattr(_torch(), d, None), _torch().dtype):
            p.error("unknown dtype %r" % d)
    keys = [op_key(op) for op in find_ops(a.ops.split(",") if a.ops else None)]
    t0 = time.monotonic()
    done = [0]

    def progress(key, entry):
        done[0] += 1
        if not a.quiet:
            f = entry.get("float32", {}).get("forward", {}).get("status", "")
            print("[%d/%d %.0fs] %s %s" % (done[0], len(keys), time.monotonic() - t0, key, f), flush=True)

    results = run_ops(keys, dtype_names, a.limit_samples, not a.no_backward, a.jobs, a.op_timeout,
                      progress=progress)
    wall = time.monotonic() - t0
    tot = totals(results)
    meta = {"wall_seconds": round(wall, 1), "limit_samples": a.limit_samples, "backward": not a.no_backward,
            "jobs": a.jobs, "dtypes": dtype_names, "op_timeout": a.op_timeout, "ops": len(keys),
            "torch": _torch().__version__}
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "opinfo.json"), "w") as f:
        json.dump({"meta": meta, "totals": {"float32": tot}, "ops": results}, f, indent=1, sort_keys=True)
    write_markdown(os.path.join(a.out_dir, "opinfo.md"), results, tot, meta, dtype_names)
    print("wall time: %.0f s for %d ops; report in %s/opinfo.{json,md}" % (wall, len(keys), a.out_dir))
    for line in summary_lines(tot):
        print(line)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
