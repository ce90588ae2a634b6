"""RNG on tpu: reproducible from the per-device generator, with the right
distributions; dropout's backward reuses the forward mask."""
import math

import pytest
import torch
from torch.testing import assert_close

import torch_tpu

N = 200_000


def test_same_seed_same_values():
    torch.tpu.manual_seed(123)
    a = torch.randn(1000, device="tpu").cpu()
    b = torch.rand(1000, device="tpu").cpu()
    torch.tpu.manual_seed(123)
    assert torch.equal(torch.randn(1000, device="tpu").cpu(), a)
    assert torch.equal(torch.rand(1000, device="tpu").cpu(), b)
    torch.tpu.manual_seed(124)
    assert not torch.equal(torch.randn(1000, device="tpu").cpu(), a)


def test_consecutive_draws_differ_and_state_round_trips():
    torch.tpu.manual_seed(0)
    state = torch.tpu.get_rng_state()
    a = torch.rand(100, device="tpu").cpu()
    b = torch.rand(100, device="tpu").cpu()
    assert not torch.equal(a, b)
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.rand(100, device="tpu").cpu(), a)


def test_explicit_generator():
    g1 = torch.Generator(device="tpu").manual_seed(5)
    g2 = torch.Generator(device="tpu").manual_seed(5)
    x = torch.empty(50, device="tpu").normal_(generator=g1).cpu()
    y = torch.empty(50, device="tpu").normal_(generator=g2).cpu()
    assert torch.equal(x, y)


def test_no_recompile_across_draws():
    torch.rand(64, device="tpu").cpu()
    before = torch_tpu.metrics()["compiles"]
    for _ in range(5):
        torch.rand(64, device="tpu")
    assert torch_tpu.metrics()["compiles"] == before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_uniform_distribution(dtype):
    x = torch.empty(N, device="tpu", dtype=dtype).uniform_(-2, 3).cpu().float()
    assert x.min() >= -2 and x.max() < 3
    assert abs(x.mean().item() - 0.5) < 0.02
    assert abs(x.var().item() - 25 / 12) < 0.05


def test_normal_distribution():
    x = torch.empty(N, device="tpu").normal_(1.5, 2.0).cpu()
    assert abs(x.mean().item() - 1.5) < 0.03
    assert abs(x.std().item() - 2.0) < 0.03
    # Tails: about 4.55% beyond two standard deviations.
    tail = ((x - 1.5).abs() > 4.0).float().mean().item()
    assert abs(tail - 0.0455) < 0.005
    torch.tpu.manual_seed(0)
    y = torch.randn(3, 4, device="tpu")
    assert y.shape == (3, 4) and torch.isfinite(y.cpu()).all()


def test_bernoulli_and_randint():
    x = torch.empty(N, device="tpu").bernoulli_(0.3).cpu()
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert abs(x.mean().item() - 0.3) < 0.01
    p = torch.tensor([0.0, 1.0, 0.5]).repeat(N // 3).to("tpu")
    b = torch.bernoulli(p).cpu()
    assert b[0::3].sum() == 0 and b[1::3].sum() == N // 3
    assert abs(b[2::3].mean().item() - 0.5) < 0.02
    r = torch.randint(3, 10, (N,), device="tpu").cpu()
    assert r.dtype == torch.int64 and r.min() == 3 and r.max() == 9
    counts = torch.bincount(r - 3, minlength=7).float() / N
    assert (counts - 1 / 7).abs().max() < 0.01


def test_dropout_scaling_keep_rate_and_backward():
    x = torch.ones(N, device="tpu", requires_grad=True)
    y = torch.nn.functional.dropout(x, p=0.25, training=True)
    y_cpu = y.detach().cpu()
    kept = y_cpu != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.01
    assert_close(y_cpu[kept], torch.full((int(kept.sum()),), 1 / 0.75))
    y.sum().backward()
    # The gradient flows exactly through the kept elements, scaled the same way.
    assert torch.equal(x.grad.cpu() != 0, kept)
    assert_close(x.grad.cpu()[kept], torch.full((int(kept.sum()),), 1 / 0.75))
    z = torch.nn.functional.dropout(x, p=0.25, training=False)
    assert torch.equal(z.detach().cpu(), x.detach().cpu())
