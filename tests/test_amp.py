"""Automatic mixed precision: torch.autocast("tpu") with CUDA's cast policies, and
torch.amp.GradScaler's kernels on the device."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_tpu

BF16 = torch.bfloat16


@pytest.fixture(params=["strict", "fused"])
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def _inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


# (name, function, input shapes, the dtype autocast gives, how the CPU reference casts the inputs)
CASES = [
    ("mm", lambda a, b: a @ b, [(4, 8), (8, 3)], BF16, BF16),
    ("linear", lambda x, w, b: F.linear(x, w, b), [(4, 8), (3, 8), (3,)], BF16, BF16),
    ("bmm", torch.bmm, [(2, 4, 8), (2, 8, 3)], BF16, BF16),
    ("addmm", torch.addmm, [(4, 3), (4, 8), (8, 3)], BF16, BF16),
    ("conv2d", lambda x, w: F.conv2d(x, w, padding=1), [(1, 2, 5, 5), (3, 2, 3, 3)], BF16, BF16),
    ("softmax", lambda x: torch.softmax(x, -1), [(4, 8)], torch.float32, torch.float32),
    ("layer_norm", lambda x: F.layer_norm(x, (8,)), [(4, 8)], torch.float32, torch.float32),
    ("exp", torch.exp, [(4, 8)], torch.float32, torch.float32),
    ("sum", torch.sum, [(4, 8)], torch.float32, torch.float32),
    ("mse_loss", F.mse_loss, [(4, 8), (4, 8)], torch.float32, torch.float32),
    ("add", torch.add, [(4, 8), (4, 8)], torch.float32, torch.float32),  # on no list: untouched
]


@pytest.mark.parametrize("name, fn, shapes, dtype, reference_dtype", CASES, ids=[c[0] for c in CASES])
def test_autocast_casts_as_cuda_does(mode, name, fn, shapes, dtype, reference_dtype):
    inputs = _inputs(*shapes)
    with torch.autocast("tpu", dtype=BF16):
        out = fn(*[t.to("tpu") for t in inputs])
    assert out.dtype == dtype
    expected = fn(*[t.to(reference_dtype) for t in inputs])
    assert_close(out.cpu(), expected, rtol=1.6e-2 if dtype == BF16 else 1.3e-6, atol=1e-2 if dtype == BF16 else 1e-5)


def test_autocast_promotes_mixed_inputs_and_passes_low_precision_through(mode):
    a, b, c = (t.to("tpu") for t in _inputs((4, 8), (8, 8), (4, 8)))
    with torch.autocast("tpu", dtype=BF16):
        low = a @ b                              # bf16
        assert torch.relu(low).dtype == BF16     # no list: stays as it came
        promoted = torch.addcmul(c, low, c)      # promote: the widest input type
        assert promoted.dtype == torch.float32
        with torch.autocast("tpu", enabled=False):
            assert (a @ b).dtype == torch.float32
    assert (a @ b).dtype == torch.float32


def test_autocast_float16(mode):
    a, b = (t.to("tpu") for t in _inputs((4, 8), (8, 3)))
    with torch.autocast("tpu", dtype=torch.float16):
        out = a @ b
    assert out.dtype == torch.float16
    assert_close(out.cpu(), a.cpu().half() @ b.cpu().half(), rtol=1e-3, atol=1e-3)


def test_binary_cross_entropy_is_refused_under_autocast_with_the_safe_alternative(mode):
    p = torch.rand(4, device="tpu")
    target = torch.rand(4, device="tpu")
    with torch.autocast("tpu", dtype=BF16):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, target)
        loss = F.binary_cross_entropy_with_logits(p, target)
    assert loss.dtype == torch.float32
    assert_close(loss.cpu(), F.binary_cross_entropy_with_logits(p.cpu(), target.cpu()))


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def test_training_step_under_autocast_matches_cpu_with_the_same_casts(mode):
    # Forward and backward in bf16 where autocast says so; parameters and their
    # gradients stay float32. CPU autocast casts linear to bf16 too.
    x, = _inputs((8, 16), seed=1)
    y = torch.randint(0, 4, (8,), generator=torch.Generator().manual_seed(2))
    cpu_model, tpu_model = _mlp(), _mlp().to("tpu")
    with torch.autocast("cpu", dtype=BF16):
        cpu_loss = F.cross_entropy(cpu_model(x), y)
    cpu_loss.backward()
    with torch.autocast("tpu", dtype=BF16):
        tpu_logits = tpu_model(x.to("tpu"))
        tpu_loss = F.cross_entropy(tpu_logits, y.to("tpu"))
    assert tpu_logits.dtype == BF16 and tpu_loss.dtype == torch.float32
    tpu_loss.backward()
    assert_close(tpu_loss.cpu(), cpu_loss, rtol=2e-2, atol=2e-2)
    for p_cpu, p_tpu in zip(cpu_model.parameters(), tpu_model.parameters()):
        assert p_tpu.grad.dtype == torch.float32
        assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=5e-2, atol=2e-2)


def test_unscale_and_inf_check_match_cpu(mode):
    grads = [torch.tensor([1.0, -2.0, 3.0]), torch.tensor([[4.0, float("inf")], [1.0, 2.0]]).half(),
             torch.tensor(5.0), torch.tensor([float("nan"), 1.0]).bfloat16(), torch.zeros(0)]
    for bad in (True, False):
        cpu = [g.clone() if bad else torch.nan_to_num(g.clone(), nan=0.0, posinf=1.0) for g in grads]
        tpu = [g.to("tpu") for g in cpu]
        found_cpu, found_tpu = torch.zeros(()), torch.zeros((), device="tpu")
        inv = torch.tensor(0.25)
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_cpu, inv)
        torch._amp_foreach_non_finite_check_and_unscale_(tpu, found_tpu, inv.to("tpu"))
        assert found_tpu.item() == found_cpu.item() == (1.0 if bad else 0.0)
        for a, b in zip(tpu, cpu):
            assert a.dtype == b.dtype
            assert_close(a.cpu(), b, equal_nan=True)
    # found_inf is only ever raised: a clean list leaves an earlier 1 as it was.
    found = torch.ones((), device="tpu")
    torch._amp_foreach_non_finite_check_and_unscale_([torch.ones(2, device="tpu")], found,
                                                     torch.ones((), device="tpu"))
    assert found.item() == 1.0


def test_update_scale_matches_cpu(mode):
    scale_cpu, tracker_cpu = torch.tensor(65536.0), torch.tensor(0, dtype=torch.int32)
    scale_tpu, tracker_tpu = scale_cpu.to("tpu"), tracker_cpu.to("tpu")
    before = torch_tpu.metrics()["compiles"]
    for step, found in enumerate([0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0]):
        interval = 3 if step < 6 else 2  # a runtime scalar: no new program
        inf = torch.tensor(float(found))
        torch._amp_update_scale_(scale_cpu, tracker_cpu, inf, 2.0, 0.5, interval)
        torch._amp_update_scale_(scale_tpu, tracker_tpu, inf.to("tpu"), 2.0, 0.5, interval)
        assert (scale_tpu.item(), tracker_tpu.item()) == (scale_cpu.item(), tracker_cpu.item()), step
    assert torch_tpu.metrics()["compiles"] - before <= 1
    # Growth that would overflow float32 keeps the scale (and restarts the count).
    big = torch.tensor(3e38, device="tpu")
    tracker = torch.tensor(0, dtype=torch.int32, device="tpu")
    torch._amp_update_scale_(big, tracker, torch.zeros((), device="tpu"), 2.0, 0.5, 1)
    assert big.item() == pytest.approx(3e38) and tracker.item() == 0


def test_update_scale_rejects_wrong_dtypes_clearly():
    scale = torch.tensor(1.0, device="tpu")
    with pytest.raises(RuntimeError, match="growth_tracker must have dtype Int, got Float"):
        torch._amp_update_scale_(scale, torch.tensor(0.0, device="tpu"), torch.zeros((), device="tpu"), 2.0, 0.5, 1)
    with pytest.raises(RuntimeError, match="inv_scale must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_([scale], torch.zeros((), device="tpu"),
                                                         torch.ones(2, device="tpu"))


def test_grad_scaler_float16_training_runs_on_the_device(mode):
    # GradScaler's unscale/inf check and scale update are tpu programs, not CPU
    # fallbacks. A step with an inf gradient is skipped and halves the scale.
    if torch_tpu.plugin_info()["platform"] == "tpu":
        pytest.skip("GradScaler computes its inverse scale in float64, which TPUs lack")
    model = _mlp().to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("tpu", init_scale=1024.0)
    x, = _inputs((8, 16), seed=1)
    x = x.to("tpu")
    y = torch.randint(0, 4, (8,), generator=torch.Generator().manual_seed(2)).to("tpu")
    fallbacks = torch_tpu.metrics()["fallbacks"]
    losses = []
    for step in range(4):
        opt.zero_grad()
        with torch.autocast("tpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if step == 2:
            model[0].weight.grad[0, 0] = float("inf")
            before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        if step == 2:
            for p, old in zip(model.parameters(), before):
                assert torch.equal(p.detach().cpu(), old)
            assert scaler.get_scale() == 512.0
        losses.append(loss.item())
    assert torch_tpu.metrics()["fallbacks"] == fallbacks
    assert losses[-1] < losses[0]
