"""Host cost on compute-free workloads: a step whose kernels take next to no
time, so its time is what the host spends on it (dispatch, autograd, recording,
cache lookup, binding, launch, Python). On a TPU or GPU that host time is the
step; the CPU plugin hides it, since there the device shares the host's cores.

    python bench/host_overhead.py [--workloads gpt-nano decode ops]
                                  [--modes cpu cuda inductor jax strict fused compiled]
                                  [--blocks B] [--block-steps N] [--profile]
                                  [--out bench/results/host_overhead.json]
                                  [--chart bench/results/host_overhead.png]

Workloads:
- gpt-nano: a training step of torch_tpu.testing.GPT (vocab 64, d_model 16, 2
  layers, 2 heads, sequence 8, batch 1) with AdamW, the loss read every step.
- decode: a Hugging Face Llama (tiny config) decoding one token at a time with
  its KV cache, greedy, the token read every step (as generate() does), 64
  steps from a one-token prompt.
- generate: Hugging Face's generate with a static cache on the same Llama, 32 new
  tokens from an 8-token prompt per step (tokens/s in the results); on tpu
  Transformers compiles the decode step itself with backend "tpu", on the CPU
  inductor does when asked (mode inductor), cpu does not compile.
- ops: single ops on 4x4 tensors: host time per op
  in CPU eager, strict (a cache hit, launch included), fused (recorded only;
  the cut is timed apart) and jax (the op jitted alone and dispatched: one XLA
  executable launched per op by JAX's C++ fast path, what strict does with
  PyTorch's dispatch in front).

cuda (gpt-nano, decode; where torch sees a GPU) is PyTorch's own CUDA eager on
the same machine: the CUDA-grade host cost to meet on a GPU box. It runs in a
process of its own, without torch_tpu: PyTorch's autograd takes one accelerator
per process (PrivateUse1 first), so CUDA backward fails beside tpu. Its ratios
(<mode>_over_cuda) are of medians across the two processes, not block against block.

Every workload runs in one fresh process that holds all its modes (same weights,
same batches) and runs them block by block in turn (2 x --blocks blocks of
--block-steps steps, alternating order), so that ratios are taken between blocks
measured seconds apart under the same load: each ratio is the median of the
per-block ratios. jax is the whole gpt-nano step jitted as one XLA program
(bench/jax_reference.py); decode and generate have no jax reference.

Besides step time, each block records host CPU time: the CPU time of the main
thread and of the autograd device thread (where a tpu backward runs), XLA's own
threads left out. On this machine the device shares the host's two cores, so a
step's wall time also holds the device's work and XLA's idle spinning; host CPU
time is what a TPU or GPU host would spend (an executable that XLA:CPU runs
inline on the calling thread still counts, against tpu).

--profile samples each tpu mode's gpt-nano steps with py-spy (native frames)
and sorts the samples into the parts of a step (python, dispatch, autograd,
recording, cache lookup, binding, execute call, device wait), in a process of
its own per mode.
"""
import argparse
import collections
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import modes as bench_modes  # noqa: E402

WORKLOADS = ("gpt-nano", "decode", "generate", "ops")
MODES = ("cpu", "cuda", "inductor", "jax", "strict", "fused", "compiled")
REFERENCE_MODES = ("cpu", "cuda", "inductor", "jax")
TPU_MODES = ("strict", "fused", "compiled")
DECODE_TOKENS = 64
GENERATE_TOKENS = 32  # new tokens per generate call
OP_REPEATS = 100  # ops of one kind per block step: fused records them into one graph
CHILD_TIMEOUT_S = 1500


def _gpt_nano():
    from torch_tpu import testing
    return testing.GPTConfig(vocab=64, d_model=16, layers=2, heads=2, seq=8, batch=1)


# --------------------------------------------------------------------------- workloads
# Each maker returns run(n): n steps in its mode, ending with the device idle.

def _set_mode(mode):
    if mode in TPU_MODES:
        import torch_tpu
        torch_tpu.set_eager_mode("strict" if mode == "compiled" else mode)


def _device(mode):
    return "tpu" if mode in TPU_MODES else "cuda" if mode == "cuda" else "cpu"


