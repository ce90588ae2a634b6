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
Rank 0's figures are reported (medians over the repeats).

Then, in one process over its devices (--in-process-devices, default 2), each collective
of torch_tpu.distributed (the device transport: one replicated XLA program) beside the
same data movement staged through host memory (copies to CPU, the reduction there, copies
back), interleaved call against call, per size: latency (median of 15 after 3) and
bandwidth (bytes per device / latency). Writes JSON and a PNG chart beside it.
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


COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]


def _in_process_main(out_path, sizes=SIZES):
    """The in-process figures (run in a fresh interpreter with the devices asked for)."""
    import torch
    import torch_tpu.distributed as tdist

    n = torch.tpu.device_count()
    devices = [torch.device("tpu", i) for i in range(n)]

    def staged(kind, ins, outs):
        host = [t.cpu() for t in ins]
        if kind == "all_reduce":
            total = torch.stack(host).sum(0)
            parts = [total] * n
        elif kind == "all_gather":
            parts = [torch.cat(host)] * n
        elif kind == "reduce_scatter":
            parts = list(torch.stack(host).sum(0).chunk(n))
        elif kind == "all_to_all":
            parts = [torch.cat([h.chunk(n)[i] for h in host]) for i in range(n)]
        else:
            parts = [host[0]] * n
        for o, p in zip(outs, parts):
            o.copy_(p)

    def native(kind, ins, outs):
        if kind in ("all_reduce", "broadcast"):
            getattr(tdist, kind)(ins)
        else:
            getattr(tdist, kind)(outs, ins)

    def sync():
        for d in devices:
            torch.tpu.synchronize(d)

    results = {}
    for kind in COLLECTIVES:
        results[kind] = {}
        for elems in sizes:
            ins = [torch.ones(elems, device=d) for d in devices]
            out_elems = elems * n if kind == "all_gather" else elems // n if kind == "reduce_scatter" else elems
            outs = [torch.empty(out_elems, device=d) for d in devices]
            times = {"device": [], "host_staged": []}
            for i in range(18):
                for name, fn in (("device", native), ("host_staged", staged)):
                    sync()
                    start = time.perf_counter()
                    fn(kind, ins, outs)
                    sync()
                    if i >= 3:
                        times[name].append(time.perf_counter() - start)
            results[kind][str(elems * 4)] = {
                name + "_s": statistics.median(t) for name, t in times.items()}
            for name in times:
                results[kind][str(elems * 4)][name + "_GBps"] = elems * 4 / results[kind][str(elems * 4)][name + "_s"] / 1e9
    with open(out_path, "w") as f:
        json.dump({"devices": n, "collectives": results}, f)


def _run_in_process(devices, sizes=SIZES):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "in_process.json")
        env = dict(os.environ, TORCH_TPU_CPU_DEVICES=str(devices))
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--in-process-output", out,
                               "--in-process-sizes", *map(str, sizes)],
                              capture_output=True, text=True, env=env, timeout=1200)
        if proc.returncode != 0 or not os.path.exists(out):
            return {"status": "failed", "error": proc.stderr[-2000:]}
        with open(out) as f:
            return dict(json.load(f), status="ok")


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

    ranked = any(r.get("status") == "ok" for r in report["results"].values())
    in_process = report.get("in_process", {})
    panels = (2 if ranked else 0) + (in_process.get("status") == "ok")
    if not panels:
        return
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.6), squeeze=False)
    axes = list(axes[0])
    ax_a, ax_d = (axes.pop(0), axes.pop(0)) if ranked else (None, None)
    ax_i = axes.pop(0) if axes else None
    for key, result in report["results"].items() if ranked else ():
        if result.get("status") != "ok" or not key.startswith("2 ranks") or key.endswith("blocking"):
            continue
        sizes = sorted(result["allreduce_s"], key=int)
        for backend, style in (("tpu_dist", "-o"), ("tpu_dist_async_return", ":^"), ("gloo_cpu", "--s")):
            ax_a.plot([int(s) for s in sizes], [result["allreduce_s"][s][backend] * 1e3 for s in sizes], style,
                      label="%s, %s" % (backend, key.split(", ")[1]))
    if ranked:
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
    if ax_i is not None:
        for kind, style in zip(COLLECTIVES, ("o", "s", "^", "v", "d")):
            sizes = sorted(in_process["collectives"][kind], key=int)
            for transport, line in (("device", "-"), ("host_staged", ":")):
                ax_i.plot([int(s) for s in sizes], [in_process["collectives"][kind][s][transport + "_s"] * 1e3
                                                    for s in sizes], line + style, label="%s, %s" % (kind, transport))
        ax_i.set_xscale("log")
        ax_i.set_yscale("log")
        ax_i.set_xlabel("bytes per device")
        ax_i.set_ylabel("median time (ms)")
        ax_i.set_title("one process, %d devices: XLA collective vs host-staged" % in_process["devices"])
        ax_i.legend(fontsize=6)
    fig.suptitle("torch_tpu distributed — %s, %s" % (report["date"][:10], report["machine"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2], help="none: the in-process figures only")
    parser.add_argument("--modes", nargs="+", default=["strict", "fused"])
    parser.add_argument("--repeats", type=int, default=2, help="alternating async / blocking launches")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "distributed.json"))
    parser.add_argument("--in-process-devices", type=int, default=2, help="0 skips the in-process figures")
    parser.add_argument("--rank-output", help=argparse.SUPPRESS)
    parser.add_argument("--in-process-output", help=argparse.SUPPRESS)
    parser.add_argument("--in-process-sizes", type=int, nargs="+", default=SIZES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_output:
        return _rank_main(args.rank_output)
    if args.in_process_output:
        return _in_process_main(args.in_process_output, args.in_process_sizes)
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
    if args.in_process_devices:
        report["in_process"] = result = _run_in_process(args.in_process_devices)
        if result["status"] == "ok":
            for kind, sizes in result["collectives"].items():
                print("in process, %-15s ms (device / host-staged): %s" % (kind, ", ".join(
                    "%s B %.2f / %.2f" % (s, v["device_s"] * 1e3, v["host_staged_s"] * 1e3) for s, v in sizes.items())),
                    flush=True)
        else:
            print("in process: failed: %s" % result["error"][-500:], flush=True)
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
