"""Distributed benchmark (not a timed test): tpu_dist against gloo, and DDP steps.

    .venv/bin/python bench/distributed.py [--ranks 1 2] [--modes strict fused] [--repeats 2]
                                          [--out bench/results/distributed.json]

For each rank count and eager mode it launches torchrun, once with asynchronous
collectives (the default) and once with TORCH_TPU_DIST_BLOCKING=1, alternating
--repeats times; every rank times
- all_reduce (SUM, float32) of 1 KiB .. 16 MiB: tpu tensors (tpu_dist, staged
  through host memory over gloo) beside CPU tensors (gloo itself), median of 15
  after 3 warm-up calls, each call followed by a device synchronize; and, in the
  same loop, how long all_reduce(async_op=True) takes to return (then waited);
- a DDP training step of the reference gpt-tiny (AdamW, loss.item() every step),
  median of 20 steps after 5, each rank on its own batches.
Rank 0's figures are reported (medians over the repeats). Writes JSON and a PNG chart beside it.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = [256, 16 * 1024, 256 * 1024, 4 * 1024 * 1024]  # float32 elements: 1 KiB .. 16 MiB


def _rank_main(out_path):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torch_tpu import testing as ref

    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
    torch.tpu.set_device(device)

    def timed(fn, reps=15, warmup=3):
        times = []
        for i in range(warmup + reps):
            start = time.perf_counter()
            fn()
            torch.tpu.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - start)
        return statistics.median(times)

    allreduce = {}
    for n in SIZES:
        t_tpu = torch.ones(n, device=device)
        t_cpu = torch.ones(n)
        returned = []

        def blocking_then_async():
            dist.all_reduce(t_tpu)
            torch.tpu.synchronize()
            start = time.perf_counter()
            work = dist.all_reduce(t_tpu, async_op=True)
            returned.append(time.perf_counter() - start)
            work.wait()

        both = timed(blocking_then_async)
        allreduce[str(n * 4)] = {"tpu_dist": timed(lambda: dist.all_reduce(t_tpu)),
                                 "tpu_dist_async_return": statistics.median(returned[3:]),
                                 "tpu_dist_blocking_and_async": both,
                                 "gloo_cpu": timed(lambda: dist.all_reduce(t_cpu))}

    torch.manual_seed(0)
    model = DDP(ref.GPT(ref.GPT_TINY).to(device), device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batches = [ref.gpt_batch(ref.GPT_TINY, seed=s * world + rank) for s in range(4)]
    step_times, losses = [], []
    for step in range(25):
        x, y = (t.to(device) for t in batches[step % 4])
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)[1]
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step >= 5:
            step_times.append(time.perf_counter() - start)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"allreduce_s": allreduce, "ddp_step_median_s": statistics.median(step_times),
                       "final_loss": losses[-1]}, f)
    dist.destroy_process_group()


def _run(ranks, mode, blocking):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.json")
        env = dict(os.environ, TORCH_TPU_EAGER_MODE=mode, TORCH_TPU_DIST_BLOCKING="1" if blocking else "0")
        env.pop("TORCH_TPU_CPU_DEVICES", None)
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                               str(ranks), os.path.abspath(__file__), "--rank-output", out],
                              capture_output=True, text=True, env=env, timeout=1200)
        if proc.returncode != 0 or not os.path.exists(out):
            return {"status": "failed", "error": proc.stderr[-2000:]}
        with open(out) as f:
            return dict(json.load(f), status="ok")


def _merged(results):
    """Medians over repeated launches of one configuration."""
    ok = [r for r in results if r["status"] == "ok"]
    if not ok:
        return results[0]
    sizes = ok[0]["allreduce_s"]
    return {"status": "ok", "launches": len(ok),
            "ddp_step_median_s": statistics.median(r["ddp_step_median_s"] for r in ok),
            "final_loss": ok[0]["final_loss"],
            "allreduce_s": {s: {k: statistics.median(r["allreduce_s"][s][k] for r in ok) for k in sizes[s]}
                            for s in sizes}}


def _chart(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_a, ax_d) = plt.subplots(1, 2, figsize=(12, 4.6))
    for key, result in report["results"].items():
        if result.get("status") != "ok" or not key.startswith("2 ranks") or key.endswith("blocking"):
            continue
        sizes = sorted(result["allreduce_s"], key=int)
        for backend, style in (("tpu_dist", "-o"), ("tpu_dist_async_return", ":^"), ("gloo_cpu", "--s")):
            ax_a.plot([int(s) for s in sizes], [result["allreduce_s"][s][backend] * 1e3 for s in sizes], style,
                      label="%s, %s" % (backend, key.split(", ")[1]))
    ax_a.set_xscale("log")
    ax_a.set_yscale("log")
    ax_a.set_xlabel("all_reduce size (bytes)")
    ax_a.set_ylabel("median time (ms)")
    ax_a.set_title("all_reduce, 2 ranks: tpu tensors (host-staged) vs CPU tensors (gloo)")
    ax_a.legend(fontsize=8)
    keys = [k for k, r in report["results"].items() if r.get("status") == "ok"]
    values = [report["results"][k]["ddp_step_median_s"] * 1e3 for k in keys]
    ax_d.bar(range(len(keys)), values, color="#2ca02c")
    for i, v in enumerate(values):
        ax_d.text(i, v, "%.1f" % v, ha="center", va="bottom", fontsize=8)
    ax_d.set_xticks(range(len(keys)))
    ax_d.set_xticklabels([k.replace(", ", "\n") for k in keys], fontsize=7)
    ax_d.set_ylabel("median DDP step (ms)")
    ax_d.set_title("DDP gpt-tiny step, per rank (ranks share this machine's cores)")
    fig.suptitle("torch_tpu distributed — %s, %s" % (report["date"][:10], report["machine"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--modes", nargs="+", default=["strict", "fused"])
    parser.add_argument("--repeats", type=int, default=2, help="alternating async / blocking launches")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "distributed.json"))
    parser.add_argument("--rank-output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_output:
        return _rank_main(args.rank_output)
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": "%s, %d cores" % (platform.processor() or platform.machine(), os.cpu_count()),
              "results": {}}
    for ranks in args.ranks:
        for mode in args.modes:
            runs = {False: [], True: []}
            for _ in range(args.repeats):
                for blocking in (False, True):
                    runs[blocking].append(_run(ranks, mode, blocking))
            for blocking, results in runs.items():
                key = "%d rank%s, %s%s" % (ranks, "" if ranks == 1 else "s", mode, ", blocking" if blocking else "")
                report["results"][key] = result = _merged(results)
                if result["status"] == "ok":
                    print("%-26s DDP step %.1f ms; all_reduce ms (tpu_dist / async return / gloo cpu): %s" % (
                        key, result["ddp_step_median_s"] * 1e3, ", ".join(
                            "%s B %.2f / %.2f / %.2f" % (s, v["tpu_dist"] * 1e3, v["tpu_dist_async_return"] * 1e3,
                                                         v["gloo_cpu"] * 1e3)
                            for s, v in result["allreduce_s"].items())), flush=True)
                else:
                    print("%-26s failed: %s" % (key, result["error"][-500:]), flush=True)
            if all(r["status"] == "ok" for r in runs[False] + runs[True]):
                report.setdefault("ratios", {})["%d ranks, %s" % (ranks, mode)] = {
                    "ddp_step_async_over_blocking": [a["ddp_step_median_s"] / b["ddp_step_median_s"]
                                                     for a, b in zip(runs[False], runs[True])],
                    "all_reduce_16MiB_async_return_over_blocking": [
                        r["allreduce_s"][str(SIZES[-1] * 4)]["tpu_dist_async_return"]
                        / r["allreduce_s"][str(SIZES[-1] * 4)]["tpu_dist"] for r in runs[False]]}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print("wrote", args.out)
    chart = os.path.splitext(args.out)[0] + ".png"
    try:
        _chart(report, chart)
        print("wrote", chart)
    except ImportError as e:
        print("no chart (%s): pip install -r bench/requirements.txt" % e, file=sys.stderr)


if __name__ == "__main__":
    main()
