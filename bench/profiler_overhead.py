"""What torch.profiler costs a training step on tpu: gpt-tiny (torch_tpu.testing.GPT_TINY,
AdamW, loss read every step) in strict and fused mode, timed block against block
(alternating order) with no profiler, a CPU-only profile, and a profile that also
records the device (ProfilerActivity.PrivateUse1: launches, executions, compiles, cuts,
transfers). The device part's cost is the last against the CPU-only profile; with no
profiler running the device hooks cost one atomic load each.

    python bench/profiler_overhead.py [--blocks B] [--block-steps N]
                                      [--out bench/results/profiler_overhead.json]
"""
import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import time

import torch
import torch_tpu
from torch.profiler import ProfilerActivity, profile
from torch_tpu import testing

HERE = os.path.dirname(os.path.abspath(__file__))
SETTINGS = {
    "off": None,
    "cpu_profile": [ProfilerActivity.CPU],
    "device_profile": [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
}


def _runner(mode):
    torch.manual_seed(0)
    cfg = testing.GPT_TINY
    model = testing.GPT(cfg).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [testing.gpt_batch(cfg, seed) for seed in range(4)]

    def run(n):
        with torch_tpu.eager_mode(mode):
            for i in range(n):
                x, y = batches[i % len(batches)]
                opt.zero_grad(set_to_none=True)
                loss = model(x.to("tpu"), y.to("tpu"))[1]
                loss.backward()
                opt.step()
                loss.item()
            torch.tpu.synchronize()
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--block-steps", type=int, default=10)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "profiler_overhead.json"))
    args = parser.parse_args()
    results = {}
    for mode in ("strict", "fused"):
        run = _runner(mode)
        run(5)
        torch_tpu.wait_for_compiles()
        run(2)
        times = {name: [] for name in SETTINGS}
        for block in range(2 * args.blocks):
            order = list(SETTINGS) if block % 2 == 0 else list(reversed(SETTINGS))
            for name in order:
                activities = SETTINGS[name]
                ctx = profile(activities=activities) if activities else contextlib.nullcontext()
                with ctx:
                    start = time.perf_counter()
                    run(args.block_steps)
                    times[name].append((time.perf_counter() - start) / args.block_steps * 1e3)
        ms = {name: statistics.median(t) for name, t in times.items()}
        ratios = {
            "device_profile_over_cpu_profile": statistics.median(
                d / c for d, c in zip(times["device_profile"], times["cpu_profile"])),
            "device_profile_over_off": statistics.median(
                d / o for d, o in zip(times["device_profile"], times["off"])),
            "cpu_profile_over_off": statistics.median(
                c / o for c, o in zip(times["cpu_profile"], times["off"])),
        }
        results[mode] = {"step_median_ms": ms, "ratios": ratios, "block_ms": times}
        print("%-6s ms/step %s  ratios %s" % (mode, {k: round(v, 2) for k, v in ms.items()},
                                              {k: round(v, 3) for k, v in ratios.items()}))
    record = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": "python bench/profiler_overhead.py --blocks %d --block-steps %d" % (args.blocks, args.block_steps),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__},
        "workload": "gpt-tiny training step (testing.GPT_TINY, AdamW, loss read every step)",
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
