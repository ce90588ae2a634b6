"""Every way of naming the device resolves as CUDA's does, no tensor or storage
reports tpu:-1, and tpu tensors pickle and save like CUDA tensors."""
import copy
import io
import pickle

import pytest
import torch

import torch_tpu  # noqa: F401

NAMES = ["tpu", "tpu:0", torch.device("tpu"), torch.device("tpu", None), torch.device("tpu", 0)]


@pytest.mark.parametrize("name", NAMES, ids=str)
def test_every_name_of_the_device_is_tpu_0(name):
    made = [torch.ones(2, device=name), torch.ones(2).to(name), torch.empty(0, device=name),
            torch.nn.Linear(2, 2).to(name).weight, torch.tensor(1.0, device=name)]
    for t in made + [t.untyped_storage() for t in made]:
        assert t.device == torch.device("tpu", 0), t
    assert made[0].get_device() == 0 and made[0].is_tpu


def test_derived_tensors_keep_the_device():
    x = torch.ones(4, device="tpu", requires_grad=True)
    (x * 2).sum().backward()
    for t in (x.grad, x[1:], x.detach(), torch.empty_like(x), x.new_zeros(3), copy.deepcopy(x),
              copy.deepcopy(torch.nn.Linear(2, 2).to("tpu")).weight):
        assert t.device == torch.device("tpu", 0) and t.untyped_storage().device == torch.device("tpu", 0)


def test_default_device_and_device_context_manager():
    try:
        torch.set_default_device("tpu")
        assert torch.get_default_device() == torch.device("tpu", 0)
        assert torch.ones(2).device == torch.device("tpu", 0) and torch.arange(3).device == torch.device("tpu", 0)
    finally:
        torch.set_default_device(None)
    assert torch.ones(2).device == torch.device("cpu")
    with torch.device("tpu"):
        layer = torch.nn.Linear(2, 2)
        assert layer.weight.device == torch.device("tpu", 0) and torch.zeros(1).device == torch.device("tpu", 0)
    assert torch.zeros(1).device == torch.device("cpu")


def test_the_current_device_after_set_device():
    last = torch.tpu.device_count() - 1
    if last == 0:
        pytest.skip("needs two tpu devices")
    try:
        torch.tpu.set_device(last)
        assert torch.tpu.current_device() == last == torch.accelerator.current_device_index()
        for t in (torch.ones(2, device="tpu"), torch.ones(2).to("tpu"), torch.ones(2).tpu()):
            assert t.device == torch.device("tpu", last) and t.untyped_storage().device == t.device
    finally:
        torch.tpu.set_device(0)


def test_pinned_memory_and_dataloader():
    assert torch.ones(2).pin_memory().is_pinned()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(8.0)), batch_size=4,
                                         pin_memory=True)
    batches = [batch.to("tpu", non_blocking=True) for (batch,) in loader]
    assert [b.device for b in batches] == [torch.device("tpu", 0)] * 2
    torch.testing.assert_close(torch.cat(batches).cpu(), torch.arange(8.0))


def _values():
    base = torch.arange(12.0).view(3, 4)
    return {"view": base.to("tpu")[:, 1:3], "bf16": torch.arange(3, dtype=torch.bfloat16).to("tpu"),
            "int": torch.tensor([1, -2], device="tpu"), "model": torch.nn.Linear(2, 3).to("tpu")}


def _check_same(loaded, original, device="tpu:0"):
    for key, value in original.items():
        if isinstance(value, torch.nn.Module):
            for p, q in zip(loaded[key].parameters(), value.parameters()):
                assert p.device == torch.device(device)
                torch.testing.assert_close(p.cpu(), q.cpu())
            continue
        assert loaded[key].device == torch.device(device), key
        assert loaded[key].stride() == value.stride() and loaded[key].dtype == value.dtype
        torch.testing.assert_close(loaded[key].cpu(), value.cpu())


def test_pickle_round_trip():
    original = _values()
    _check_same(pickle.loads(pickle.dumps(original)), original)


@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
def test_torch_save_and_load_with_map_location(zipfile):
    original = _values()
    buffer = io.BytesIO()
    torch.save(original, buffer, _use_new_zipfile_serialization=zipfile)
    for map_location, device in ((None, "tpu:0"), ("cpu", "cpu"), ("tpu", "tpu:0")):
        buffer.seek(0)
        _check_same(torch.load(buffer, map_location=map_location, weights_only=False), original, device)


def test_wrapping_a_tpu_data_pointer_raises_instead_of_crashing():
    # torch's own storage writer wraps the data pointer with from_blob; tpu memory
    # has no host address, so that is a Python error (torch_tpu writes via the CPU).
    x = torch.arange(4.0, device="tpu")
    with pytest.raises(RuntimeError, match="storage torch_tpu did not allocate"):
        torch._C.StorageBase._write_file(x.untyped_storage(), io.BytesIO(), False, True, 4)
    torch.testing.assert_close(x.cpu(), torch.arange(4.0))  # nothing lost
