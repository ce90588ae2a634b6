"""torch.tpu.memory's allocation history: CUDA's _record_memory_history / _snapshot
shape, read by PyTorch's own visualiser (torch.cuda._memory_viz)."""
import pickle

import pytest
import torch
import torch_tpu
from torch.cuda import _memory_viz


@pytest.fixture
def recording():
    torch.tpu.memory._record_memory_history(stacks="python")
    yield torch.tpu.memory
    torch.tpu.memory._record_memory_history(enabled=None)


def _allocate_kept():
    return torch.ones(300, device="tpu")  # 1200 bytes, from this function


def _blocks(snapshot):
    return [b for segment in snapshot["segments"] for b in segment["blocks"]]


def _from(frames, function):
    return any(f["name"] == function and f["filename"].endswith("test_memory_history.py") for f in frames)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_snapshot_names_the_python_line_of_each_live_storage(recording, mode):
    torch.tpu.synchronize()
    with torch_tpu.eager_mode(mode):
        kept = _allocate_kept()
        dropped = torch.zeros(77, device="tpu")  # 308 bytes
        del dropped
        snapshot = recording._snapshot()
    mine = [b for b in _blocks(snapshot) if _from(b["frames"], "_allocate_kept")]
    assert len(mine) == 1 and mine[0]["requested_size"] == kept.untyped_storage().nbytes() == 1200
    assert mine[0]["state"] == "active_allocated"
    assert not [b for b in _blocks(snapshot) if b["requested_size"] == 308]  # freed
    trace = snapshot["device_traces"][kept.device.index]
    events = [(e["action"], e["size"]) for e in trace if e["size"] in (1200, 308)]
    assert events == [("alloc", 1200), ("alloc", 308), ("free_completed", 308)]
    allocation = next(e for e in trace if e["action"] == "alloc" and e["size"] == 1200)
    assert allocation["addr"] == mine[0]["address"] and _from(allocation["frames"], "_allocate_kept")
    assert [e["time_us"] for e in trace] == sorted(e["time_us"] for e in trace)
    # PyTorch's own readers take it as a CUDA snapshot.
    assert "_allocate_kept" in _memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert "1200" in _memory_viz.trace(snapshot) or "1.2KiB" in _memory_viz.trace(snapshot)
    _memory_viz.segsum(snapshot)
    assert "snapshot.pickle" in _memory_viz.trace_plot(snapshot)


def test_backward_allocations_are_recorded_without_a_python_frame(recording):
    w = torch.randn(8, 8, device="tpu", requires_grad=True)
    (w * 3).sum().backward()
    snapshot = recording._snapshot()
    gradient = [b for b in _blocks(snapshot) if b["address"] == w.grad.untyped_storage().data_ptr()]
    assert len(gradient) == 1 and gradient[0]["requested_size"] == 256


def test_state_only_keeps_live_storages_and_no_trace():
    torch.tpu.memory._record_memory_history(enabled="state", stacks="python")
    try:
        kept = _allocate_kept()
        snapshot = torch.tpu.memory._snapshot()
    finally:
        torch.tpu.memory._record_memory_history(enabled=None)
    assert all(not trace for trace in snapshot["device_traces"])
    assert [b for b in _blocks(snapshot) if _from(b["frames"], "_allocate_kept")]
    del kept


def test_stopping_forgets_and_later_storages_are_not_recorded():
    torch.tpu.memory._record_memory_history(stacks="python")
    kept = _allocate_kept()
    torch.tpu.memory._record_memory_history(enabled=None)
    later = _allocate_kept()
    snapshot = torch.tpu.memory._snapshot()
    assert snapshot["segments"] == [] and all(not trace for trace in snapshot["device_traces"])
    del kept, later


def test_max_entries_keeps_the_newest(recording):
    torch.tpu.memory._record_memory_history(stacks="python", max_entries=3, clear_history=True)
    tensors = [torch.empty(n, device="tpu") for n in (11, 12, 13, 14)]
    trace = torch.tpu.memory._snapshot()["device_traces"][0]
    assert [e["size"] for e in trace] == [48, 52, 56]
    del tensors


def test_dump_snapshot_pickles_it(recording, tmp_path):
    kept = _allocate_kept()
    path = tmp_path / "snapshot.pickle"
    torch.tpu.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    assert [b for b in _blocks(loaded) if _from(b["frames"], "_allocate_kept")]
    del kept


@pytest.mark.parametrize("kwargs", [{"enabled": "everything"}, {"context": "some"}, {"stacks": "cpp"}])
def test_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        torch.tpu.memory._record_memory_history(**kwargs)


def test_import_as_torch_cuda_memory():
    import torch.tpu.memory as memory
    assert memory is torch.tpu.memory and memory.memory_allocated is torch.tpu.memory_allocated


def _allocate_four_mib():
    return torch.ones(2**20, device="tpu")


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_out_of_memory_raises_cudas_error_naming_the_largest_storages(recording, mode):
    kept = _allocate_four_mib()
    torch.tpu.synchronize()
    with torch_tpu.eager_mode(mode):
        with pytest.raises(torch.OutOfMemoryError) as raised:
            # 2**48 bytes: more than any address space holds, whatever the overcommit policy
            torch.zeros(2**46, device="tpu").sum().item()
    message = str(raised.value)
    assert "Out of memory" in message and "MiB in live buffers" in message
    assert "4194304 bytes from" in message and "_allocate_four_mib" in message
    assert kept.sum().item() == 2**20  # what the user had is intact


def test_a_fused_graph_whose_tensors_do_not_fit_is_refused_before_it_runs():
    # Launched, the graph would fail on the device and every tensor it writes would
    # be left without a value, `kept` (never materialized) among them.
    with torch_tpu.eager_mode("fused"):
        kept = torch.arange(6.0, device="tpu") * 2
        big = torch.zeros(2**46, device="tpu")  # 2**48 bytes, alive: an output of the graph
        with pytest.raises(torch.OutOfMemoryError) as raised:
            kept.sum().item()
        message = str(raised.value)
        assert "a fused graph of" in message and "zero_" in message and "Nothing was run" in message
        assert "reading a tpu tensor" in message  # the read that ran the graph
        del big
        assert kept.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        assert kept.sum().item() == 30.0