def _sync(mode):
    if mode in TPU_MODES or mode == "cuda":
        import torch
        getattr(torch, _device(mode)).synchronize()


def _gpt_nano_runner(mode, losses):
    import torch
    from torch_tpu import testing

    cfg = _gpt_nano()
    torch.manual_seed(0)
    model = testing.GPT(cfg)
    batches = [testing.gpt_batch(cfg, seed) for seed in range(4)]
    if mode == "jax":
        info = {"config": dict(vars(cfg))}
        step = bench_modes._jax_reference().make_runner("gpt-nano", model, batches, info)
    else:
        device = _device(mode)
        _set_mode(mode)
        model = model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

        def train_step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = model(x, y)[1]
            loss.backward()
            opt.step()
            return loss

        if mode == "compiled":
            train_step = torch.compile(train_step, backend="tpu")
        elif mode == "inductor":
            train_step = torch.compile(train_step)
        index = [0]

        def step():
            x, y = batches[index[0] % len(batches)]
            index[0] += 1
            return train_step(x.to(device), y.to(device)).item()

    def run(n):
        _set_mode(mode)
        for _ in range(n):
            losses.append(step())
        _sync(mode)
    return run


def _llama(device):
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval().to(device)


def _decode_runner(mode, tokens):
    """run(n): n decode steps; a sequence restarts from its prompt every DECODE_TOKENS steps."""
    import torch
    import transformers

    device = _device(mode)
    _set_mode(mode)
    model = _llama(device)
    forward = model.forward
    if mode == "compiled":
        forward = torch.compile(forward, backend="tpu")
    elif mode == "inductor":
        forward = torch.compile(forward)
    state = {"left": 0}

    def restart():
        state["cache"] = transformers.DynamicCache(config=model.config)
        state["token"] = torch.tensor([[1]], device=device)
        state["position"] = 0
        state["left"] = DECODE_TOKENS

    @torch.no_grad()
    def step():
        if state["left"] == 0:
            restart()
        position = torch.tensor([[state["position"]]], device=device)
        out = forward(input_ids=state["token"], position_ids=position, past_key_values=state["cache"],
                      use_cache=True)
        state["token"] = out.logits[:, -1:].argmax(-1)
        tokens.append(int(state["token"]))  # generate() reads each token (stopping criteria)
        state["position"] += 1
        state["left"] -= 1

    return _stepper(mode, step)


def _generate_runner(mode, tokens):
    """run(n): n calls of Hugging Face's generate with a static cache, GENERATE_TOKENS new
    tokens from an 8-token prompt. On tpu Transformers compiles the decode step itself
    (backend "tpu", static shapes) and runs the prefill eagerly in the mode; inductor is
    the same compile of the decode step on the CPU; cpu is generate without compiling."""
    import torch
    import transformers

    if mode == "compiled":
        raise ValueError("Transformers compiles generate's decode step itself: see strict and fused")
    device = "tpu" if mode in TPU_MODES else "cpu"
    _set_mode(mode)
    model = _llama(device)
    config = transformers.GenerationConfig(max_new_tokens=GENERATE_TOKENS, min_new_tokens=GENERATE_TOKENS,
                                           do_sample=False, pad_token_id=0)
    if mode == "cpu":
        config.disable_compile = True
    elif mode == "inductor":
        config.compile_config = transformers.CompileConfig(backend="inductor", mode="default", dynamic=False)
        config.compile_config._compile_all_devices = True  # Transformers compiles on accelerators only
    prompt = (torch.arange(8) * 5 % 60 + 2).view(1, 8).to(device)

    @torch.no_grad()
    def step():
        cache = transformers.StaticCache(config=model.config, max_cache_len=GENERATE_TOKENS + 8)
        out = model.generate(prompt, generation_config=config, cache=cache)
        tokens.extend(out[0, 8:].tolist())

    return _stepper(mode, step)


def _stepper(mode, step):
    """run(n): n calls of step() in `mode`, ending with the device idle."""
    def run(n):
        _set_mode(mode)
        for _ in range(n):
            step()
        _sync(mode)
    return run


