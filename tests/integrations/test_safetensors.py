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


_LOAD_MEMORY = r"""
import json, sys, threading, time
import torch, torch_tpu
from transformers import AutoModelForCausalLM

def anon_kib():  # anonymous resident memory: tensors and (XLA:CPU) device buffers, not mapped files
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))

path, device_map = sys.argv[1], sys.argv[2]
torch.ones(1, device="tpu").cpu()  # the runtime is up before the baseline
peak, done = [0], threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], anon_kib())
        time.sleep(0.001)
base = anon_kib()
sampler = threading.Thread(target=sample)
sampler.start()
model = AutoModelForCausalLM.from_pretrained(path, device_map=device_map)
torch.tpu.synchronize()
done.set()
sampler.join()
print(json.dumps({"peak_growth": (max(peak[0], anon_kib()) - base) * 1024,
                  "weights": sum(p.numel() * p.element_size() for p in model.parameters()),
                  "devices": sorted({p.device.type for p in model.parameters()})}))
"""


def test_from_pretrained_device_map_tpu_makes_no_full_cpu_copy(tmp_path):
    # A checkpoint's shards go from the file (mapped, not copied) to device buffers, tensor by
    # tensor. On XLA:CPU device buffers are host memory too, so the peak anonymous memory of a
    # tpu load is the weights once plus what a CPU load costs Transformers; a full CPU copy of
    # the model on the way would add the weights a second time.
    import json
    from transformers import AutoModelForCausalLM, LlamaConfig

    from support import run_python

    config = LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)  # about 30 MiB of float32 weights
    runs = {}
    for device_map in ("cpu", "tpu"):
        out = run_python(_LOAD_MEMORY, str(tmp_path), device_map)
        assert out.returncode == 0, out.stderr[-3000:]
        runs[device_map] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["tpu"]["devices"] == ["tpu"] and runs["cpu"]["devices"] == ["cpu"]
    weights = runs["tpu"]["weights"]
    extra = runs["tpu"]["peak_growth"] - runs["cpu"]["peak_growth"]  # beyond a CPU load's own
    assert extra < 1.5 * weights, (runs, extra / weights)
    assert extra > 0.5 * weights, (runs, extra / weights)  # the device buffers are counted: the probe sees memory
