"""torch.nn.DataParallel on tpu devices, as on CUDA ones: inputs scattered, the
module replicated, outputs gathered and gradients reduced over the devices of
this process, every copy device to device; training matches CPU."""
import copy

import pytest
import torch
from torch.testing import assert_close

import torch_tpu

pytestmark = pytest.mark.skipif(torch.tpu.device_count() < 2, reason="needs two tpu devices")


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 3))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_data_parallel_trains_as_cpu(mode):
    reference = make_model()
    model = copy.deepcopy(reference).to("tpu:0")
    parallel = torch.nn.DataParallel(model)
    assert parallel.device_ids == list(range(torch.tpu.device_count()))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    with torch_tpu.eager_mode(mode):
        for _ in range(3):
            x, y = torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)
            # Each replica normalizes its own half of the batch, as on CUDA.
            halves = [reference(part) for part in x.chunk(len(parallel.device_ids))]
            ref_loss = torch.nn.functional.mse_loss(torch.cat(halves), y)
            ref_opt.zero_grad()
            ref_loss.backward()
            ref_opt.step()

            torch_tpu.reset_metrics()
            out = parallel(x.to("tpu:0"))
            assert out.device == torch.device("tpu", 0)
            loss = torch.nn.functional.mse_loss(out, y.to("tpu:0"))
            opt.zero_grad()
            loss.backward()
            opt.step()
            torch.tpu.synchronize()
            m = torch_tpu.metrics()
            assert m["device_to_host_transfers"] == 0, m  # every copy between devices stays on them
            assert m["device_to_device_transfers"] > 0, m
            assert m["fallbacks"] == 0, m
            assert_close(loss.cpu(), ref_loss.detach(), rtol=1e-5, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5)


def test_the_comm_helpers_route_tpu_tensors_and_leave_the_rest_to_torch():
    from torch.nn.parallel import comm
    x = torch.arange(12.0).reshape(4, 3)
    parts = comm.scatter(x.to("tpu:0"), [0, 1])
    assert [p.device for p in parts] == [torch.device("tpu", 0), torch.device("tpu", 1)]
    assert_close(comm.gather(parts, 0, 1).cpu(), x)
    assert comm.gather(parts, 0, "cpu").device == torch.device("cpu")
    copies = comm.broadcast_coalesced([x.to("tpu:0")], [0, 1])
    assert copies[1][0].device == torch.device("tpu", 1)
    assert_close(comm.reduce_add([c[0] for c in copies], 1).cpu(), 2 * x)
    with pytest.raises(RuntimeError, match="destination"):
        comm.reduce_add(list(parts), 5)
    with pytest.raises(Exception):  # CPU tensors still reach torch's own (CUDA-only) helpers
        comm.scatter(x, [0, 1])
