"""A page of plots of a training script's steps on tpu: what one would rather look at than read.

    python -m torch_tpu.tools.step_report [--steps 20] [--out step_report] script.py [args ...]

Runs `script.py` (as `python script.py args` would) for its first --steps optimizer steps (a
step ends at each optimizer.step() of any optimizer; a script with no optimizer is one step)
and writes OUT.html (self-contained: inline SVG) and OUT.json with, per step: wall time; the
device's busy time (union of its program executions, from launch to outputs ready) and the
host's time in compiles, launches, fused-graph cuts and transfers; programs compiled and run;
fused cuts per reason; CPU fallbacks per op; device memory at the step's end and its peak.
"""
import argparse
import collections
import html
import json
import os
import runpy
import statistics
import sys
import time

import torch
import torch_tpu
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch_tpu import _C

HOST_KINDS = ("compile", "launch", "cut", "upload", "download", "collective")


class _EnoughSteps(Exception):
    """Raised from the step hook once --steps steps are recorded: ends the script."""


def _busy_ms(intervals):
    """Total length of the union of (start_ns, end_ns) intervals, in ms."""
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total / 1e6


class StepRecorder:
    """Cuts a run into steps at each optimizer step and summarizes each one."""

    def __init__(self, max_steps):
        self.max_steps = max_steps
        self.steps = []
        self._begin()

    def _begin(self):
        self._start = time.perf_counter()
        self._metrics = torch_tpu.metrics()
        if _C._is_initialized():
            torch.tpu.reset_peak_memory_stats()
        _C._trace_start()

    def end_step(self):
        if _C._is_initialized():
            torch.tpu.synchronize()  # the step's programs have run: its device time is all in
        events = _C._trace_stop()
        wall_ms = (time.perf_counter() - self._start) * 1e3
        after = torch_tpu.metrics()
        before = self._metrics
        host_ms = collections.Counter()
        for kind, _name, _device, start, end, _args in events:
            if kind in HOST_KINDS:
                host_ms[kind] += (end - start) / 1e6
        cuts = {reason: n - before["fused_cuts"].get(reason, 0) for reason, n in after["fused_cuts"].items()}
        fallbacks = {op: n - before["fallback_ops"].get(op, 0) for op, n in after.get("fallback_ops", {}).items()}
        self.steps.append({
            "step": len(self.steps) + 1,
            "wall_ms": wall_ms,
            "device_busy_ms": _busy_ms([(s, e) for k, _, _, s, e, _ in events if k == "execution"]),
            "host_ms": {kind: host_ms[kind] for kind in HOST_KINDS},
            "compiles": after["compiles"] - before["compiles"] + after["disk_cache_hits"] - before["disk_cache_hits"],
            "executions": after["executions"] - before["executions"],
            "fused_cuts": {r: n for r, n in cuts.items() if n},
            "fallbacks": {op: n for op, n in fallbacks.items() if n},
            "memory_mib": after.get("memory_allocated", 0) / 2**20,
            "peak_memory_mib": after.get("max_memory_allocated", 0) / 2**20,
        })
        if len(self.steps) >= self.max_steps:
            raise _EnoughSteps()
        self._begin()


def record(script, script_args, steps):
    """Runs `script` with `script_args` for `steps` optimizer steps; returns (steps, outcome)."""
    recorder = StepRecorder(steps)
    handle = register_optimizer_step_post_hook(lambda *_: recorder.end_step())
    saved_argv = sys.argv
    sys.argv = [script] + list(script_args)
    outcome = "finished"
    try:
        runpy.run_path(script, run_name="__main__")
    except _EnoughSteps:
        outcome = "stopped after %d steps" % steps
    except SystemExit as e:
        outcome = "exited (%s)" % e.code
    finally:
        sys.argv = saved_argv
        handle.remove()
    if outcome.startswith("stopped"):
        pass  # the last step's events were taken when it ended
    elif not recorder.steps:
        try:
            recorder.end_step()  # no optimizer: the whole script is the step
        except _EnoughSteps:
            pass
    else:
        _C._trace_stop()  # what ran after the last optimizer step is not a step
    return recorder.steps, outcome


# --------------------------------------------------------------------------- the page

