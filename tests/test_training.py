"""A small MLP trains on tpu exactly as on CPU."""
import copy

import torch
from torch import nn
from torch.testing import assert_close

import torch_tpu


def make_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def train(model, device, steps=10, foreach=None):
    torch.manual_seed(1)
    x = torch.randn(64, 16)
    y = torch.randn(64, 4)
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=foreach)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_mlp_sgd_momentum_matches_cpu():
    model = make_mlp()
    cpu_losses, cpu_params = train(copy.deepcopy(model), "cpu")
    tpu_losses, tpu_params = train(copy.deepcopy(model), "tpu")
    assert_close(tpu_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for a, b in zip(tpu_params, cpu_params):
        assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert tpu_losses[-1] < tpu_losses[0]


def test_mlp_foreach_optimizer_path():
    model = make_mlp()
    cpu_losses, _ = train(copy.deepcopy(model), "cpu", steps=3, foreach=True)
    tpu_losses, _ = train(copy.deepcopy(model), "tpu", steps=3, foreach=True)
    assert_close(tpu_losses, cpu_losses, rtol=1e-4, atol=1e-5)


def test_training_step_compiles_once():
    model = make_mlp()
    train(copy.deepcopy(model), "tpu", steps=2)
    before = torch_tpu.metrics()["compiles"]
    train(copy.deepcopy(model), "tpu", steps=3)
    assert torch_tpu.metrics()["compiles"] == before
