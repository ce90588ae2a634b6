"""Training-step benchmark across execution modes: native CPU eager, tpu strict,
tpu fused (DeferAndFuse), torch.compile(backend="tpu"), the XLA reference (the
whole step in JAX, jitted as one program: bench/jax_reference.py) and, when asked
for, native CUDA eager.

    python bench/modes.py [--workloads mlp gpt-tiny gpt-small]
                          [--modes cpu strict fused compiled jax [cuda]]
                          [--steps N] [--rounds R] [--interleave]
                          [--plugin cpu|cuda|tpu|/path/plugin.so]
                          [--out bench/results/modes.json] [--chart bench/results/modes.png]

Every (workload, mode) runs in fresh subprocesses so that caches and memory peaks
are independent: a first one with an empty, private disk compilation cache
(TORCH_TPU_CACHE_DIR in a new temp dir) measures the cold first step and the
steady state; a second one reusing that directory measures the warm first step.
A mode that the backend does not offer yet (fused raises NotImplementedError
today) is recorded as "unavailable" with its message, a mode that fails as
"error" with its message; no figure is ever made up for either.

Timing: a step is host-to-device copy of the batch, zero_grad, forward, backward,
optimizer step and `loss.item()` (reading the loss each step, as a training loop
that logs it does). The steady step time is the median over --steps timed steps
after the first step and WARMUP_STEPS more. With --rounds R > 1 each workload's
modes run R times in turn (strict, fused, ..., strict, fused, ...), each time in a
fresh process, and the steady step time is the median of the R per-run medians: on
a shared machine whose speed drifts, every mode then samples the same periods, which
steadies the ratios between modes.

With --interleave, each workload also gets one more process that holds a model and
optimizer per tpu mode (same seed, same batches) and runs them in turn, in blocks of
--interleave-steps steps closed by a synchronize, 2 x --rounds blocks per mode in
alternating order. Every ratio between modes is then taken block by block, between
steps measured seconds apart under the same load, and reported as the median of the
per-block ratios (the report's results_interleaved[workload]).
"""
import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("mlp", "gpt-tiny", "gpt-small")
TPU_MODES = ("strict", "fused", "compiled")
ALL_MODES = ("cpu", "strict", "fused", "compiled", "jax", "cuda")
DEFAULT_MODES = ("cpu", "strict", "fused", "compiled", "jax")
# Timed steps per workload when --steps is not given: gpt-small takes ~0.5-3 s a
# step on this 2-core machine, so it gets fewer to keep a default run near 4 minutes.
DEFAULT_STEPS = {"mlp": 100, "gpt-tiny": 50, "gpt-small": 20}
WARMUP_STEPS = 2
# Steps of the phase breakdown (a synchronize after each phase) that follows the timed steps.
PHASE_STEPS = 20
PHASES = ("batch", "forward", "backward", "optimizer")
MLP_BATCH = 128
CHILD_TIMEOUT_S = 900


# --------------------------------------------------------------------------- workloads
# Built on the host with a fixed seed, then moved, so every mode starts from the
# same weights and sees the same batches: final losses are directly comparable.

