"""torch_tpu.tools.step_report: a user's script, cut into optimizer steps, on one page."""
import json
import sys

from support import run_python

TRAIN = """
import sys, torch, torch_tpu
torch_tpu.set_eager_mode(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("tpu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 8)
for i in range(100):
    loss = model(x.to("tpu")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(loss.item())
"""


def _report(tmp_path, script, *args, steps=6):
    path = tmp_path / "train.py"
    path.write_text(script)
    out = tmp_path / "report"
    code = "import sys; from torch_tpu.tools import step_report; step_report.main(sys.argv[1:])"
    result = run_python(code, "--steps", str(steps), "--out", str(out), str(path), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((tmp_path / "report.json").read_text()), (tmp_path / "report.html").read_text()


def test_each_optimizer_step_is_a_point_of_the_page(tmp_path):
    report, page = _report(tmp_path, TRAIN, "strict")
    steps = report["steps"]
    assert report["outcome"] == "stopped after 6 steps" and len(steps) == 6
    assert steps[0]["compiles"] > 0 and all(s["compiles"] == 0 for s in steps[2:])  # warm after the first steps
    assert steps[0]["host_ms"]["compile"] > 0 and steps[-1]["host_ms"]["compile"] == 0
    for s in steps[2:]:
        assert s["executions"] > 0 and 0 < s["device_busy_ms"] and s["host_ms"]["launch"] > 0
        assert s["memory_mib"] > 0 and s["peak_memory_mib"] >= s["memory_mib"] and s["fallbacks"] == {}
    assert steps[-1]["host_ms"]["upload"] > 0 and steps[-1]["host_ms"]["download"] > 0  # x.to("tpu"), loss.item()
    assert page.count("<svg") >= 4 and "Step time" in page and "Device memory" in page


def test_fused_steps_show_their_cuts(tmp_path):
    report, page = _report(tmp_path, TRAIN, "fused", steps=4)
    last = report["steps"][-1]
    assert report["mode"] == "fused" and last["fused_cuts"].get("thread_switch", 0) >= 1, last
    assert "Fused cuts" in page


def test_a_script_without_an_optimizer_is_one_step(tmp_path):
    script = "import torch, torch_tpu\nprint((torch.ones(4, device='tpu') * 3).sum().item())\n"
    report, _ = _report(tmp_path, script)
    assert report["outcome"] == "finished" and len(report["steps"]) == 1
    assert report["steps"][0]["executions"] >= 1
