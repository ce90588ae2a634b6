"""Differential fuzzing: random programs of ATen ops run on CPU and on tpu, compared.

    python -m torch_tpu.tools.fuzz [--programs 1000] [--modes strict fused debug compiled]
                                   [--seed 0] [--batch 50] [--out reports/fuzz]

A program is a list of steps over a pool of tensors (float32, bfloat16, int32, int64 and
bool; 0-dim, 0-size and broadcastable shapes): elementwise ops with tensors and Python
scalars, reductions over random dims, views (slices with steps, transpose, select, expand,
unsqueeze) and in-place writes through them, indexing, concatenation, matmul and casts.
Each program runs from the same inputs on CPU and on tpu in every mode; every tensor of
the pool must then match CPU's (shape, dtype, values; a base written through a view is
compared like any tensor), and a step CPU rejects must be rejected on tpu with the same
exception type. In compiled mode the program runs as one function under
torch.compile(backend="tpu"). A failing program is shrunk (steps removed while it still
fails) and written as a reproducer. Programs run in child processes, a batch each, so a
crash is caught and named. Writes OUT.json and OUT.md.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import traceback

SIZES = (0, 1, 2, 3, 5)
DTYPES = ("float32", "bfloat16", "int32", "int64", "bool")
UNARY = ("neg", "abs", "exp", "sin", "tanh", "relu", "sigmoid", "floor", "sign", "square", "logical_not",
         "bitwise_not", "isnan", "sqrt", "reciprocal")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt", "logical_and", "bitwise_and",
          "remainder", "pow", "atan2", "floor_divide")
REDUCTIONS = ("sum", "mean", "amax", "amin", "prod", "any", "all", "argmax")
VIEWS = ("transpose", "slice", "select", "expand", "unsqueeze", "flatten")
IN_PLACE = ("add_", "mul_", "fill_", "clamp_", "copy_")
KINDS = ("unary", "binary", "scalar", "reduce", "view", "in_place", "index", "cat", "matmul", "cast", "where")


# ---------------------------------------------------------------- programs

def random_shape(rng):
    return [rng.choice(SIZES) for _ in range(rng.randint(0, 3))]


def random_program(rng, steps=8):
    """A program: its inputs (shape, dtype, seed) and its steps (kind, name, operands, params).
    Operands are indices into the pool taken modulo its size, so a shrunk program still runs."""
    inputs = []
    base = random_shape(rng) or [3]
    for _ in range(rng.randint(2, 4)):
        # Shapes related to one another broadcast more often than random ones.
        shape = list(base) if rng.random() < 0.6 else random_shape(rng)
        if rng.random() < 0.3 and shape:
            shape[rng.randrange(len(shape))] = 1
        inputs.append({"shape": shape, "dtype": rng.choice(DTYPES), "seed": rng.randrange(1 << 30)})
    program = []
    for _ in range(steps):
        kind = rng.choice(KINDS)
        step = {"kind": kind, "a": rng.randrange(64), "b": rng.randrange(64)}
        if kind == "unary":
            step["op"] = rng.choice(UNARY)
        elif kind == "binary":
            step["op"] = rng.choice(BINARY)
        elif kind == "scalar":
            step["op"] = rng.choice(("add", "mul", "sub", "div", "pow", "remainder"))
            step["scalar"] = rng.choice((2, -1, 0.5, 3.25, True, 0))
            step["reverse"] = rng.random() < 0.3
        elif kind == "reduce":
            step["op"] = rng.choice(REDUCTIONS)
            step["dim"] = rng.choice((None, 0, -1, 1))
            step["keepdim"] = rng.random() < 0.5
        elif kind == "view":
            step["op"] = rng.choice(VIEWS)
            step["i"], step["j"], step["step"] = rng.randrange(4), rng.randrange(4), rng.choice((1, 2))
        elif kind == "in_place":
            step["op"] = rng.choice(IN_PLACE)
            step["scalar"] = rng.choice((2, 0.5, -1))
        elif kind == "index":
            step["op"] = rng.choice(("index_select", "gather", "masked_fill", "getitem"))
            step["seed"] = rng.randrange(1 << 30)
        elif kind == "cast":
            step["dtype"] = rng.choice(DTYPES)
        program.append(step)
    return {"inputs": inputs, "steps": program}


# ---------------------------------------------------------------- running

def make_inputs(torch, program, device):
    tensors = []
    for spec in program["inputs"]:
        g = torch.Generator().manual_seed(spec["seed"])
        dtype = getattr(torch, spec["dtype"])
        if dtype == torch.bool:
            t = torch.rand(spec["shape"], generator=g) > 0.5
        elif dtype.is_floating_point:
            t = (torch.randn(spec["shape"], generator=g) * 2).to(dtype)
        else:
            t = torch.randint(-4, 5, spec["shape"], generator=g, dtype=dtype)
        tensors.append(t.to(device))
    return tensors


def _pick(pool, index):
    return pool[index % len(pool)]


def apply_step(torch, pool, step):
    """Runs one step on `pool`, appending what it makes (views included)."""
    a, b = _pick(pool, step["a"]), _pick(pool, step["b"])
    kind = step["kind"]
    if kind == "unary":
        out = getattr(torch, step["op"])(a)
    elif kind == "binary":
        out = getattr(torch, step["op"])(a, b)
    elif kind == "scalar":
        s = step["scalar"]
        fn = getattr(torch, step["op"])
        out = fn(s, a) if step["reverse"] and step["op"] in ("pow", "sub", "remainder") and not isinstance(s, bool) \
            else fn(a, s)
    elif kind == "reduce":
        dim, op = step["dim"], step["op"]
        if dim is None:
            out = getattr(torch, op)(a)
        else:
            out = getattr(torch, op)(a, dim=dim, keepdim=step["keepdim"])
    elif kind == "view":
        op, i, j = step["op"], step["i"], step["j"]
        rank = max(a.dim(), 1)
        if op == "transpose":
            out = a.transpose(i % rank, j % rank) if a.dim() else a.t()
        elif op == "slice":
            d = i % rank
            out = a[(slice(None),) * d + (slice(j % 2, None, step["step"]),)] if a.dim() else a
        elif op == "select":
            out = a.select(i % rank, j % max(a.shape[i % rank], 1)) if a.dim() else a
        elif op == "expand":
            out = a.expand(2, *a.shape)
        elif op == "unsqueeze":
            out = a.unsqueeze(i % (a.dim() + 1))
        else:
            out = a.flatten()
    elif kind == "in_place":
        op, s = step["op"], step["scalar"]
        if op == "fill_":
            a.fill_(s)
        elif op == "clamp_":
            a.clamp_(min=-1, max=1)
        elif op == "copy_":
            a.copy_(b)
        else:
            getattr(a, op)(s)
        return
    elif kind == "index":
        g = torch.Generator().manual_seed(step["seed"])
        op = step["op"]
        if op == "masked_fill":
            out = a.masked_fill(b.bool() if b.dtype != torch.bool else b, 1)
        elif a.dim() == 0:
            out = a.clone()
        elif op == "index_select":
            idx = torch.randint(0, max(a.shape[0], 1), (3,), generator=g).to(a.device)
            out = a.index_select(0, idx)
        elif op == "gather":
            idx = torch.randint(0, max(a.shape[-1], 1), tuple(a.shape), generator=g).to(a.device)
            out = a.gather(-1, idx)
        else:
            idx = torch.randint(0, max(a.shape[0], 1), (2,), generator=g).to(a.device)
            out = a[idx]
    elif kind == "cat":
        out = torch.cat([a, b], dim=0)
    elif kind == "matmul":
        out = torch.matmul(a, b)
    elif kind == "cast":
        out = a.to(getattr(torch, step["dtype"]))
    else:  # where
        out = torch.where(a.bool() if a.dtype != torch.bool else a, b, 0)
    pool.append(out)


def run_program(torch, program, device, compiled=False, backend="tpu"):
    """(pool, errors): every tensor the program left, on the CPU, and each step's exception
    type name or None. Compiled: the steps run as one function under torch.compile (`backend`);
    a program CPU rejects somewhere is not run compiled."""
    pool = make_inputs(torch, program, device)
    errors = []
    if compiled:
        def whole(*tensors):
            items = list(tensors)
            for step in program["steps"]:
                apply_step(torch, items, step)
            return items
        pool = torch.compile(whole, backend=backend)(*pool)
        errors = [None] * len(program["steps"])
    else:
        for step in program["steps"]:
            try:
                apply_step(torch, pool, step)
                errors.append(None)
            except Exception as e:  # noqa: BLE001 - the type is what is compared
                errors.append("%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else ""))
    return [t.detach().cpu() for t in pool], errors


# Differences that are documented (README, known limits) and tested elsewhere: counted
# apart, not as mismatches. (mode predicate, cpu error prefix, tpu outcome)
DOCUMENTED = (
    ("integer division by zero is checked in debug mode only",
     lambda mode: mode != "debug", "RuntimeError: ZeroDivisionError", None),
)


COMPILED_AS_ON_CPU = ("torch.compile does the same on CPU with PyTorch's own aot_eager backend (its fake tensors and "
                      "functionalization, e.g. a write through an expanded view summed back into its base)")


def _aot_eager_on_cpu(torch, program):
    """(pool, None) of the program compiled with PyTorch's aot_eager backend on CPU, or (None, exception)."""
    torch._dynamo.reset()
    try:
        pool, _ = run_program(torch, program, "cpu", compiled=True, backend="aot_eager")
        return pool, None
    except Exception as e:  # noqa: BLE001 - the outcome compared
        return None, e
    finally:
        torch._dynamo.reset()