OPS = {
    "add": lambda a, b: a + b,
    "mul_scalar": lambda a, b: a * 1.5,
    "add_": lambda a, b: a.add_(b),
    "relu": lambda a, b: a.relu(),
    "sum": lambda a, b: a.sum(),
    "mm": lambda a, b: a @ b,
    "view_add": lambda a, b: a[1:3] + b[1:3],
}


# JAX's per-op dispatch of the same ops, each jitted alone: one XLA executable launched
# per op, as strict mode launches one (JAX has no in-place add: add_ is an add).
JAX_OPS = {
    "add": lambda a, b: a + b,
    "mul_scalar": lambda a, b: a * 1.5,
    "add_": lambda a, b: a + b,
    "relu": lambda a, b: _jax().nn.relu(a),
    "sum": lambda a, b: a.sum(),
    "mm": lambda a, b: a @ b,
    "view_add": lambda a, b: a[1:3] + b[1:3],
}
OP_MODES = ("cpu", "jax", "strict", "fused")


def _jax():
    import jax
    return jax


def _op_runner(mode, op, record_times):
    """run(n): n x OP_REPEATS calls of `op`. In fused mode only the recording is
    timed into record_times (the cut that runs the graph follows, untimed); in jax
    mode the dispatch of a jitted op (the last result is waited for, untimed)."""
    import torch

    if mode == "jax":
        jax = _jax()
        a = jax.numpy.asarray(torch.randn(4, 4).numpy() * 0.01)
        b = jax.numpy.asarray(torch.randn(4, 4).numpy() * 0.01)
        jitted = jax.jit(JAX_OPS[op])

        def run(n):
            for _ in range(n):
                t = time.perf_counter()
                for _ in range(OP_REPEATS):
                    out = jitted(a, b)
                record_times.append((time.perf_counter() - t) / OP_REPEATS)
                out.block_until_ready()
        return run

    device = "tpu" if mode in TPU_MODES else "cpu"
    _set_mode(mode)
    a = torch.randn(4, 4, device=device) * 0.01
    b = torch.randn(4, 4, device=device) * 0.01
    fn = OPS[op]

    def run(n):
        _set_mode(mode)
        for _ in range(n):
            t = time.perf_counter()
            for _ in range(OP_REPEATS):
                fn(a, b)
            record_times.append((time.perf_counter() - t) / OP_REPEATS)
            _sync(mode)
    return run


# --------------------------------------------------------------------------- one process per workload

def _host_clocks():
    """CPU clocks of the threads whose time is host time: the main thread, and the
    autograd device thread where a tpu backward runs (found by a hook in a tiny
    backward). XLA's threads, which do the device's work on the CPU plugin (and spin
    waiting for it, on this machine's two cores), are left out: their time is the
    device's, which an accelerator would spend, not its host. The CPU modes run
    backward on the main thread."""
    import threading
    idents = {threading.get_ident()}
    if "torch_tpu" in sys.modules:
        import torch
        x = torch.ones(2, device="tpu", requires_grad=True)
        y = x * 2
        y.register_hook(lambda grad: idents.add(threading.get_ident()))
        y.sum().backward()
    return [time.pthread_getcpuclockid(i) for i in sorted(idents)]


def _host_cpu_seconds(clocks):
    return sum(time.clock_gettime(c) for c in clocks)


def _interleave(runners, blocks, block_steps, warmup):
    """({mode: [seconds per step, per block]}, {mode: [host CPU seconds per step, per
    block]}): every mode warmed, then 2 x blocks blocks of each in alternating order."""
    for run in runners.values():
        run(warmup)
    clocks = _host_clocks()
    times, host = {mode: [] for mode in runners}, {mode: [] for mode in runners}
    order = list(runners)
    for b in range(2 * blocks):
        for mode in (order if b % 2 == 0 else order[::-1]):
            start, cpu = time.perf_counter(), _host_cpu_seconds(clocks)
            runners[mode](block_steps)
            times[mode].append((time.perf_counter() - start) / block_steps)
            host[mode].append((_host_cpu_seconds(clocks) - cpu) / block_steps)
    return times, host