def _reference_workloads():
    """torch_tpu.testing when torch_tpu is loaded; else (the native modes, or a CUDA
    machine without a torch_tpu build) the file alone, without loading the backend."""
    if "torch_tpu" in sys.modules:
        from torch_tpu import testing
        return testing
    import importlib.util

    path = os.path.join(os.path.dirname(HERE), "torch_tpu", "testing.py")
    spec = importlib.util.spec_from_file_location("torch_tpu_testing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _make_workload(name, device):
    import torch
    ref = _reference_workloads()

    torch.manual_seed(0)
    if name == "mlp":
        d_in, d_out = 64, 10
        model = ref.mlp(d_in=d_in, d_out=d_out)
        g = torch.Generator().manual_seed(0)
        teacher = torch.randn(d_in, d_out, generator=g)
        batches = []
        for _ in range(4):
            x = torch.randn(MLP_BATCH, d_in, generator=g)
            batches.append((x, (x @ teacher).argmax(1)))
        loss_fn = torch.nn.functional.cross_entropy
        model = model.to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        info = {"model": "torch_tpu.testing.mlp(d_in=64, hidden=256, d_out=10)", "optimizer": "SGD(lr=0.1)",
                "batch": MLP_BATCH, "loss": "cross_entropy"}

        def forward(x, y):
            return loss_fn(model(x), y)
        tokens = None
    else:
        cfg = ref.GPT_TINY if name == "gpt-tiny" else ref.GPT_SMALL
        model = ref.GPT(cfg).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        batches = [ref.gpt_batch(cfg, seed) for seed in range(4)]
        info = {"model": "torch_tpu.testing.GPT(%s)" % ("GPT_TINY" if name == "gpt-tiny" else "GPT_SMALL"),
                "config": dict(vars(cfg)), "optimizer": "AdamW(lr=3e-3)", "loss": "cross_entropy"}

        def forward(x, y):
            return model(x, y)[1]
        tokens = cfg.batch * cfg.seq
    info["parameters"] = sum(p.numel() for p in model.parameters())
    info["tokens_per_step"] = tokens
    return model, opt, forward, batches, info


def _train_step(opt, forward, compiled):
    """zero_grad, forward, backward, optimizer step; returns the loss (not read)."""
    def train_step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = forward(x, y)
        loss.backward()
        opt.step()
        return loss

    if compiled:
        import torch
        return torch.compile(train_step, backend="tpu")
    return train_step


def _phase_breakdown(model_step_parts, batches, device, sync, steps=PHASE_STEPS):
    """Median host time and synchronize time of each phase of a step, with a
    synchronize after every phase: on tpu, the host's time to record or launch
    the phase's ops, then the time until the device has run them (fused: the
    cut, and the phase's program run alone). {phase: {"host_ms", "sync_ms"}}."""
    zero_grad, forward, step = model_step_parts
    samples = {p: ([], []) for p in PHASES}
    for i in range(steps + 1):  # the first is a warm-up: its cuts differ
        x, y = batches[i % len(batches)]
        state = {}

        def batch():
            state["x"], state["y"] = x.to(device), y.to(device)
            zero_grad()

        def forward_phase():
            state["loss"] = forward(state["x"], state["y"])

        parts = (batch, forward_phase, lambda: state["loss"].backward(), step)
        for phase, part in zip(PHASES, parts):
            t = time.perf_counter()
            part()
            host = time.perf_counter() - t
            t = time.perf_counter()
            sync()
            if i > 0:
                samples[phase][0].append(host)
                samples[phase][1].append(time.perf_counter() - t)
        state["loss"].item()
    return {p: {"host_ms": statistics.median(h) * 1e3, "sync_ms": statistics.median(w) * 1e3}
            for p, (h, w) in samples.items()}


def _finisher(record, path):
    """finish(status, error=None): sets the record's status (and error) and writes it to `path`."""
    def finish(status, error=None):
        record["status"] = status
        if error is not None:
            record["error"] = error
        with open(path, "w") as f:
            json.dump(record, f)
    return finish


def _tpu_block(torch_tpu, mode, train_step, batches):
    """run(n): n steps of a tpu mode in that mode, closed by a synchronize."""
    import torch

    def run(n):
        torch_tpu.set_eager_mode("strict" if mode == "compiled" else mode)
        torch.tpu.synchronize()
        for i in range(n):
            x, y = batches[i % len(batches)]
            train_step(x.to("tpu"), y.to("tpu")).item()
        torch.tpu.synchronize()
    return run


def _jax_reference():
    """bench/jax_reference.py, imported on demand: only the jax mode needs jax."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import jax_reference
    return jax_reference


def _xla_reference_block(workload):
    """run(n): n steps of the XLA reference (see jax_reference)."""
    model, _, _, batches, info = _make_workload(workload, "cpu")
    step = _jax_reference().make_runner(workload, model, batches, info)

    def run(n):
        for _ in range(n):
            step()
    return run


def _interleaved_child(args):
    """Runs the tpu modes (and the jax reference) of args.mode (comma-separated) in
    one process, block by block in turn, and writes their per-block step times and
    block-wise ratios."""
    modes = args.mode.split(",")
    record = {"workload": args.workload, "mode": args.mode, "phase": "interleaved",
              "block_steps": args.steps, "blocks_per_mode": 2 * args.rounds}

    finish = _finisher(record, args.child_out)

    try:
        import torch
        import torch_tpu

        steps = {}
        for mode in modes:
            if mode == "jax":
                steps[mode] = _xla_reference_block(args.workload)
                continue
            torch_tpu.set_eager_mode("strict" if mode == "compiled" else mode)
            model, opt, forward, batches, _ = _make_workload(args.workload, "tpu")
            steps[mode] = _tpu_block(torch_tpu, mode, _train_step(opt, forward, compiled=mode == "compiled"),
                                     batches)

        def block(mode, n):
            start = time.perf_counter()
            steps[mode](n)
            return (time.perf_counter() - start) / n

        for mode in modes:  # compile and warm every mode before timing any
            block(mode, WARMUP_STEPS + 1)
        times = {mode: [] for mode in modes}
        for b in range(2 * args.rounds):
            for mode in (modes if b % 2 == 0 else modes[::-1]):
                times[mode].append(block(mode, args.steps))
        record["step_s"] = times
        record["step_median_s"] = {m: statistics.median(v) for m, v in times.items()}
        ratios = {}
        for faster, slower in (("fused", "strict"), ("compiled", "strict"), ("compiled", "fused"),
                               ("strict", "jax"), ("fused", "jax"), ("compiled", "jax")):
            if faster in times and slower in times:
                per_block = [s / f for s, f in zip(times[slower], times[faster])]
                ratios["%s_over_%s_throughput" % (faster, slower)] = {
                    "median": statistics.median(per_block), "min": min(per_block), "max": max(per_block),
                    "per_block": per_block}
        record["ratios"] = ratios
        return finish("ok")
    except Exception as e:  # noqa: BLE001 - recorded, never hidden
        return finish("error", "%s: %s" % (type(e).__name__, str(e)[:2000]))


def _timed_steps(record, step, n, sync, earlier_losses, info):
    """Times n steps (`step()` returns the loss it read) and puts the steady-state
    figures in `record`; `earlier_losses` are those of the first and warm-up steps."""
    times, losses = [], []
    start = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t)
    sync()
    total = time.perf_counter() - start
    record["steps"] = n
    record["step_times_s"] = times
    record["step_median_s"] = statistics.median(times)
    record["step_mean_s"] = total / n  # includes the final synchronize
    record["step_min_s"] = min(times)
    record["final_loss"] = losses[-1]
    # Every step's loss from the first: the modes see the same batches in the same order,
    # so step k is comparable across modes (a final loss alone can agree after a run has
    # drifted and converged back).
    record["losses"] = list(earlier_losses) + losses
    if info["tokens_per_step"]:
        record["tokens_per_step"] = info["tokens_per_step"]
        record["tokens_per_s"] = info["tokens_per_step"] / record["step_median_s"]


def _jax_child(args, record, finish):
    """Mode "jax": the XLA reference's step (see jax_reference), with a torch mode's record keys."""
    try:
        import jax
    except ImportError as e:
        return finish("unavailable", "jax does not import: %s" % e)
    try:
        model, _, _, batches, info = _make_workload(args.workload, "cpu")
        record["workload_info"] = info
        device = jax.devices()[0]
        record["jax"] = {"version": jax.__version__, "device": str(device), "platform": device.platform}
        step = _jax_reference().make_runner(args.workload, model, batches, info)
        t = time.perf_counter()
        record["first_loss"] = step()
        record["first_step_s"] = time.perf_counter() - t
        warmup_losses = [step() for _ in range(WARMUP_STEPS)]
        # each step reads its loss, which waits for the device: nothing left to synchronize
        _timed_steps(record, step, args.steps, lambda: None, [record["first_loss"]] + warmup_losses, info)
        record["peak_memory_bytes"] = (device.memory_stats() or {}).get("peak_bytes_in_use")  # XLA:CPU: None
        return finish("ok")
    except Exception as e:  # noqa: BLE001 - recorded, never hidden
        return finish("error", "%s: %s" % (type(e).__name__, str(e)[:2000]))


def _child(args):
    """Runs one (workload, mode) in this process and writes a JSON record."""
    record = {"workload": args.workload, "mode": args.mode, "phase": args.phase}

    finish = _finisher(record, args.child_out)

    t0 = time.perf_counter()
    import torch
    torch_tpu = None
    if args.mode in TPU_MODES:  # native modes run without torch_tpu (see _run_child)
        try:
            import torch_tpu
        except ImportError as e:
            return finish("error", "torch_tpu does not import: %s" % e)
    record["import_s"] = time.perf_counter() - t0
    record["torch_tpu_loaded"] = "torch_tpu" in sys.modules
    if args.threads:
        torch.set_num_threads(args.threads)
    record["torch_threads"] = torch.get_num_threads()

    mode = args.mode
    if mode == "jax":
        return _jax_child(args, record, finish)
    if mode == "cpu":
        device = "cpu"
    elif mode == "cuda":
        if not torch.cuda.is_available():
            return finish("unavailable", "torch.cuda.is_available() is False (torch %s)" % torch.__version__)
        device = "cuda"
    else:
        device = "tpu"
        try:
            record["plugin"] = torch_tpu.plugin_info()
            torch_tpu.set_eager_mode("strict" if mode == "compiled" else mode)
            record["eager_mode"] = torch_tpu.get_eager_mode()
        except (NotImplementedError, ValueError) as e:  # a mode this build does not offer
            return finish("unavailable", "%s: %s" % (type(e).__name__, e))
        except Exception as e:  # noqa: BLE001 - recorded, never hidden
            return finish("error", "%s: %s" % (type(e).__name__, e))
    on_tpu = device == "tpu"

    def sync():
        if on_tpu:
            torch.tpu.synchronize()
        elif device == "cuda":
            torch.cuda.synchronize()

    def metrics():
        return torch_tpu.metrics() if on_tpu else None

    try:
        model, opt, forward, batches, info = _make_workload(args.workload, device)
        record["workload_info"] = info

        train_step = _train_step(opt, forward, compiled=mode == "compiled")

        step_index = [0]

        def step():
            x, y = batches[step_index[0] % len(batches)]
            step_index[0] += 1
            x, y = x.to(device), y.to(device)
            return train_step(x, y).item()

        sync()
        m0 = metrics()
        t = time.perf_counter()
        first_loss = step()
        sync()
        record["first_step_s"] = time.perf_counter() - t
        record["first_loss"] = first_loss
        if on_tpu:
            m1 = metrics()
            record["first_step"] = {k: m1[k] - m0[k] for k in (
                "compiles", "compile_seconds", "disk_cache_hits", "disk_load_seconds", "executions", "fallbacks")}
            record["cache_dir"] = torch_tpu.get_cache_dir()
        if args.phase == "first":
            return finish("ok")

        warmup_losses = [step() for _ in range(WARMUP_STEPS)]
        sync()
        if on_tpu:
            # Steady state is after the background compiles (fused mode off XLA:CPU):
            # until they finish, a cut runs its graph op by op.
            t = time.perf_counter()
            torch_tpu.wait_for_compiles()
            record["background_compile_wait_s"] = time.perf_counter() - t
            torch.tpu.reset_peak_memory_stats()
            record["memory_allocated_before_steps"] = torch.tpu.memory_allocated()
        elif device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            record["memory_allocated_before_steps"] = torch.cuda.memory_allocated()
        m0 = metrics()
        _timed_steps(record, step, args.steps, sync, [first_loss] + warmup_losses, info)
        n = args.steps
        if on_tpu:
            record["peak_memory_bytes"] = torch.tpu.max_memory_allocated()
            m1 = metrics()
            d = {k: m1[k] - m0[k] for k in ("compiles", "executions", "fallbacks", "host_to_device_transfers",
                                            "device_to_host_transfers", "execute_seconds")}
            record["steady"] = {
                "programs_compiled": d["compiles"],
                "executions_per_step": d["executions"] / n,
                "fallbacks": d["fallbacks"],
                "host_to_device_transfers_per_step": d["host_to_device_transfers"] / n,
                "device_to_host_transfers_per_step": d["device_to_host_transfers"] / n,
            }
            record["fallbacks_total"] = m1["fallbacks"]
            record["fallback_ops"] = m1["fallback_ops"]
            record["compiled_programs_total"] = m1["compiled_programs"]
        elif device == "cuda":
            record["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        else:
            record["peak_memory_bytes"] = None
        # After every figure above: these steps synchronize after each phase.
        if mode != "compiled":  # a compiled step is one callable: no phases to time apart
            record["phases_ms"] = _phase_breakdown(
                (lambda: opt.zero_grad(set_to_none=True), forward, opt.step), batches, device, sync)
        return finish("ok")
    except NotImplementedError as e:
        return finish("unavailable", "%s: %s" % (type(e).__name__, e))
    except Exception as e:  # noqa: BLE001 - recorded, never hidden
        return finish("error", "%s: %s" % (type(e).__name__, str(e)[:2000]))


# --------------------------------------------------------------------------- parent

def _run_child(workload, mode, phase, steps, cache_dir, plugin, threads, rounds=1):
    env = dict(os.environ)
    env.pop("TORCH_TPU_EAGER_MODE", None)  # the child sets its mode itself
    env["TORCH_TPU_CACHE_DIR"] = cache_dir
    if mode not in TPU_MODES:
        # Native eager runs as without torch_tpu: once loaded, the PrivateUse1 backend is
        # torch's accelerator, and torch 2.11's autograd then fails on CUDA tensors.
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    if "jax" in mode.split(","):
        # XLA on the device the tpu modes use: jaxlib's own CPU client, or CUDA on the GPU box,
        # where it must not take most of the GPU's memory ahead (the interleaved process
        # shares the device with torch_tpu's client).
        env.setdefault("JAX_PLATFORMS", "cuda" if plugin == "cuda" else "tpu" if plugin == "tpu" else "cpu")
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if plugin:
        env["TORCH_TPU_PLUGIN"] = plugin
    fd, out = tempfile.mkstemp(prefix="modes-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--workload", workload, "--mode", mode,
           "--phase", phase, "--steps", str(steps), "--rounds", str(rounds), "--child-out", out] + (
               ["--threads", str(threads)] if threads else [])
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        rc, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        partial = e.stderr or ""
        if isinstance(partial, bytes):  # TimeoutExpired may carry undecoded output
            partial = partial.decode("utf-8", "replace")
        rc, stderr = None, "timed out after %g s\n%s" % (CHILD_TIMEOUT_S, partial[-2000:])
    wall = time.perf_counter() - start
    try:
        with open(out) as f:
            text = f.read()
        record = json.loads(text) if text else None
    except (OSError, ValueError):
        record = None
    finally:
        os.unlink(out)
    if record is None:
        tail = stderr.strip().splitlines()[-15:] if stderr else []
        record = {"workload": workload, "mode": mode, "phase": phase, "status": "error",
                  "error": "subprocess exited with %s and wrote no result: %s" % (rc, "\n".join(tail))}
    elif rc not in (0, None) and record.get("status") == "ok":
        record["exit_code"] = rc  # e.g. a crash at interpreter exit, after the result was written
    record["subprocess_wall_s"] = wall
    return record


@contextlib.contextmanager
def _private_cache_dir():
    """A fresh, empty disk compilation cache directory, removed afterwards."""
    cache_dir = tempfile.mkdtemp(prefix="torch_tpu_bench_cache_")
    try:
        yield cache_dir
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def _bench_one(workload, mode, steps, plugin, threads):
    with _private_cache_dir() as cache_dir:
        cold = _run_child(workload, mode, "full", steps, cache_dir, plugin, threads)
        result = {k: v for k, v in cold.items() if k != "phase"}
        if mode in TPU_MODES:
            result["first_step_cold_s"] = cold.get("first_step_s")
            result["first_step_cold"] = result.pop("first_step", None)
            if cold["status"] == "ok":
                warm = _run_child(workload, mode, "first", steps, cache_dir, plugin, threads)
                if warm["status"] == "ok":
                    result["first_step_warm_s"] = warm["first_step_s"]
                    result["first_step_warm"] = warm.get("first_step")
                    result["warm_first_loss"] = warm.get("first_loss")
                else:
                    result["warm_error"] = warm.get("error")
                result["subprocess_wall_s"] += warm["subprocess_wall_s"]
            result.pop("first_step_s", None)
        return result


def _steady_round(workload, mode, steps, plugin, threads):
    """Per-step median of one more steady-state run (fresh process and cache), or None."""
    with _private_cache_dir() as cache_dir:
        r = _run_child(workload, mode, "full", steps, cache_dir, plugin, threads)
    return r.get("step_median_s") if r.get("status") == "ok" else None


def _combine_rounds(result, medians):
    """result's steady step time becomes the median of its rounds' medians (a failed
    round is left out), and its tokens/s follows."""
    medians = [m for m in medians if m is not None]
    result["round_step_median_s"] = medians
    result["step_median_s"] = statistics.median(medians)
    if result.get("tokens_per_step"):
        result["tokens_per_s"] = result["tokens_per_step"] / result["step_median_s"]


def _ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def _add_ratios(results):
    ratios = {}
    for workload, modes in results.items():
        r = {}
        ok = {m: v for m, v in modes.items() if v.get("status") == "ok"}
        strict, fused, cpu, jax = ok.get("strict"), ok.get("fused"), ok.get("cpu"), ok.get("jax")
        # throughput ratio = inverse ratio of step times; > 1 means fused is faster
        r["fused_over_strict_throughput"] = _ratio(strict and strict.get("step_median_s"),
                                                   fused and fused.get("step_median_s"))
        r["fused_over_strict_peak_memory"] = _ratio(fused and fused.get("peak_memory_bytes"),
                                                    strict and strict.get("peak_memory_bytes"))
        for mode, v in ok.items():
            if mode != "cpu":
                r["%s_over_cpu_throughput" % mode] = _ratio(cpu and cpu.get("step_median_s"), v.get("step_median_s"))
            if v.get("first_step_cold_s") is not None:
                r["%s_warm_over_cold_first_step" % mode] = _ratio(v.get("first_step_warm_s"),
                                                                  v["first_step_cold_s"])
            if jax and mode in TPU_MODES:
                r["%s_over_jax_throughput" % mode] = _ratio(jax.get("step_median_s"), v.get("step_median_s"))
            if cpu and mode != "cpu" and v.get("final_loss") is not None:
                ref = cpu["final_loss"]
                r["%s_final_loss_rel_diff_vs_cpu" % mode] = abs(v["final_loss"] - ref) / max(abs(ref), 1e-12)
            if cpu and mode != "cpu" and v.get("losses") and cpu.get("losses"):
                r["%s_max_step_loss_rel_diff_vs_cpu" % mode] = max(
                    abs(a - b) / max(abs(b), 1e-12) for a, b in zip(v["losses"], cpu["losses"]))
        ratios[workload] = r
    return ratios


def _machine_info(plugin):
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu_model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(next(line.split()[1] for line in f if line.startswith("MemTotal"))) * 1024
    except (OSError, StopIteration, ValueError):
        pass
    commit = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    import torch
    return {
        "hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
        "cpu": cpu_model, "cpu_count": os.cpu_count(), "memory_bytes": mem, "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(), "plugin_requested": plugin or os.environ.get("TORCH_TPU_PLUGIN"),
        "git_commit": commit,
    }


def _fmt(v, scale=1.0, spec="%.1f"):
    return "—" if v is None else spec % (v * scale)


def _markdown(results):
    lines = ["| workload | mode | first step cold / warm (s) | steady step (ms) | tokens/s | peak mem (MiB) "
             "| compiles first / steady | execs/step | fallbacks | final loss |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for workload, modes in results.items():
        for mode, v in modes.items():
            if v.get("status") != "ok":
                msg = (v.get("error") or "").splitlines()[0][:90] if v.get("error") else ""
                lines.append("| %s | %s | %s: %s |  |  |  |  |  |  |  |" % (workload, mode, v.get("status"), msg))
                continue
            if mode in TPU_MODES:
                first = "%s / %s" % (_fmt(v.get("first_step_cold_s"), spec="%.2f"),
                                     _fmt(v.get("first_step_warm_s"), spec="%.2f"))
                steady = v.get("steady", {})
                compiles = "%s / %s" % ((v.get("first_step_cold") or {}).get("compiles", "—"),
                                        steady.get("programs_compiled", "—"))
                execs = _fmt(steady.get("executions_per_step"), spec="%.0f")
                fallbacks = str(v.get("fallbacks_total", "—"))
            else:
                first = _fmt(v.get("first_step_s"), spec="%.2f")
                compiles, execs, fallbacks = "—", "—", "—"
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                workload, mode, first, _fmt(v.get("step_median_s"), 1e3), _fmt(v.get("tokens_per_s"), spec="%.0f"),
                _fmt(v.get("peak_memory_bytes"), 1 / 2**20), compiles, execs, fallbacks,
                _fmt(v.get("final_loss"), spec="%.4f")))
    return "\n".join(lines)


def _phase_lines(results):
    lines = ["Phases of a step with a synchronize after each, ms (host / synchronize; median of %d steps):"
             % PHASE_STEPS]
    for workload, modes in results.items():
        for mode, v in modes.items():
            phases = v.get("phases_ms")
            if v.get("status") != "ok" or not phases:
                continue
            host = sum(p["host_ms"] for p in phases.values())
            wait = sum(p["sync_ms"] for p in phases.values())
            lines.append("  %s / %s: %s; total %.2f / %.2f" % (
                workload, mode, ", ".join("%s %.2f / %.2f" % (name, p["host_ms"], p["sync_ms"])
                                          for name, p in phases.items()), host, wait))
    return "\n".join(lines)


def _chart(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    workloads = list(results)
    modes = report["modes"]
    colours = {"cpu": "#888888", "strict": "#1f77b4", "fused": "#2ca02c", "compiled": "#d62728", "jax": "#ff7f0e",
               "cuda": "#9467bd"}
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.8))
    width = 0.8 / max(len(modes), 1)
    labelled = set()
    for panel, key, scale, label in ((ax_t, "step_median_s", 1e3, "steady step time (ms, log scale)"),
                                     (ax_m, "peak_memory_bytes", 1 / 2**20, "peak device memory (MiB, log scale)")):
        for j, mode in enumerate(modes):
            for i, workload in enumerate(workloads):
                v = results[workload].get(mode, {})
                x = i + (j - (len(modes) - 1) / 2) * width
                value = v.get(key) if v.get("status") == "ok" else None
                if value is None:
                    note = "%s: %s" % (mode, v.get("status", "") if v.get("status") != "ok" else "n/a")
                    panel.text(x, 0.02, note, rotation=90, ha="center", va="bottom", fontsize=7,
                               transform=panel.get_xaxis_transform(), color=colours.get(mode, "k"))
                    continue
                panel.bar(x, value * scale, width, color=colours.get(mode, None),
                          label=None if (panel, mode) in labelled else mode)
                labelled.add((panel, mode))
                panel.text(x, value * scale, ("%.3g" % (value * scale)), ha="center", va="bottom", fontsize=7)
        panel.set_xlim(-0.5, len(workloads) - 0.5)
        panel.set_yscale("log")
        panel.set_xticks(range(len(workloads)))
        panel.set_xticklabels(workloads)
        panel.set_ylabel(label)
        handles, labels = panel.get_legend_handles_labels()
        if handles:
            panel.legend(handles, labels, fontsize=8)
    ax_t.set_title("training step, median (loss.item() every step)")
    ax_m.set_title("peak device memory during steady steps (cpu, jax: not measured)")
    fig.suptitle("torch_tpu modes — plugin %s, %s, torch %s" % (
        report.get("plugin") or "?", report["date"][:10], report["machine"]["torch"]), fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _save(report, path, complete):
    """Writes the report (atomically); `complete` is False while modes are still to run."""
    report["complete"] = complete
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(report, f, indent=2)
    os.replace(path + ".tmp", path)


def main(argv=None):
    global CHILD_TIMEOUT_S
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--modes", nargs="+", choices=ALL_MODES, default=list(DEFAULT_MODES))
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps per workload (default: %s)" % DEFAULT_STEPS)
    parser.add_argument("--plugin", default=None, help="TORCH_TPU_PLUGIN for the subprocesses (cpu, cuda, tpu, path)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads in every subprocess (CPU eager's intra-op threads; "
                             "default: torch's own choice). XLA:CPU keeps its own thread pool.")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run each workload's modes this many times in turn; steady step = median of the "
                             "runs' medians (default 1)")
    parser.add_argument("--interleave", action="store_true",
                        help="also run the tpu modes block by block in one process and report block-wise "
                             "ratios (see above)")
    parser.add_argument("--interleave-steps", type=int, default=10,
                        help="steps per interleaved block (default 10)")
    parser.add_argument("--child-timeout", type=float, default=CHILD_TIMEOUT_S,
                        help="seconds one subprocess may run before it is recorded as an error (default %d)"
                        % CHILD_TIMEOUT_S)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "modes.json"))
    parser.add_argument("--chart", default=os.path.join(HERE, "results", "modes.png"))
    # internal: one (workload, mode) in this process
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--phase", default="full", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _interleaved_child(args) if args.phase == "interleaved" else _child(args)
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.interleave_steps < 1:
        parser.error("--interleave-steps must be at least 1")
    if args.child_timeout <= 0:
        parser.error("--child-timeout must be positive")
    CHILD_TIMEOUT_S = args.child_timeout

    started = time.perf_counter()
    report = {
        "benchmark": "bench/modes.py",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "plugin": args.plugin or os.environ.get("TORCH_TPU_PLUGIN") or "default",
        "machine": _machine_info(args.plugin),
        "modes": list(dict.fromkeys(args.modes)),
        "warmup_steps": WARMUP_STEPS,
        "threads": args.threads,
        "rounds": args.rounds,
        "timing": "median over the timed steps of: batch .to(device), zero_grad, forward, backward, "
                  "optimizer step, loss.item(); first step measured from a fresh process with an empty "
                  "(cold) and then a filled (warm) private disk compilation cache",
        "results": {},
    }
    for workload in args.workloads:
        steps = args.steps or DEFAULT_STEPS[workload]
        report["results"][workload] = {}
        for mode in report["modes"]:
            print("[%6.0fs] %s / %s (%d steps) ..." % (time.perf_counter() - started, workload, mode, steps),
                  file=sys.stderr, flush=True)
            r = _bench_one(workload, mode, steps, args.plugin, args.threads)
            report["results"][workload][mode] = r
            _save(report, args.out, complete=False)  # a run cut short keeps what finished
            if r["status"] != "ok":
                print("          %s: %s" % (r["status"], (r.get("error") or "").splitlines()[0][:200]),
                      file=sys.stderr, flush=True)
        ok = [m for m in report["modes"] if report["results"][workload][m]["status"] == "ok"]
        medians = {m: [report["results"][workload][m]["step_median_s"]] for m in ok}
        for round_index in range(2, args.rounds + 1):
            for mode in ok:
                print("[%6.0fs] %s / %s, round %d" % (time.perf_counter() - started, workload, mode, round_index),
                      file=sys.stderr, flush=True)
                medians[mode].append(_steady_round(workload, mode, steps, args.plugin, args.threads))
        if args.rounds > 1:
            for mode in ok:
                _combine_rounds(report["results"][workload][mode], medians[mode])
        together = [m for m in ok if m in TPU_MODES or m == "jax"]
        if args.interleave and len(together) > 1:
            print("[%6.0fs] %s / %s interleaved, %d blocks of %d steps each" % (
                time.perf_counter() - started, workload, "+".join(together), 2 * args.rounds,
                args.interleave_steps), file=sys.stderr, flush=True)
            with _private_cache_dir() as cache_dir:
                r = _run_child(workload, ",".join(together), "interleaved", args.interleave_steps, cache_dir,
                               args.plugin, args.threads, rounds=args.rounds)
            report.setdefault("results_interleaved", {})[workload] = r
            if r["status"] != "ok":
                print("          %s: %s" % (r["status"], (r.get("error") or "").splitlines()[0][:200]),
                      file=sys.stderr, flush=True)
            _save(report, args.out, complete=False)
    tpu_plugin = next((v["plugin"] for modes in report["results"].values() for v in modes.values()
                       if v.get("plugin")), None)
    if tpu_plugin:
        report["plugin_info"] = tpu_plugin
        report["plugin"] = tpu_plugin.get("platform", report["plugin"])
    report["ratios"] = _add_ratios(report["results"])
    report["total_wall_s"] = time.perf_counter() - started

    _save(report, args.out, complete=True)
    table = _markdown(report["results"])
    print(table)
    print()
    for workload, r in report["ratios"].items():
        shown = ", ".join("%s %.3g" % (k, v) for k, v in r.items() if v is not None and not math.isnan(v))
        print("%s: %s" % (workload, shown or "no ratios"))
    for workload, r in report.get("results_interleaved", {}).items():
        if r.get("status") == "ok":
            print("%s interleaved (%d blocks of %d steps per mode): %s; %s" % (
                workload, r["blocks_per_mode"], r["block_steps"],
                ", ".join("%s %.2f ms" % (m, v * 1e3) for m, v in r["step_median_s"].items()),
                ", ".join("%s %.3g (%.3g-%.3g)" % (k, v["median"], v["min"], v["max"])
                          for k, v in r["ratios"].items())))
    print()
    print(_phase_lines(report["results"]))
    for workload, modes in report["results"].items():
        for mode, v in modes.items():
            if v.get("fallbacks_total"):
                print("WARNING: %s / %s ran %d ops through the CPU fallback: %s" % (
                    workload, mode, v["fallbacks_total"], v.get("fallback_ops")))
            diff = report["ratios"][workload].get("%s_final_loss_rel_diff_vs_cpu" % mode)
            if diff is not None and diff > 0.05:
                print("WARNING: %s / %s final loss %.5g differs from cpu's by %.1f%%" % (
                    workload, mode, v["final_loss"], 100 * diff))
            diff = report["ratios"][workload].get("%s_max_step_loss_rel_diff_vs_cpu" % mode)
            if diff is not None and diff > 1e-3:
                print("WARNING: %s / %s: a step's loss differs from cpu's by %.3g (relative)" % (
                    workload, mode, diff))
    print("\nwrote %s" % args.out)
    if args.chart:
        try:
            _chart(report, args.chart)
            print("wrote %s" % args.chart)
        except ImportError as e:
            print("no chart (%s): pip install -r bench/requirements.txt" % e, file=sys.stderr)
    print("total %.0f s" % report["total_wall_s"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
