"""LeakSanitizer over training workloads: gpt-nano steps in strict and fused mode (and
torch.compile), run in a child interpreter with liblsan preloaded. Python and PyTorch keep
objects alive at exit by design, so each leak is attributed to the first library in its
allocation stack that is not an allocator or C runtime; what counts is torch_tpu's own
library (_C): direct leaks there are bugs. Writes reports/lsan.{json,md}.

python -m torch_tpu.tools.lsan_report [--steps 3] [--modes strict fused compiled]"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

# Modules that only pass an allocation through (allocator, C/C++ runtime).
RUNTIME = re.compile(r"^(liblsan|libasan|libstdc\+\+|libc|libm|libgcc_s|libpthread|libdl|ld-linux[-\w.]*)\.so")
OURS = re.compile(r"^_C\.cpython.*\.so$")
# One frame per line, fields split by '|': frame number, module, function, source (LSan and TSan).
FRAME_FORMAT = "    #%n|%m|%f|%S"

WORKLOAD = """
import sys, torch, torch_tpu
from torch_tpu import testing
steps, modes = int(sys.argv[1]), sys.argv[2:]
for mode in modes:
    torch_tpu.set_eager_mode("strict" if mode == "compiled" else mode)
    cfg = testing.GPTConfig(vocab=64, d_model=16, layers=2, heads=2, seq=8, batch=1)
    torch.manual_seed(0)
    model = testing.GPT(cfg).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    def step(x, y):
        loss = model(x, y)[1]
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    if mode == "compiled":
        step = torch.compile(step, backend="tpu")
    for seed in range(steps):
        x, y = testing.gpt_batch(cfg, seed)
        print(mode, step(x.to("tpu"), y.to("tpu")).item(), flush=True)
"""


def liblsan():
    out = subprocess.run(["gcc", "-print-file-name=liblsan.so"], capture_output=True, text=True)
    path = out.stdout.strip()
    return path if out.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else None


def parse_leaks(stderr):
    """[(kind, bytes, [(module, function, source), ...])] of an LSan report written with
    FRAME_FORMAT; frames innermost first."""
    leaks = []
    for line in stderr.splitlines():
        m = re.match(r"^(Direct|Indirect) leak of (\d+) byte\(s\) in \d+ object\(s\) allocated from:", line)
        if m:
            leaks.append((m.group(1), int(m.group(2)), []))
            continue
        if leaks and re.match(r"^\s+#\d+\|", line):
            parts = line.strip().split("|")
            leaks[-1][2].append((parts[1], "|".join(parts[2:-1]), parts[-1]))
    return leaks


def parse(stderr):
    """[(kind, bytes, owner module, first frames)] of an LSan report."""
    result = []
    for kind, size, frames in parse_leaks(stderr):
        own = [(os.path.basename(m), f) for m, f, _ in frames if not RUNTIME.match(os.path.basename(m))]
        result.append((kind, size, own[0][0] if own else "runtime", [f"{m}: {f[:150]}" for m, f in own[:6]]))
    return result


def run(steps, modes, timeout):
    lsan = liblsan()
    if lsan is None:
        raise SystemExit("liblsan not found (gcc -print-file-name=liblsan.so)")
    env = dict(os.environ, LD_PRELOAD=lsan, TORCH_TPU_CACHE_DIR="off",
               LSAN_OPTIONS=f"detect_leaks=1:exitcode=0:stack_trace_format='{FRAME_FORMAT}'")
    start = time.time()
    out = subprocess.run([sys.executable, "-c", WORKLOAD, str(steps), *modes], capture_output=True, text=True,
                         env=env, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit("the workload failed:\n" + out.stderr[-4000:])
    leaks = parse(out.stderr)
    by_owner = collections.defaultdict(lambda: {"Direct": [0, 0], "Indirect": [0, 0]})
    for kind, size, owner, _ in leaks:
        by_owner[owner][kind][0] += 1
        by_owner[owner][kind][1] += size
    ours = [{"kind": k, "bytes": s, "stack": frames} for k, s, owner, frames in leaks if OURS.match(owner)]
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": steps, "modes": modes,
            "seconds": round(time.time() - start, 1), "losses": out.stdout.split("\n"),
            "by_owner": {owner: {k: {"records": n, "bytes": b} for k, (n, b) in kinds.items()}
                         for owner, kinds in sorted(by_owner.items())},
            "torch_tpu_direct_leaks": [leak for leak in ours if leak["kind"] == "Direct"],
            "torch_tpu_indirect_leaks": [leak for leak in ours if leak["kind"] == "Indirect"]}


def markdown(report):
    lines = ["| library | direct records | direct bytes | indirect records | indirect bytes |", "|---|---|---|---|---|"]
    for owner, kinds in report["by_owner"].items():
        d, i = kinds["Direct"], kinds["Indirect"]
        lines.append(f"| {owner} | {d['records']} | {d['bytes']} | {i['records']} | {i['bytes']} |")
    lines += ["", f"torch_tpu (_C) direct leaks: {len(report['torch_tpu_direct_leaks'])}; indirect (reachable only "
              f"from memory others leaked): {len(report['torch_tpu_indirect_leaks'])}."]
    for leak in report["torch_tpu_direct_leaks"]:
        lines += ["", f"- direct, {leak['bytes']} bytes:"] + [f"  - {frame}" for frame in leak["stack"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["strict", "fused", "compiled"])
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--out", default="reports/lsan")
    args = parser.parse_args(argv)
    report = run(args.steps, args.modes, args.timeout)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(report))
    print(markdown(report))
    return 1 if report["torch_tpu_direct_leaks"] else 0


if __name__ == "__main__":
    sys.exit(main())