UNDEFINED_CONVERSION = ("a NaN, infinite or out-of-range float converted to an integer is undefined in C++: x86 "
                        "CPU gives the smallest integer, XLA 0 or the nearest bound")


def _undefined_conversion(torch, cpu, tpu):
    """Whether every differing element is CPU's x86 'integer indefinite' value (INT_MIN)."""
    if cpu.dtype not in (torch.int32, torch.int64):
        return False
    differ = cpu != tpu
    return bool((cpu[differ] == torch.iinfo(cpu.dtype).min).all())


def documented(mode, cpu_error, tpu_error):
    for why, applies, cpu_prefix, tpu_outcome in DOCUMENTED:
        if applies(mode) and (cpu_error or "").startswith(cpu_prefix) and tpu_error == tpu_outcome:
            return why
    return None


def _describe(step):
    return step.get("op") or step["kind"]


def compare(torch, program, mode):
    """None when tpu agrees with CPU; otherwise what differs."""
    import torch_tpu
    cpu_pool, cpu_errors = run_program(torch, program, "cpu")
    if mode == "compiled" and any(cpu_errors):
        return None  # compiled runs only programs CPU accepts
    if mode == "compiled":
        torch._dynamo.reset()
    try:
        with torch_tpu.eager_mode("strict" if mode == "compiled" else mode):
            tpu_pool, tpu_errors = run_program(torch, program, "tpu", compiled=mode == "compiled")
            torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001 - a step CPU ran without error raised on tpu (fused: at the cut)
        if mode == "compiled" and type(_aot_eager_on_cpu(torch, program)[1]) is type(e):
            return "documented: " + COMPILED_AS_ON_CPU
        return "tpu raised %s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
    failure = _differences(torch, cpu_pool, cpu_errors, tpu_pool, tpu_errors, program, mode)
    if mode == "compiled" and failure and not failure.startswith("documented: "):
        reference, error = _aot_eager_on_cpu(torch, program)
        if error is None and _differences(torch, reference, cpu_errors, tpu_pool, tpu_errors, program, mode) is None:
            return "documented: " + COMPILED_AS_ON_CPU
    return failure


