"""Host cost counted in instructions: gpt-nano training steps or tiny-Llama decode
steps (workloads of bench/host_overhead.py) run under valgrind's callgrind, which counts the
instructions every thread executes while the timed steps run (warm-up,
compiles and imports left out), sorted by where they ran: torch_tpu, the XLA
plugin (its idle thread-pool spinning apart), PyTorch, Python, malloc.

    python bench/host_instructions.py [--workload gpt-nano|decode]
                                      [--modes cpu inductor strict fused compiled]
                                      [--steps N] [--keep-profiles DIR]
                                      [--out bench/results/host_instructions.json]
                                      [--chart bench/results/host_instructions.png]

Why: this machine's speed drifts by 30% and more from minute to minute, so two
builds' step times differ by less than their noise; an instruction count does
not drift (runs of one build agree to a fraction of a percent), which makes it
the instrument for A/B of host-cost changes. It does not see cache misses or
waits, so wall time (bench/host_overhead.py) stays the judge of the targets.
Each mode runs in a process of its own under valgrind, 20 to 50 times slower
than natively; needs valgrind (Debian: apt-get install valgrind).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import host_overhead  # noqa: E402

MODES = ("cpu", "inductor", "strict", "fused", "compiled")
# Valgrind runs no AVX-512: inductor's kernels are built for AVX2 (x86-64-v3) in a cache of
# the run's own, first by a native process (valgrind would run inductor's compiler 20-50x
# slower), so that the counted process loads them.
INDUCTOR_ENV = {"TORCHINDUCTOR_CPP_MARCH": "x86-64-v3"}
INDUCTOR_SIMDLEN = 256
# (runner maker, warm-up steps). Decode warms up past two whole sequences, so that every
# cache length's graph has been built and kept (fused) or compiled (compiled).
WORKLOADS = {
    "gpt-nano": (host_overhead._gpt_nano_runner, 5),
    "decode": (host_overhead._decode_runner, 2 * host_overhead.DECODE_TOKENS + 20),
}
CHILD_TIMEOUT_S = 1800

# Where an instruction ran, first match wins: (component, what the function's
# name must match, what its object file's path must match). XLA:CPU's worker
# threads spin for work before they sleep: that is not host work a TPU or GPU
# host would do, but on this machine it competes with the host threads for cores.
COMPONENTS = (
    ("XLA pool idle spin", r"Eigen::ThreadPoolTempl<.*>::(GlobalSteal|MaybeGetTask|LocalSteal|WaitForWork)|"
                           r"Eigen::RunQueue<.*>::(PopBack|PopFront|Empty)|EigenEnvironment::Task::operator=", None),
    ("torch_tpu", None, r"torch_tpu/_C"),
    ("XLA plugin", None, r"xla_cpu_pjrt|pjrt|libtpu"),
    ("PyTorch", None, r"libtorch|libc10|libshm"),
    ("Python", None, r"python3|libpython|\.cpython-"),
    ("malloc", r"malloc|operator new|operator delete|cfree", None),
    ("C and C++ runtime", None, r"libc\.so|libstdc\+\+|ld-linux|libm\.so|libgcc|libgomp"),
)
OTHER = "other"
SPIN = COMPONENTS[0][0]

_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*?)\s+\[(.*)\]\s*$")


def component_of(function, obj):
    for name, function_pattern, object_pattern in COMPONENTS:
        if function_pattern and re.search(function_pattern, function):
            return name
        if object_pattern and re.search(object_pattern, obj):
            return name
    return OTHER


def components(annotated):
    """{component: instructions} from callgrind_annotate's per-function (self cost) lines."""
    totals = {}
    for line in annotated.splitlines():
        match = _LINE.match(line)
        if not match or "PROGRAM TOTALS" in line:
            continue
        count, function, obj = int(match.group(1).replace(",", "")), match.group(2), match.group(3)
        name = component_of(function, obj)
        totals[name] = totals.get(name, 0) + count
    return totals


def _child(workload, mode, steps, counted=True):
    """Runs `workload` in `mode` with callgrind counting only the timed steps (`counted`;
    else the warm-up alone, natively)."""
    import torch
    torch.set_num_threads(1)  # as bench/host_overhead.py: compute-free, one intra-op thread
    if mode == "inductor":
        import torch._inductor.config
        torch._inductor.config.cpp.simdlen = INDUCTOR_SIMDLEN
    losses = []
    make_runner, warm_up = WORKLOADS[workload]
    run = make_runner(mode, losses)
    run(warm_up)
    if counted is False:  # the native process that fills inductor's cache
        return 0
    control = shutil.which("callgrind_control") or "callgrind_control"
    # callgrind_control returns once valgrind has taken the command (its threads poll for it).
    subprocess.run([control, "-i", "on", str(os.getpid())], check=True, capture_output=True)
    run(steps)
    subprocess.run([control, "-i", "off", str(os.getpid())], check=True, capture_output=True)
    print(json.dumps({"losses": losses[warm_up:]}), flush=True)
    return 0


