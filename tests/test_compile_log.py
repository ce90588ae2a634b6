"""torch_tpu.explain_compiles(): every program compiled, with the Python line that caused
it and what differs from the nearest program compiled before at that line; a line that
keeps compiling is warned about; TORCH_TPU_EXPLAIN_COMPILES=1 prints each compile."""
import warnings

import pytest
import torch

import torch_tpu
from support import run_python


@pytest.fixture(autouse=True)
def recording():
    """Recording is off by default (it keeps each line's last programs); on for these tests."""
    torch_tpu.explain_compiles(reset=True, enable=True)
    yield
    torch_tpu.explain_compiles(reset=True, enable=False)


def test_recording_is_off_unless_asked():
    torch_tpu.explain_compiles(reset=True, enable=False)
    torch.ones(3, 53, device="tpu").mul(7).cpu()
    assert torch_tpu.explain_compiles() == []


def _scale_and_sum(x):
    return (x * 3).sum()  # the line every program below is attributed to


def _records_here():
    return [r for r in torch_tpu.explain_compiles(reset=True) if "_scale_and_sum" in r["location"]]


def test_a_new_shape_or_dtype_is_named_as_the_reason():
    torch_tpu.explain_compiles(reset=True)
    with torch_tpu.eager_mode("strict"):
        _scale_and_sum(torch.ones(3, 37, device="tpu")).item()
        _scale_and_sum(torch.ones(3, 37, device="tpu")).item()  # cached: nothing compiled
        first = _records_here()
        _scale_and_sum(torch.ones(3, 41, device="tpu")).item()
        wider = _records_here()
        _scale_and_sum(torch.ones(3, 41, device="tpu", dtype=torch.bfloat16)).item()
        other_dtype = _records_here()
    assert [r["ops"].split(", ")[-1] for r in first] == ["multiply", "reduce"]
    assert first[0]["reason"] == "first program at this line" and first[0]["mode"] == "strict"
    assert all(r["nodes"] > 0 and r["seconds"] > 0 and not r["from_disk"] for r in first)
    assert [r["reason"] for r in wider] == ["parameter 0: tensor<3x41xf32> instead of tensor<3x37xf32>"] * 2
    assert other_dtype[0]["reason"] == "parameter 0: tensor<3x41xbf16> instead of tensor<3x41xf32>"


def test_fused_graphs_are_explained_too():
    torch_tpu.explain_compiles(reset=True)
    with torch_tpu.eager_mode("fused"):
        for n in (43, 47):
            _scale_and_sum(torch.ones(n, device="tpu") + 1).item()
    records = [r for r in torch_tpu.explain_compiles() if r["mode"] == "fused"]
    assert len(records) == 2
    assert records[0]["reason"] == "first program at this line"
    assert "tensor<47xf32> instead of tensor<43xf32>" in records[1]["reason"]


def test_a_line_that_keeps_compiling_is_warned_about_once():
    torch_tpu.explain_compiles(reset=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch_tpu.eager_mode("strict"):
            for n in range(101, 113):
                torch.ones(n, device="tpu").neg().cpu()
    storms = [str(w.message) for w in caught if "programs compiled at" in str(w.message)]
    assert len(storms) == 1, storms
    assert "test_compile_log.py" in storms[0] and "instead of" in storms[0]


def test_a_training_loop_compiles_nothing_after_its_first_step_and_every_compile_has_a_reason():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(13, 29), torch.nn.Tanh(), torch.nn.Linear(29, 3)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(5, 13, device="tpu"), torch.randn(5, 3, device="tpu")
    torch_tpu.explain_compiles(reset=True)
    per_step = []
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
        per_step.append(len(torch_tpu.explain_compiles(reset=True)))
    assert per_step[0] > 0 and per_step[1:] == [0, 0]


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_the_knob_prints_each_compile_and_disk_loads_are_marked(cache, tmp_path):
    code = ("import torch, torch_tpu\n"
            "torch.ones(3, device='tpu').mul(2).cpu()\n"
            "print([r['from_disk'] for r in torch_tpu.explain_compiles()])\n")
    env = dict(TORCH_TPU_EXPLAIN_COMPILES="1", TORCH_TPU_CACHE_DIR=str(tmp_path))
    if cache == "warm":
        assert run_python(code, **env).returncode == 0
    done = run_python(code, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = [line for line in done.stderr.splitlines() if line.startswith("torch_tpu: ")]
    verb = "loaded from disk" if cache == "warm" else "compiled"
    assert printed and all(verb in line and "<string>:2" in line for line in printed), printed
    assert done.stdout.strip().splitlines()[-1] == str([cache == "warm"] * len(printed))