def _differences(torch, cpu_pool, cpu_errors, tpu_pool, tpu_errors, program, mode):
    """None when the tpu run's errors and tensors are CPU's; otherwise what differs."""
    for k, (x, y) in enumerate(zip(cpu_errors, tpu_errors)):
        if (x or "").split(":")[0] != (y or "").split(":")[0]:  # the exception types
            why = documented(mode, x, y)
            if why:
                return "documented: " + why
            return "step %d (%s): cpu %s; tpu %s" % (k, _describe(program["steps"][k]), x or "ran", y or "ran")
    if len(cpu_pool) != len(tpu_pool):
        return "pool sizes %d and %d" % (len(cpu_pool), len(tpu_pool))
    for k, (x, y) in enumerate(zip(cpu_pool, tpu_pool)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return "tensor %d: cpu %s %s, tpu %s %s" % (k, tuple(x.shape), x.dtype, tuple(y.shape), y.dtype)
        tol = dict(rtol=2e-2, atol=2e-2) if x.dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
        try:
            torch.testing.assert_close(y, x, equal_nan=True, **tol)
        except AssertionError as e:
            if _undefined_conversion(torch, x, y):
                return "documented: " + UNDEFINED_CONVERSION
            return "tensor %d: values: %s" % (k, str(e).splitlines()[0] if str(e) else "differ")
    return None


def _kind(failure):
    """What a failure is, without the step number: the same kind of failure survives a shrink."""
    if failure is None or failure.startswith("documented: "):
        return None
    return re.sub(r"^(step|tensor) \d+", "", failure)


def shrink(torch, program, mode):
    """Removes steps while the program still fails the same way."""
    failure = compare(torch, program, mode)
    changed = True
    while changed:
        changed = False
        for k in range(len(program["steps"])):
            candidate = dict(program, steps=program["steps"][:k] + program["steps"][k + 1:])
            try:
                if _kind(compare(torch, candidate, mode)) == _kind(failure):
                    program, changed = candidate, True
                    break
            except Exception:  # noqa: BLE001 - a candidate that fails otherwise is not kept
                continue
    return program, failure


def _batch_child(seed, count, modes, steps):
    import torch
    import torch_tpu  # noqa: F401
    results = []
    for n in range(count):
        program = random_program(random.Random(seed * 100003 + n), steps)
        for mode in modes:
            try:
                failure = compare(torch, program, mode)
            except Exception as e:  # noqa: BLE001 - recorded as the program's failure
                failure = "raised %s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
            entry = {"program": n, "mode": mode, "failure": failure}
            if failure is not None and failure.startswith("documented: "):
                entry = {"program": n, "mode": mode, "failure": None, "documented": failure[len("documented: "):]}
            elif failure is not None:
                try:
                    entry["reproducer"], entry["failure"] = shrink(torch, program, mode)
                except Exception:  # noqa: BLE001
                    entry["reproducer"], entry["shrink_error"] = program, traceback.format_exc()[-500:]
            results.append(entry)
    return results


def run(programs, modes, seed=0, batch=50, steps=8, timeout=1800):
    """Runs `programs` random programs in child processes of `batch` each; returns the records."""
    records = []
    for first in range(0, programs, batch):
        count = min(batch, programs - first)
        code = ("import json, sys; from torch_tpu.tools import fuzz; "
                "print('FUZZ' + json.dumps(fuzz._batch_child(%d, %d, %r, %d)))" % (seed + first, count, list(modes), steps))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        lines = [line for line in done.stdout.splitlines() if line.startswith("FUZZ")]
        if done.returncode != 0 or not lines:
            records.append({"batch_seed": seed + first, "crash": "exit %d: %s" % (done.returncode, done.stderr[-1500:])})
            continue
        for entry in json.loads(lines[-1][4:]):
            entry["batch_seed"] = seed + first
            records.append(entry)
    return records


def summary(records, modes):
    table = {}
    for mode in modes:
        mine = [r for r in records if r.get("mode") == mode]
        table[mode] = {"programs": len(mine),
                       "agree": sum(r["failure"] is None and "documented" not in r for r in mine),
                       "documented_differences": sum("documented" in r for r in mine),
                       "mismatches": sum(r["failure"] is not None for r in mine)}
    table["crashed_batches"] = sum("crash" in r for r in records)
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--modes", nargs="+", default=["strict", "fused", "debug", "compiled"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", default=os.path.join("reports", "fuzz"))
    args = parser.parse_args(argv)
    records = run(args.programs, args.modes, args.seed, args.batch, args.steps)
    table = summary(records, args.modes)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"table": table, "records": [r for r in records if r.get("failure") or "crash" in r]}, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write("| mode | programs | agree | documented differences | mismatches |\n|---|---|---|---|---|\n")
        for mode in args.modes:
            t = table[mode]
            f.write("| %s | %d | %d | %d | %d |\n" % (mode, t["programs"], t["agree"], t["documented_differences"],
                                                    t["mismatches"]))
        f.write("\ncrashed batches: %d\n" % table["crashed_batches"])
        for r in records:
            if r.get("failure") or "crash" in r:
                f.write("\n- %s\n" % json.dumps({k: r[k] for k in r if k != "reproducer"})[:600])
    print(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