def _block_ratios(times, pairs):
    """{"<a>_over_<b>": median/min/max of per-block time ratios a / b} (a's step time in units of b's)."""
    ratios = {}
    for a, b in pairs:
        if a in times and b in times:
            per_block = [x / y for x, y in zip(times[a], times[b])]
            ratios["%s_over_%s" % (a, b)] = {"median": statistics.median(per_block), "min": min(per_block),
                                             "max": max(per_block)}
    return ratios


def _metrics_delta(run, n):
    """Runs run(n) and returns the tpu metrics it added, per step."""
    import torch_tpu
    before = torch_tpu.metrics()
    run(n)
    after = torch_tpu.metrics()
    keys = ("executions", "compiles", "fused_graphs", "fused_graph_ops", "host_to_device_transfers",
            "device_to_host_transfers", "fallbacks")
    return {k + "_per_step": (after.get(k, 0) - before.get(k, 0)) / n for k in keys}


def _aten_ops_per_step(run, n):
    """ATen ops dispatched per step (a dispatch mode counts every call below autograd)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    with Count():
        run(n)
    return Count.calls / n


def _workload_child(args):
    record = {"workload": args.workload, "modes": args.modes, "blocks": 2 * args.blocks,
              "block_steps": args.block_steps}
    finish = bench_modes._finisher(record, args.child_out)
    try:
        import torch
        if args.modes != ["cuda"]:
            import torch_tpu

        torch.set_num_threads(1)  # compute-free: one intra-op thread, as the device has its own
        record["torch_threads"] = torch.get_num_threads()
        runners, outputs, errors = {}, {}, {}
        if args.workload == "ops":
            for op in OPS:
                for mode in [m for m in args.modes if m in OP_MODES]:
                    outputs[(op, mode)] = []
                    runners["%s/%s" % (op, mode)] = _op_runner(mode, op, outputs[(op, mode)])
            _interleave(runners, args.blocks, args.block_steps, warmup=3)
            per_op = {}
            for op in OPS:
                per_op[op] = {}
                for mode in [m for m in args.modes if m in OP_MODES]:
                    # the samples of the timed blocks only (the warm-up's first calls compile)
                    timed = outputs[(op, mode)][3:]
                    per_op[op][mode + "_us"] = statistics.median(timed) * 1e6
                for mode in ("strict", "fused"):
                    for base in ("cpu", "jax"):
                        if mode + "_us" in per_op[op] and base + "_us" in per_op[op]:
                            per_op[op]["%s_over_%s" % (mode, base)] = per_op[op][mode + "_us"] / per_op[op][base + "_us"]
            record["per_op"] = per_op
            return finish("ok")
        make = {"gpt-nano": _gpt_nano_runner, "decode": _decode_runner, "generate": _generate_runner}[args.workload]
        for mode in args.modes:
            if mode == "jax" and args.workload != "gpt-nano":
                errors[mode] = "no jax reference for this workload"
                continue
            if mode == "cuda" and args.workload == "generate":
                errors[mode] = "generate is measured on cpu, inductor and tpu"
                continue
            outputs[mode] = []
            try:
                runners[mode] = make(mode, outputs[mode])
                runners[mode](2)  # compiles; a mode that cannot run this workload is named, not timed
                if mode in TPU_MODES:
                    torch_tpu.wait_for_compiles()  # steady state: fused graphs compiled, not run op by op
            except Exception as e:  # noqa: BLE001 - recorded, never hidden
                runners.pop(mode, None)
                errors[mode] = "%s: %s" % (type(e).__name__, str(e)[:1000])
        warmup = DECODE_TOKENS if args.workload == "decode" else 3
        block_steps = max(1, args.block_steps // 10) if args.workload == "generate" else args.block_steps
        times, host = _interleave(runners, args.blocks, block_steps, warmup)
        record["errors"] = errors
        record["step_s"] = times
        record["step_median_ms"] = {m: statistics.median(v) * 1e3 for m, v in times.items()}
        # Host CPU time (main and autograd threads, XLA's left out): on this machine's
        # shared cores the step time also holds the device's work and its spinning.
        record["host_cpu_s"] = host
        record["host_cpu_median_ms"] = {m: statistics.median(v) * 1e3 for m, v in host.items()}
        if args.workload == "generate":
            record["tokens_per_s"] = {m: GENERATE_TOKENS / statistics.median(v) for m, v in times.items()}
        pairs = [(m, base) for m in ("strict", "fused", "compiled") for base in ("cpu", "cuda", "inductor", "jax")]
        pairs += [("fused", "strict"), ("compiled", "strict"), ("inductor", "cpu"), ("jax", "cpu"), ("cuda", "cpu")]
        record["ratios"] = _block_ratios(times, pairs)
        record["host_cpu_ratios"] = _block_ratios(host, pairs)
        # The same outputs in every mode: each mode's losses (tokens) against cpu's, step by step.
        reference = outputs.get("cpu")
        if reference:
            record["max_difference_from_cpu"] = {
                m: max(abs(a - b) for a, b in zip(v, reference)) for m, v in outputs.items() if v}
        record["per_step"] = {}
        for mode, run in runners.items():
            counts = {"aten_ops": _aten_ops_per_step(run, 4)} if mode in ("cpu", "strict", "fused") else {}
            if mode in TPU_MODES:
                counts.update(_metrics_delta(run, 8))
            if "aten_ops" in counts:
                counts["host_us_per_aten_op"] = record["step_median_ms"][mode] * 1e3 / counts["aten_ops"]
            record["per_step"][mode] = counts
        return finish("ok")
    except Exception as e:  # noqa: BLE001 - recorded, never hidden
        return finish("error", "%s: %s" % (type(e).__name__, str(e)[:2000]))


# --------------------------------------------------------------------------- where a step's host time goes

# A sample of the main thread belongs to the first part (in this order) whose
# marker one of its frames contains: a launch inside an op's kernel counts as the
# launch, a lookup inside a cut as the lookup. py-spy sees Python threads only, so
# backward, which autograd records on its device thread, shows as the main
# thread's wait in the autograd engine: counted as "backward (device thread)".
PARTS = (
    ("backward (device thread)", ("autograd::Engine::execute", "PythonEngine::execute")),
    ("device wait", ("PJRT_Event_Await", "Event::await", "BlockUntilReady", "Buffer::to_host")),
    ("compile or cache load", ("PJRT_Client_Compile", "load_or_compile", "DeserializeAndLoad")),
    ("execute call", ("PJRT_LoadedExecutable_Execute",)),
    ("cache lookup", ("executable_for", "Graph::fingerprint")),
    ("upload", ("Runtime::upload", "BufferFromHostBuffer")),
    ("pending graph (record, cut)", ("engine::defer", "PendingGraph")),
    ("op building (aten, lowering, ir)", ("tpu::aten::", "tpu::lowering::", "tpu::ir::", "tpu::engine::")),
    ("pytorch (dispatch, autograd, arguments)", ("c10::", "at::", "torch::", "THPVariable", "pybind11")),
    ("python", ()),
)


def _classify(stack):
    for name, markers in PARTS:
        if any(m in stack for m in markers):
            return name
    return "python"


def _warm_up(run):
    """First steps (compiles): a frame of their own, which the profile leaves out."""
    run(5)


def _profile_child(args):
    """Runs gpt-nano steps of one mode for ~args.seconds, for py-spy to sample."""
    import torch_tpu  # noqa: F401
    run = _gpt_nano_runner(args.mode_to_profile, [])
    _warm_up(run)
    end = time.perf_counter() + args.seconds
    steps = 0
    while time.perf_counter() < end:
        run(10)
        steps += 10
    print(steps)


def _profile(mode, seconds):
    """{part: share of the main thread's samples} of gpt-nano steps in `mode`, or an error string."""
    import shutil
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        return "py-spy is not installed (pip install py-spy)"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "stacks.txt")
        # A low rate: unwinding native stacks pauses the process for each sample.
        cmd = [spy, "record", "--native", "--threads", "--idle", "--format", "raw", "--rate", "40", "--output", out, "--",
               sys.executable, os.path.abspath(__file__), "--child-profile", mode, "--seconds", str(seconds)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        if proc.returncode != 0 or not os.path.exists(out):
            return "py-spy failed: %s" % (proc.stderr.strip()[-500:] or proc.returncode)
        parts = collections.Counter()
        with open(out) as f:
            for line in f:
                stack, _, count = line.rstrip().rpartition(" ")
                # the main thread's samples inside the timed steps only
                if "MainThread" not in stack.split(";")[0] or "_gpt_nano_runner.<locals>.run" not in stack or \
                        "_warm_up" in stack:
                    continue
                parts[_classify(stack)] += int(count)
    total = sum(parts.values())
    return {name: parts[name] / total for name, _ in PARTS if total} | {"samples": total}


# --------------------------------------------------------------------------- parent

def _run_child(argv, out):
    env = dict(os.environ)
    env["TORCH_TPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="torch_tpu_host_overhead_")
    # On a GPU box JAX, torch's CUDA and the tpu plugin share one process and one GPU:
    # JAX takes memory as it needs it instead of most of the GPU up front.
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    cmd = [sys.executable, os.path.abspath(__file__)] + argv + ["--child-out", out]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": "timed out after %d s" % CHILD_TIMEOUT_S}
    if not os.path.exists(out):
        return {"status": "error", "error": "exit %d: %s" % (proc.returncode, proc.stderr.strip()[-2000:])}
    with open(out) as f:
        return json.load(f)


def _merge_alone(result, alone_result, modes):
    """Adds the modes measured in a process of their own to `result`: their medians, and
    each shared mode's ratio to them as a ratio of medians (not block against block)."""
    if alone_result.get("status") != "ok":
        result.setdefault("errors", {}).update({m: alone_result.get("error", "failed") for m in modes})
        return
    for mode in modes:
        if mode not in alone_result["step_median_ms"]:
            result.setdefault("errors", {})[mode] = alone_result.get("errors", {}).get(mode, "not run")
            continue
        median = alone_result["step_median_ms"][mode]
        result["step_median_ms"][mode] = median
        result["step_s"][mode] = alone_result["step_s"][mode]
        if mode in alone_result.get("host_cpu_median_ms", {}) and "host_cpu_median_ms" in result:
            result["host_cpu_median_ms"][mode] = alone_result["host_cpu_median_ms"][mode]
            result["host_cpu_s"][mode] = alone_result["host_cpu_s"][mode]
        for other in TPU_MODES + ("cpu",):
            if other in result["step_median_ms"]:
                ratio = result["step_median_ms"][other] / median
                result["ratios"]["%s_over_%s" % (other, mode)] = {"median": ratio, "of": "medians, two processes"}


def _chart(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [w for w in ("gpt-nano", "decode", "generate") if report["results"].get(w, {}).get("status") == "ok"]
    ops = report["results"].get("ops", {}).get("per_op")
    fig, axes = plt.subplots(1, len(panels) + bool(ops), figsize=(5 * (len(panels) + bool(ops)), 4), squeeze=False)
    for ax, workload in zip(axes[0], panels):
        medians = report["results"][workload]["step_median_ms"]
        names = [m for m in MODES if m in medians]
        ax.bar(names, [medians[m] for m in names], color=["#888" if m in REFERENCE_MODES else "#2a6"
                                                          for m in names])
        host = report["results"][workload].get("host_cpu_median_ms", {})
        if host:
            ax.scatter([i for i, m in enumerate(names) if m in host], [host[m] for m in names if m in host],
                       marker="_", s=400, color="black", label="host CPU (main + autograd threads)")
            ax.legend(fontsize=7)
        ax.set_title("%s: time per step (ms)" % workload)
        for i, m in enumerate(names):
            ax.text(i, medians[m], "%.2f" % medians[m], ha="center", va="bottom", fontsize=8)
    if ops:
        ax = axes[0][-1]
        names = list(ops)
        shown = [m for m in OP_MODES if any(m + "_us" in ops[o] for o in names)]
        width = 0.8 / len(shown)
        for k, mode in enumerate(shown):
            values = [ops[o].get(mode + "_us", 0) for o in names]
            ax.bar([i + (k - (len(shown) - 1) / 2) * width for i in range(len(names))], values, width,
                   label=mode + (" (jit per op)" if mode == "jax" else ""))
        ax.set_xticks(range(len(names)), names, rotation=30, fontsize=8)
        ax.set_title("host time per op (us)")
        ax.legend(fontsize=8)
    fig.suptitle("torch_tpu host cost, compute-free workloads (%s)" % report["date"][:16], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--modes", nargs="+", choices=MODES,
                        help="default: all but cuda, and cuda too where torch sees a GPU")
    parser.add_argument("--blocks", type=int, default=3, help="each mode runs 2 x BLOCKS timed blocks")
    parser.add_argument("--block-steps", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="also sample where the tpu modes' host time goes")
    parser.add_argument("--seconds", type=float, default=20.0, help="--profile: seconds sampled per mode")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "host_overhead.json"))
    parser.add_argument("--chart", default=os.path.join(HERE, "results", "host_overhead.png"))
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    parser.add_argument("--child-profile", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_profile:
        args.mode_to_profile = args.child_profile
        return _profile_child(args)
    if args.child_out:
        return _workload_child(args)

    import torch
    if args.modes is None:
        args.modes = [m for m in MODES if m != "cuda" or torch.cuda.is_available()]
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": " ".join(["python bench/host_overhead.py"] + (argv if argv is not None else sys.argv[1:])),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
              "results": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for workload in args.workloads:
            child = ["--workload", workload, "--modes", *args.modes, "--blocks", str(args.blocks),
                     "--block-steps", str(args.block_steps)]
            if workload == "ops":
                child[child.index("--block-steps") + 1] = str(max(1, args.block_steps // 4))
            t = time.perf_counter()
            alone = ["cuda"] if "cuda" in args.modes and workload != "ops" else []
            shared = [m for m in args.modes if m not in alone]
            if not shared:
                shared, alone = alone, []
            child[child.index("--modes") + 1:child.index("--blocks")] = shared
            result = _run_child(child, os.path.join(tmp, workload + ".json"))
            if alone and result.get("status") == "ok":
                child[child.index("--modes") + 1:child.index("--blocks")] = alone
                _merge_alone(result, _run_child(child, os.path.join(tmp, workload + "-alone.json")), alone)
            result["seconds"] = time.perf_counter() - t
            report["results"][workload] = result
            print(_summary(workload, result), flush=True)
    if args.profile:
        report["profile"] = {m: _profile(m, args.seconds) for m in ("cpu",) + TPU_MODES if m in args.modes}
        for mode, parts in report["profile"].items():
            print("profile", mode, parts if isinstance(parts, str) else
                  ", ".join("%s %.0f%%" % (k, 100 * v) for k, v in parts.items() if k != "samples"))
    save_report(report, args.out, args.chart, _chart)
    return 0


def save_report(report, out, chart_path, chart):
    """Writes `report` as JSON to `out` and chart(report, chart_path) beside it (not without matplotlib)."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    try:
        chart(report, chart_path)
    except ImportError as e:
        print("no chart:", e)
    print("wrote", out)


def _summary(workload, result):
    if result.get("status") != "ok":
        return "%s: %s %s" % (workload, result.get("status"), result.get("error", ""))
    if workload == "ops":
        lines = ["ops (us per op):"]
        for op, v in result["per_op"].items():
            lines.append("  %-10s " % op + "  ".join("%s %.2f" % (k[:-3], x) for k, x in v.items() if k.endswith("_us")))
        return "\n".join(lines)
    medians = result["step_median_ms"]
    text = "%s (ms per step): " % workload + "  ".join("%s %.3f" % (m, medians[m]) for m in MODES if m in medians)
    text += "\n  ratios (block against block): " + "  ".join(
        "%s %.2f" % (k, v["median"]) for k, v in result["ratios"].items())
    host = result.get("host_cpu_median_ms", {})
    if host:
        text += "\n  host CPU (ms per step): " + "  ".join("%s %.3f" % (m, host[m]) for m in MODES if m in host)
        text += "\n  host CPU ratios: " + "  ".join(
            "%s %.2f" % (k, v["median"]) for k, v in result["host_cpu_ratios"].items())
    if result.get("errors"):
        text += "\n  not run: " + "; ".join("%s: %s" % kv for kv in result["errors"].items())
    return text


if __name__ == "__main__":
    sys.exit(main())
