"""torch.profiler with ProfilerActivity.PrivateUse1: the device's programs (launch on
the host, execution on the device), compiles, fused-graph cuts with their reasons,
transfers and collectives appear in the trace beside the ATen ops, in order."""
import json

import pytest
import torch
import torch_tpu
from support import run_python
from torch.profiler import ProfilerActivity, profile

pytestmark = pytest.mark.skipif(not torch_tpu._C._device_profiler,
                                reason="this torch has no Kineto PrivateUse1 profiler registry")

BOTH = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _trace(prof, tmp_path):
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    return sorted(events, key=lambda e: e["ts"])


def _ours(events):
    return [e for e in events if e["cat"] in ("kernel", "privateuse1_runtime")]


def _train_step(model, opt, x):
    loss = model(x.to("tpu")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


def _model():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to("tpu")
    return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.randn(16, 8)


def test_strict_step_shows_each_launch_and_its_execution(tmp_path):
    model, opt, x = _model()
    with torch_tpu.eager_mode("strict"):
        _train_step(model, opt, x)  # compiles outside the trace
        with profile(activities=BOTH) as prof:
            _train_step(model, opt, x)
    everything = _trace(prof, tmp_path)
    events = _ours(everything)
    launches = [e for e in events if e["name"].startswith("launch ")]
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert [e["name"] for e in kernels] == [e["name"][len("launch "):] for e in launches]
    assert "addmm" in [e["name"] for e in kernels]
    for launch, kernel in zip(launches, kernels):
        # the execution is timed from its launch (XLA:CPU may finish it inside the launch call)
        assert kernel["ts"] == launch["ts"] and kernel["dur"] > 0 and launch["dur"] > 0
        assert kernel["args"]["device"] == "tpu:0" and kernel["pid"] != launch["pid"]
    kinds = [e["args"]["kind"] for e in events]
    assert kinds[0] == "upload" and kinds[-1] == "download"  # x.to("tpu") first, loss.item() last
    assert int(events[0]["args"]["bytes"]) == 16 * 8 * 4
    # the ATen ops are in the same trace, on the host
    assert any(e["cat"] == "cpu_op" and e["name"] == "aten::addmm" for e in everything)


def test_a_compile_inside_the_trace_is_named_with_its_op(tmp_path):
    a = torch.randn(5, 7, device="tpu")
    with profile(activities=BOTH) as prof:
        (a * 1.5).atan2(a + 3.25).cpu()  # shapes no other test uses: compiled now
    events = _ours(_trace(prof, tmp_path))
    compiles = [e for e in events if e["args"]["kind"] == "compile"]
    # "load": found in a disk cache (TORCH_TPU_CACHE_DIR) that an earlier run filled
    named = [e for e in compiles if e["name"] in ("compile atan2", "load atan2")]
    assert named and int(named[0]["args"]["nodes"]) > 0, compiles
    first_atan2 = next(i for i, e in enumerate(events) if e["name"] == "launch atan2")
    assert events.index(named[0]) < first_atan2


def test_fused_step_shows_cuts_with_their_reasons(tmp_path):
    model, opt, x = _model()
    with torch_tpu.eager_mode("fused"):
        _train_step(model, opt, x)
        torch_tpu.wait_for_compiles()
        with profile(activities=BOTH) as prof:
            _train_step(model, opt, x)
    events = _ours(_trace(prof, tmp_path))
    cuts = [e for e in events if e["args"]["kind"] == "cut"]
    # forward ends when backward records on autograd's thread; the optimizer's
    # ops run on the step's thread again; the loss is read after the step
    assert [c["name"] for c in cuts][:2] == ["cut: thread_switch", "cut: thread_switch"], cuts
    assert all(int(c["args"]["ops"]) > 0 and c["args"]["last_op"] for c in cuts)
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert len(kernels) == len(cuts) and {k["name"] for k in kernels} == {"fused graph"}
    for cut, kernel in zip(cuts, kernels):  # each cut launches its graph
        assert cut["ts"] <= kernel["ts"] <= cut["ts"] + cut["dur"]


def test_compiled_graph_is_one_execution(tmp_path):
    model = torch.nn.Linear(8, 4).to("tpu")
    f = torch.compile(lambda x: model(x).relu().sum(), backend="tpu")
    x = torch.randn(16, 8, device="tpu")
    f(x)
    with profile(activities=BOTH) as prof:
        f(x).item()
    names = [e["name"] for e in _ours(_trace(prof, tmp_path))]
    assert names.count("compiled graph") == 1 and "launch compiled graph" in names, names


def test_cpu_only_profile_records_nothing_of_the_device(tmp_path):
    a = torch.randn(4, device="tpu")
    with profile(activities=BOTH):  # Kineto's state after a device profile
        (a - 1).cpu()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (a + 1).cpu()
    events = _trace(prof, tmp_path)
    assert any(e["name"] == "aten::add" for e in events)
    assert _ours(events) == []
    # and a later device profile holds only its own events
    with profile(activities=BOTH) as prof:
        (a * 2).cpu()
    names = [e["name"] for e in _ours(_trace(prof, tmp_path / "second"))]
    assert "launch mul" in names and "launch add" not in names


def test_collectives_appear_with_their_size(tmp_path):
    code = """
import json, sys, torch, torch.distributed as dist, torch_tpu
from torch.profiler import ProfilerActivity, profile
dist.init_process_group("tpu_dist", init_method="file://" + sys.argv[1], rank=0, world_size=1)
t = torch.arange(6.0, device="tpu")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
prof.export_chrome_trace(sys.argv[1] + ".json")
events = json.load(open(sys.argv[1] + ".json"))["traceEvents"]
print([(e["name"], e["args"]["bytes"]) for e in events if e.get("args", {}).get("kind") == "collective"])
dist.destroy_process_group()
"""
    out = run_python(code, str(tmp_path / "store"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().split("\n")[-1] == "[('allreduce', '24'), ('broadcast', '24')]", out.stdout
