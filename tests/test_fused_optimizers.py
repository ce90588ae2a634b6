"""torch.optim's fused=True kernels (_fused_adam_, _fused_adamw_, _fused_sgd_) on tpu:
one program per step, compared with CPU's fused kernels (TORCH_TPU_FALLBACK=error)."""
import pytest
import torch
from torch.testing import assert_close

import torch_tpu
from support import make


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


CONFIGS = {
    "adam": lambda p, lr: torch.optim.Adam(p, lr=lr, fused=True),
    "adam_wd_maximize": lambda p, lr: torch.optim.Adam(p, lr=lr, weight_decay=0.1, maximize=True, fused=True),
    "adam_amsgrad": lambda p, lr: torch.optim.Adam(p, lr=lr, amsgrad=True, fused=True),
    "adamw": lambda p, lr: torch.optim.AdamW(p, lr=lr, weight_decay=0.05, fused=True),
    "adamw_amsgrad": lambda p, lr: torch.optim.AdamW(p, lr=lr, amsgrad=True, betas=(0.8, 0.95), fused=True),
    "sgd": lambda p, lr: torch.optim.SGD(p, lr=lr, fused=True),
    "sgd_momentum": lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9, dampening=0.1, weight_decay=0.01,
                                                  fused=True),
    "sgd_nesterov_maximize": lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9, nesterov=True, maximize=True,
                                                           fused=True),
}


def train(device, config, lr):
    model = mlp().to(device)
    x, y = make((5, 6), seed=1).to(device), make((5, 3), seed=2).to(device)
    opt = CONFIGS[config](model.parameters(), lr.to(device) if torch.is_tensor(lr) else lr)
    executions = []
    for step in range(3):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        before = torch_tpu.metrics()["executions"]
        opt.step()
        executions.append(torch_tpu.metrics()["executions"] - before)
        for group in opt.param_groups:  # a schedule: a new value each step
            if not torch.is_tensor(group["lr"]):
                group["lr"] *= 0.9
    return [p.detach().cpu() for p in model.parameters()], executions


@pytest.mark.parametrize("config", list(CONFIGS))
def test_fused_optimizer_matches_cpu(config):
    want, _ = train("cpu", config, 0.01)
    compiles = torch_tpu.metrics()["compiles"]
    got, executions = train("tpu", config, 0.01)
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-6)
    # After the first step (which creates the state): the step-count increment is one
    # launch, the update of every tensor another.
    assert max(executions[1:]) <= 2, executions
    # Learning-rate changes and later steps reuse the programs of the first step.
    first = torch_tpu.metrics()["compiles"]
    train("tpu", config, 0.02)
    assert torch_tpu.metrics()["compiles"] == first, (compiles, first)


def test_fused_adamw_tensor_lr():
    want, _ = train("cpu", "adamw", torch.tensor(0.01))
    got, _ = train("tpu", "adamw", torch.tensor(0.01))
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("op", ["adamw", "adam_amsgrad_maximize", "sgd", "sgd_first_step_tensor_lr"])
def test_grad_scale_and_found_inf(op, found):
    # Gradients are unscaled in place; found_inf == 1 leaves every tensor untouched.
    shapes = [(4, 3), (5,)]
    results = []
    for device in ("cpu", "tpu"):
        params = [make(s, seed=i).to(device) for i, s in enumerate(shapes)]
        grads = [make(s, seed=10 + i).to(device) for i, s in enumerate(shapes)]
        bufs = [make(s, seed=20 + i).to(device) for i, s in enumerate(shapes)]
        bufs2 = [make(s, seed=30 + i).abs().to(device) for i, s in enumerate(shapes)]
        scale = torch.tensor(4.0, device=device)
        found_inf = torch.tensor(found, device=device)
        steps = [torch.tensor(3.0, device=device) for _ in shapes]
        if op == "adamw":
            torch._fused_adamw_(params, grads, bufs, bufs2, [], steps, lr=0.01, beta1=0.9, beta2=0.99,
                                weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False, grad_scale=scale,
                                found_inf=found_inf)
        elif op == "adam_amsgrad_maximize":
            maxes = [b.clone() * 2 for b in bufs2]
            torch._fused_adam_(params, grads, bufs, bufs2, maxes, steps, lr=0.01, beta1=0.9, beta2=0.99,
                               weight_decay=0.1, eps=1e-8, amsgrad=True, maximize=True, grad_scale=scale,
                               found_inf=found_inf)
            bufs2 = bufs2 + maxes
        elif op == "sgd_first_step_tensor_lr":
            # A skipped first step must not leave the inf/NaN gradients in the fresh buffer.
            grads[0][0, 0] = float("inf")
            fresh = [torch.zeros_like(p) for p in params]
            torch._fused_sgd_(params, grads, fresh, weight_decay=0.01, momentum=0.9,
                              lr=torch.tensor(0.1, device=device), dampening=0.0, nesterov=True, maximize=False,
                              is_first_step=True, grad_scale=scale, found_inf=found_inf)
            bufs = fresh if found == 0.0 else bufs
            if found:
                assert all(torch.isfinite(b).all() for b in fresh)
        else:
            torch._fused_sgd_(params, grads, bufs, weight_decay=0.0, momentum=0.9, lr=0.1, dampening=0.0,
                              nesterov=False, maximize=False, is_first_step=False, grad_scale=scale,
                              found_inf=found_inf)
        results.append([t.cpu() for t in params + grads + bufs + bufs2])
    for g, w in zip(results[1], results[0]):
        assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_fused_optimizer_errors():
    p = [torch.zeros(3, device="tpu")]
    with pytest.raises(RuntimeError, match="expected every tensor on a tpu device"):
        torch._fused_sgd_(p, [torch.zeros(3)], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=False)
    with pytest.raises(RuntimeError, match="equal length"):
        torch._fused_adam_(p, [], [], [], [], [], lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8,
                           amsgrad=False, maximize=False)


def test_compiled_training_step_with_fused_adamw():
    # torch.compile of forward + backward + AdamW(fused=True) matches the eager CPU step.
    results = []
    for device in ("cpu", "tpu"):
        model = mlp().to(device)
        x, y = make((5, 6), seed=1).to(device), make((5, 3), seed=2).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05, fused=True)

        def step():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss

        run = torch.compile(step, backend="tpu") if device == "tpu" else step
        losses = [run().item() for _ in range(3)]
        results.append((losses, [p.detach().cpu() for p in model.parameters()]))
    assert_close(results[1][0], results[0][0], rtol=1e-5, atol=1e-6)
    for g, w in zip(results[1][1], results[0][1]):
        assert_close(g, w, rtol=1e-5, atol=1e-6)
