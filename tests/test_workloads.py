"""Reference workloads train natively on tpu (TORCH_TPU_FALLBACK=error) with
losses matching CPU within float32 tolerance."""
import copy

import torch
from torch.testing import assert_close

import torch_tpu
from torch_tpu import testing as ref

STEPS = 20


def run(model, device, make_batch, make_opt, steps=STEPS, loss_fn=None):
    model = model.to(device)
    opt = make_opt(model.parameters())
    losses = []
    for step in range(steps):
        inputs, targets = (t.to(device) for t in make_batch(step))
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, inputs, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def compare(model, make_batch, make_opt, loss_fn, rtol=2e-4, atol=2e-5):
    cpu_losses, cpu_model = run(copy.deepcopy(model), "cpu", make_batch, make_opt, loss_fn=loss_fn)
    torch_tpu.reset_metrics()
    tpu_losses, tpu_model = run(copy.deepcopy(model), "tpu", make_batch, make_opt, loss_fn=loss_fn)
    assert torch_tpu.metrics()["fallbacks"] == 0
    assert_close(tpu_losses, cpu_losses, rtol=rtol, atol=atol)
    for (name, a), b in zip(tpu_model.state_dict().items(), cpu_model.state_dict().values()):
        assert_close(a.cpu(), b, rtol=10 * rtol, atol=10 * atol, msg=name)
    assert tpu_losses[-1] < tpu_losses[0]
    return tpu_losses


def test_mlp_sgd():
    torch.manual_seed(0)
    model = ref.mlp(16, 64, 4)
    data = torch.randn(32, 16), torch.randn(32, 4)
    compare(model, lambda step: data, lambda p: torch.optim.SGD(p, lr=0.05),
            lambda m, x, y: torch.nn.functional.mse_loss(m(x), y))


def test_cnn_sgd_momentum():
    torch.manual_seed(0)
    model = ref.SmallCNN(width=8)
    g = torch.Generator().manual_seed(1)
    images, labels = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
    compare(model, lambda step: (images, labels), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
            lambda m, x, y: torch.nn.functional.cross_entropy(m(x), y), rtol=1e-3, atol=1e-4)


def test_gpt_adamw():
    torch.manual_seed(0)
    cfg = ref.GPTConfig(vocab=64, d_model=32, layers=2, heads=2, seq=16, batch=4)
    model = ref.GPT(cfg)
    compare(model, lambda step: ref.gpt_batch(cfg, step), lambda p: torch.optim.AdamW(p, lr=3e-3),
            lambda m, x, y: m(x, y)[1], rtol=1e-3, atol=1e-4)


def test_gpt_with_dropout_learns_on_tpu():
    torch.manual_seed(0)
    cfg = ref.GPTConfig(vocab=64, d_model=32, layers=2, heads=2, seq=16, batch=8, dropout=0.1)
    model = ref.GPT(cfg).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch_tpu.reset_metrics()
    losses = []
    for step in range(40):
        x, y = (t.to("tpu") for t in ref.gpt_batch(cfg, step))
        opt.zero_grad()
        loss = model(x, y)[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    assert torch_tpu.metrics()["fallbacks"] == 0
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