def _chart(title, series, unit, width=640, height=180):
    """An inline SVG line chart of {label: [value per step]}."""
    colors = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
    n = max((len(v) for v in series.values()), default=0)
    top = max((max(v) for v in series.values() if v), default=0) or 1
    left, bottom = 48, 24

    def x(i):
        return left + (width - left - 10) * (i / max(n - 1, 1))

    def y(v):
        return height - bottom - (height - bottom - 10) * v / top

    parts = ['<svg width="%d" height="%d" font-family="sans-serif" font-size="11">' % (width, height + 18)]
    parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>' % (left, y(0), width - 10, y(0)))
    parts.append('<text x="2" y="%d">%.3g</text><text x="2" y="%d">0</text>' % (y(top) + 4, top, y(0)))
    parts.append('<text x="%d" y="%d">step 1</text><text x="%d" y="%d">%d</text>'
                 % (left, height - 6, width - 30, height - 6, n))
    for k, (label, values) in enumerate(series.items()):
        color = colors[k % len(colors)]
        points = " ".join("%.1f,%.1f" % (x(i), y(v)) for i, v in enumerate(values))
        parts.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (color, points))
        parts.append('<text x="%d" y="%d" fill="%s">%s</text>' % (left + 110 * k, height + 14, color, html.escape(label)))
    parts.append("</svg>")
    return "<h3>%s (%s)</h3>%s" % (html.escape(title), unit, "".join(parts))


def write_page(steps, outcome, script, out):
    def col(key, sub=None):
        return [s[key][sub] if sub else s[key] for s in steps]

    cuts = sorted({r for s in steps for r in s["fused_cuts"]})
    fallback_ops = collections.Counter()
    for s in steps:
        fallback_ops.update(s["fallbacks"])
    charts = [
        _chart("Step time", {"wall": col("wall_ms"), "device busy": col("device_busy_ms")}, "ms"),
        _chart("Host time by phase", {k: col("host_ms", k) for k in HOST_KINDS if any(col("host_ms", k))}, "ms"),
        _chart("Programs", {"compiled": col("compiles"), "run": col("executions")}, "per step"),
        _chart("Device memory", {"at step end": col("memory_mib"), "peak": col("peak_memory_mib")}, "MiB"),
    ]
    if cuts:
        charts.append(_chart("Fused cuts", {r: [s["fused_cuts"].get(r, 0) for s in steps] for r in cuts}, "per step"))
    if fallback_ops:
        charts.append(_chart("CPU fallbacks", {"ops": [sum(s["fallbacks"].values()) for s in steps]}, "per step"))
    steady = steps[len(steps) // 2:] or steps
    summary = [
        "script: %s (%s)" % (script, outcome),
        "mode: %s; %d steps" % (torch_tpu.get_eager_mode(), len(steps)),
        "first step %.1f ms, %d programs compiled" % (steps[0]["wall_ms"], steps[0]["compiles"]) if steps else "",
        "later half: median step %.2f ms, device busy %.2f ms, %d compiles" % (
            statistics.median_high(s["wall_ms"] for s in steady),
            statistics.median_high(s["device_busy_ms"] for s in steady),
            sum(s["compiles"] for s in steady)) if steps else "no step recorded",
        "CPU fallbacks: " + (", ".join("%s x%d" % kv for kv in fallback_ops.most_common()) or "none"),
    ]
    page = ["<!doctype html><meta charset=utf-8><title>torch_tpu step report</title>",
            "<h2>torch_tpu step report</h2>", "<ul>"]
    page += ["<li>%s</li>" % html.escape(line) for line in summary if line]
    page += ["</ul>"] + charts
    with open(out + ".html", "w") as f:
        f.write("\n".join(page))
    with open(out + ".json", "w") as f:
        json.dump({"script": script, "outcome": outcome, "mode": torch_tpu.get_eager_mode(), "steps": steps}, f,
                  indent=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps to record")
    parser.add_argument("--out", default="step_report", help="writes OUT.html and OUT.json")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    script = os.path.abspath(args.script)
    sys.path.insert(0, os.path.dirname(script))
    steps, outcome = record(script, args.args, args.steps)
    write_page(steps, outcome, args.script, args.out)
    print("wrote %s.html and %s.json (%d steps, %s)" % (args.out, args.out, len(steps), outcome))


if __name__ == "__main__":
    main()
