"""Python threads training at once on one tpu device: each thread's results match CPU,
whatever the interleaving of their ops, launches and (fused mode) cuts."""
import threading

import pytest
import torch
import torch_tpu


def _train(seed, steps, errors):
    try:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(16, 16, generator=g)
        w = torch.randn(16, 16, generator=g, requires_grad=True)
        xt, wt = x.to("tpu"), w.detach().to("tpu").requires_grad_()
        for i in range(steps):
            loss = (x @ w).tanh().sum()
            loss.backward()
            loss_t = (xt @ wt).tanh().sum()
            loss_t.backward()
            with torch.no_grad():
                w -= 0.01 * w.grad
                wt -= 0.01 * wt.grad
            w.grad = wt.grad = None
            if i % 5 == 0:  # a read from this thread while the others record
                torch.testing.assert_close(loss_t.item(), loss.item(), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(wt.detach().cpu(), w.detach(), rtol=1e-4, atol=1e-4)
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append("thread %d: %r" % (seed, e))


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
def test_threads_train_side_by_side(mode):
    errors = []
    switches = torch_tpu.metrics()["fused_cuts"].get("thread_switch", 0)
    with torch_tpu.eager_mode(mode):
        threads = [threading.Thread(target=_train, args=(seed, 15, errors)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert errors == []
    if mode == "fused":  # the threads' ops did meet in one pending graph
        assert torch_tpu.metrics()["fused_cuts"].get("thread_switch", 0) > switches
