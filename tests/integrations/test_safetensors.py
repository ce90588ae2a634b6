"""safetensors reads straight onto tpu and writes tpu tensors (the
torch_tpu.integrations.safetensors patch), in strict and fused mode."""
import subprocess
import sys

import pytest
import torch

import torch_tpu

safetensors = pytest.importorskip("safetensors")
from safetensors.torch import load_file, save_file  # noqa: E402


def _tensors():
    g = torch.Generator().manual_seed(0)
    return {"weight": torch.randn(3, 4, generator=g), "bias": torch.randn(4, generator=g).to(torch.bfloat16),
            "steps": torch.tensor([1, 2, 3]), "empty": torch.zeros(0, 2)}


@pytest.fixture(params=["strict", "fused"])
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def test_the_integration_loads_only_with_the_library():
    code = "import sys, torch, torch_tpu; print('safetensors' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False"]


@pytest.mark.parametrize("device", ["tpu", "tpu:0", torch.device("tpu"), torch.device("tpu", 0), 0], ids=str)
def test_load_file_onto_tpu(tmp_path, mode, device):
    path = str(tmp_path / "model.safetensors")
    cpu = _tensors()
    save_file(cpu, path)
    loaded = load_file(path, device=device)
    assert set(loaded) == set(cpu)
    for name, value in loaded.items():
        assert value.device == torch.device("tpu", 0), name
        torch.testing.assert_close(value.cpu(), cpu[name])


def test_save_file_of_tpu_tensors_and_safe_open(tmp_path, mode):
    path = str(tmp_path / "model.safetensors")
    cpu = _tensors()
    save_file({name: value.to("tpu") for name, value in cpu.items()}, path)
    for name, value in load_file(path).items():  # read back on the CPU: the bytes are CPU's
        torch.testing.assert_close(value, cpu[name])
    with safetensors.safe_open(path, framework="pt", device="tpu") as f:
        weight = f.get_tensor("weight")
        rows = f.get_slice("weight")[1:3]
    assert weight.device == rows.device == torch.device("tpu", 0)
    torch.testing.assert_close(weight.cpu(), cpu["weight"])
    torch.testing.assert_close(rows.cpu(), cpu["weight"][1:3])


def test_a_device_nobody_knows_is_still_refused(tmp_path):
    path = str(tmp_path / "model.safetensors")
    save_file(_tensors(), path)
    with pytest.raises(Exception, match="device bogus is invalid"):
        load_file(path, device="bogus")
