"""Host overhead of one eager op on a cache hit (tiny tensors), tpu strict vs
CPU eager. Writes bench/results/op_overhead.json.

    python bench/op_overhead.py [--iters N]
"""
import argparse
import json
import os
import time

import torch

import torch_tpu

OPS = {
    "add": lambda a, b: a + b,
    "mul_scalar": lambda a, b: a * 1.5,
    "add_": lambda a, b: a.add_(b),
    "relu": lambda a, b: torch.relu(a),
    "sum": lambda a, b: a.sum(),
    "mm": lambda a, b: a @ b,
    "view_add": lambda a, b: a[1:3] + b[1:3],
}


def time_op(fn, device, iters):
    a = torch.randn(4, 4, device=device)
    b = torch.randn(4, 4, device=device)
    for _ in range(20):  # warm: compile and cache
        fn(a, b)
    torch.accelerator.synchronize() if device != "cpu" else None
    start = time.perf_counter()
    for _ in range(iters):
        fn(a, b)
    dispatched = time.perf_counter() - start
    if device != "cpu":
        torch.tpu.synchronize()
    total = time.perf_counter() - start
    return dispatched / iters * 1e6, total / iters * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=2000)
    args = parser.parse_args()
    results = {"plugin": torch_tpu.plugin_info()["platform"], "iters": args.iters, "ops": {}}
    print("%-12s %14s %18s %14s" % ("op", "cpu eager us", "tpu dispatch us", "tpu total us"))
    for name, fn in OPS.items():
        cpu_us, _ = time_op(fn, "cpu", args.iters)
        compiles = torch_tpu.metrics()["compiles"]
        tpu_dispatch, tpu_total = time_op(fn, "tpu", args.iters)
        results["ops"][name] = {"cpu_eager_us": cpu_us, "tpu_strict_dispatch_us": tpu_dispatch,
                                "tpu_strict_total_us": tpu_total}
        print("%-12s %14.1f %18.1f %14.1f" % (name, cpu_us, tpu_dispatch, tpu_total))
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", "op_overhead.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print("wrote", path)


if __name__ == "__main__":
    main()