def measure(workload, mode, steps, keep_profiles=None):
    """{instructions_per_step, components_per_step, losses} of `workload` in `mode`, or
    {error}; callgrind's own file kept in `keep_profiles` (a folder) when given."""
    valgrind = shutil.which("valgrind")
    if valgrind is None or shutil.which("callgrind_annotate") is None:
        return {"error": "valgrind is not installed (Debian: apt-get install valgrind)"}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=os.path.join(tmp, "cache"))
        child = [sys.executable, os.path.abspath(__file__), "--child", mode, "--workload", workload,
                 "--steps", str(steps)]
        if mode == "inductor":
            env.update(INDUCTOR_ENV, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
            warm = subprocess.run(child + ["--warm-only"], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                                  env=env)
            if warm.returncode != 0:
                return {"error": "warming inductor's cache: exit %d: %s" % (warm.returncode, warm.stderr.strip()[-800:])}
        cmd = [valgrind, "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out] + child
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            return {"error": "timed out after %d s" % CHILD_TIMEOUT_S}
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines or not os.path.exists(out):
            return {"error": "exit %d: %s" % (proc.returncode, proc.stderr.strip()[-800:])}
        annotated = subprocess.run(["callgrind_annotate", "--threshold=100", out], capture_output=True, text=True,
                                   check=True).stdout
        if keep_profiles:
            os.makedirs(keep_profiles, exist_ok=True)
            shutil.copy(out, os.path.join(keep_profiles, "callgrind.%s.%s" % (workload, mode)))
    parts = components(annotated)
    total = sum(parts.values())
    return {"instructions_per_step": total / steps,
            "instructions_without_idle_spin_per_step": (total - parts.get(SPIN, 0)) / steps,
            "components_per_step": {k: v / steps for k, v in sorted(parts.items(), key=lambda kv: -kv[1])},
            "losses": json.loads(lines[-1])["losses"]}


def _ratios(results):
    cpu = results.get("cpu", {})
    ratios = {}
    for mode, r in results.items():
        if mode == "cpu" or "instructions_per_step" not in r or "instructions_per_step" not in cpu:
            continue
        ratios[mode + "_over_cpu"] = r["instructions_per_step"] / cpu["instructions_per_step"]
        ratios[mode + "_over_cpu_without_idle_spin"] = (r["instructions_without_idle_spin_per_step"] /
                                                        cpu["instructions_without_idle_spin_per_step"])
    inductor, compiled = results.get("inductor", {}), results.get("compiled", {})
    if "instructions_per_step" in inductor and "instructions_per_step" in compiled:
        ratios["compiled_over_inductor_without_idle_spin"] = (compiled["instructions_without_idle_spin_per_step"] /
                                                              inductor["instructions_per_step"])
    return ratios


def _chart(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m, r in report["results"].items() if "components_per_step" in r]
    names = [name for name, _, _ in COMPONENTS] + [OTHER]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bottom = [0.0] * len(modes)
    for name in names:
        values = [report["results"][m]["components_per_step"].get(name, 0) / 1e6 for m in modes]
        if any(values):
            ax.bar(modes, values, bottom=bottom, label=name)
            bottom = [b + v for b, v in zip(bottom, values)]
    for i, total in enumerate(bottom):
        ax.text(i, total, "%.1f M" % total, ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("million instructions per step (all threads)")
    ax.set_title("%s step, instructions by where they ran (%s)" % (report["workload"], report["date"][:16]), fontsize=9)
    if modes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--workload", default="gpt-nano", choices=sorted(WORKLOADS))
    parser.add_argument("--steps", type=int, default=10, help="counted steps per mode (after the warm-up)")
    parser.add_argument("--keep-profiles", metavar="DIR", help="keep callgrind's files (callgrind.WORKLOAD.MODE) here")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "host_instructions.json"))
    parser.add_argument("--chart", default=os.path.join(HERE, "results", "host_instructions.png"))
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.workload, args.child, args.steps, counted=not args.warm_only)

    import torch
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": " ".join(["python bench/host_instructions.py"] + (argv if argv is not None else sys.argv[1:])),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
              "workload": args.workload, "steps": args.steps, "results": {}}
    for mode in args.modes:
        report["results"][mode] = result = measure(args.workload, mode, args.steps, args.keep_profiles)
        if "error" in result:
            print("%s: %s" % (mode, result["error"]), flush=True)
        else:
            print("%s: %.2f M instructions per step, %.2f M without XLA's idle spin (%s)" % (
                mode, result["instructions_per_step"] / 1e6, result["instructions_without_idle_spin_per_step"] / 1e6,
                ", ".join("%s %.2f M" % (k, v / 1e6) for k, v in result["components_per_step"].items())), flush=True)
    report["ratios"] = _ratios(report["results"])
    print("ratios:", "  ".join("%s %.2f" % kv for kv in report["ratios"].items()))
    host_overhead.save_report(report, args.out, args.chart, _chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
