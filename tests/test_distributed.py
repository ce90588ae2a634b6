"""tpu_dist, the c10d backend: collectives, DDP, FSDP2, DTensor and rank-divergent
code, with ranks launched by torchrun as a CUDA job would be (the scenarios are
in distributed_worker.py and compare every result with values computed on CPU)."""
import os
import subprocess
import sys

import pytest
import torch.distributed as dist

from support import run_python
from torch_tpu import _plugin

WORKER = os.path.join(os.path.dirname(__file__), "distributed_worker.py")
ALL = ["collectives", "asynchronous", "ddp", "fsdp2", "checkpoint", "dtensor", "attention", "divergent", "errors"]


def torchrun(ranks, scenarios, tmp_path, **env):
    environment = dict(os.environ, TORCH_TPU_TEST_DIR=str(tmp_path), **env)
    environment.pop("TORCH_TPU_CPU_DEVICES", None)  # each rank selects device LOCAL_RANK
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", str(ranks), WORKER, *scenarios],
                         capture_output=True, text=True, env=environment, timeout=600)
    errors = "\n".join(line for line in out.stderr.splitlines() if "Warning" not in line)[-6000:]
    assert out.returncode == 0, errors
    for rank in range(ranks):
        for scenario in scenarios:
            assert "rank %d %s ok" % (rank, scenario) in out.stdout, (out.stdout, errors)


@pytest.mark.parametrize("mode, scenarios", [("strict", ALL + ["compiled"]), ("fused", ALL)])
def test_two_ranks(mode, scenarios, tmp_path):
    torchrun(2, scenarios, tmp_path, TORCH_TPU_EAGER_MODE=mode)


def test_blocking_collectives_knob(tmp_path):
    # TORCH_TPU_DIST_BLOCKING=1: every collective completes in its call; the same results
    torchrun(2, ["collectives", "asynchronous"], tmp_path, TORCH_TPU_DIST_BLOCKING="1")


def test_four_ranks_with_divergent_code(tmp_path):
    # uneven all-to-all splits, a subgroup and data-dependent branches on 4 ranks
    torchrun(4, ["collectives", "divergent"], tmp_path)


def test_backend_is_registered_for_tpu():
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"
    assert dist.is_backend_available("tpu_dist")


def test_group_of_one_with_the_named_backend(tmp_path):
    # a group of one reduces on the device alone: no host staging
    code = """
import sys, torch, torch.distributed as dist, torch_tpu
dist.init_process_group("tpu_dist", init_method="file://" + sys.argv[1], rank=0, world_size=1)
t = torch.arange(4.0, device="tpu")
dist.all_reduce(t, op=dist.ReduceOp.AVG)
dist.broadcast(t, src=0)
dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
source = torch.arange(4.0, device="tpu")
out = torch.empty(4, device="tpu")
dist.reduce_scatter_tensor(out, source, op=dist._make_nccl_premul_sum(3.0))
gathered = torch.empty(4, device="tpu")
dist.all_gather_into_tensor(gathered, source)
m = torch_tpu.metrics()
print(dist.get_backend(), t.cpu().tolist(), out.cpu().tolist(), source.cpu().tolist(), gathered.cpu().tolist(),
      m["collectives"], m["collective_host_bytes"], m["collectives_device_transport"], m["collectives_host_transport"])
dist.destroy_process_group()
"""
    out = run_python(code, str(tmp_path / "store"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-2] == ("tpu_dist [0.0, 2.0, 4.0, 6.0] [0.0, 3.0, 6.0, 9.0] [0.0, 1.0, 2.0, 3.0] "
                                          "[0.0, 1.0, 2.0, 3.0] 5 0 5 0"), out.stdout


def test_transport_knob(monkeypatch):
    from torch_tpu import _distributed
    monkeypatch.delenv("TORCH_TPU_DIST_TRANSPORT", raising=False)
    assert _distributed._transport(2) == "host"
    monkeypatch.setenv("TORCH_TPU_DIST_TRANSPORT", "device")
    assert _distributed._transport(1) == "device"  # a group of one runs on its device anyway
    with pytest.raises(RuntimeError, match="holds only this process's devices"):
        _distributed._transport(2)  # XLA:CPU's client spans one process
    monkeypatch.setenv("TORCH_TPU_DIST_TRANSPORT", "nvlink")
    with pytest.raises(ValueError, match="expected 'host' or 'device'"):
        _distributed._transport(2)


def test_forcing_the_device_transport_across_processes_raises_at_group_creation(tmp_path):
    code = """
import sys, torch, torch.distributed as dist, torch_tpu
from torch.distributed import FileStore
try:
    dist.init_process_group("tpu_dist", store=FileStore(sys.argv[1], 2), rank=0, world_size=2)
except RuntimeError as e:
    print("raised:", str(e).splitlines()[0][:200])
"""
    out = run_python(code, str(tmp_path / "store"), TORCH_TPU_DIST_TRANSPORT="device", timeout=120)
    assert "raised: TORCH_TPU_DIST_TRANSPORT=device" in out.stdout, (out.stdout, out.stderr[-2000:])


def test_cpu_plugin_exposes_a_device_per_local_rank(monkeypatch):
    monkeypatch.delenv("TORCH_TPU_CPU_DEVICES", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "6")
    assert _plugin.cpu_device_count() == 6
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert 2 <= _plugin.cpu_device_count() <= 4
    monkeypatch.setenv("TORCH_TPU_CPU_DEVICES", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "6")
    assert _plugin.cpu_device_count() == 3  # an explicit count wins


def test_a_dead_peer_makes_the_collective_raise(tmp_path):
    # rank 1 exits; rank 0's all_reduce raises (gloo's connection error) instead of hanging
    torchrun(2, ["peer_exit"], tmp_path)


def test_ranks_that_disagree_raise_before_sending_under_the_detail_checker(tmp_path):
    torchrun(2, ["mismatch"], tmp_path, TORCH_DISTRIBUTED_DEBUG="DETAIL")


def test_a_rank_that_stops_calling_is_named_within_the_timeout(tmp_path):
    torchrun(2, ["peer_stops"], tmp_path)
