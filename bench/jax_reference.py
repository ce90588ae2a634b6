"""The benchmark's XLA reference: each workload's whole training step written in JAX
and jitted as one XLA program, from the same initial weights and batches as the
torch modes.

It answers "how fast is XLA itself on this machine": the step has no per-op host
work at all (one dispatch, donated parameters and optimizer state), so its time is
about what the device needs for the step's math. The torch modes' step times are
read against it. The math is the torch model's, op for op (the loss matches CPU
eager's, which the benchmark checks), and the optimizer is torch's SGD / AdamW
with their defaults, its step size and bias corrections computed on the host as
torch's non-capturable AdamW does.
"""
import math

import numpy as np

ADAMW = dict(lr=3e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2)  # torch.optim.AdamW(lr=3e-3)
SGD_LR = 0.1
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default


def _linear(params, name, x):
    y = x @ params[name + ".weight"].T
    bias = params.get(name + ".bias")
    return y if bias is None else y + bias


def _layer_norm(jnp, params, name, x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + LAYER_NORM_EPS) * params[name + ".weight"] + params[name + ".bias"]


def _cross_entropy(jax, logits, targets):
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return -jax.numpy.take_along_axis(log_probs, targets[:, None], axis=1).mean()


def _mlp_loss(jax, params, x, y):
    h = jax.nn.relu(_linear(params, "0", x))
    h = jax.nn.relu(_linear(params, "2", h))
    return _cross_entropy(jax, _linear(params, "4", h), y)


def _gpt_loss(jax, cfg, params, idx, targets):
    jnp = jax.numpy
    b, t = idx.shape
    d, heads = cfg["d_model"], cfg["heads"]
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    x = params["tokens.weight"][idx] + params["positions.weight"][jnp.arange(t)]
    for layer in range(cfg["layers"]):
        p = "blocks.%d." % layer
        q, k, v = jnp.split(_linear(params, p + "qkv", _layer_norm(jnp, params, p + "ln1", x)), 3, axis=2)
        q, k, v = (z.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3) for z in (q, k, v))
        scores = jnp.where(causal, (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(d // heads), -jnp.inf)
        y = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = x + _linear(params, p + "proj", y)
        h = jax.nn.gelu(_linear(params, p + "fc", _layer_norm(jnp, params, p + "ln2", x)), approximate=True)
        x = x + _linear(params, p + "out", h)
    logits = _linear(params, "head", _layer_norm(jnp, params, "ln", x))
    return _cross_entropy(jax, logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _sgd_step(jax, loss_fn):
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - SGD_LR * g, params, grads), loss
    return jax.jit(step, donate_argnums=(0,))


def _adamw_step(jax, loss_fn):
    """torch's AdamW (amsgrad off): decay, lerp / addcmul moments, addcdiv."""
    jnp = jax.numpy
    lr, beta1, beta2, eps, wd = (ADAMW[k] for k in ("lr", "beta1", "beta2", "eps", "weight_decay"))

    def step(state, x, y, step_size, bias_correction2_sqrt):
        params, exp_avg, exp_avg_sq = state
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        new = {}
        for name, p in params.items():
            g = grads[name]
            m = exp_avg[name] + (g - exp_avg[name]) * (1 - beta1)
            v = exp_avg_sq[name] * beta2 + g * g * (1 - beta2)
            denom = jnp.sqrt(v) / bias_correction2_sqrt + eps
            new[name] = (p * (1 - lr * wd) - step_size * m / denom, m, v)
        return tuple({n: t[i] for n, t in new.items()} for i in range(3)), loss
    jitted = jax.jit(step, donate_argnums=(0,))
    count = [0]

    def run(state, x, y):
        count[0] += 1  # torch keeps the step count and computes these on the host
        step_size = lr / (1 - beta1 ** count[0])
        bias_correction2_sqrt = math.sqrt(1 - beta2 ** count[0])
        return jitted(state, x, y, np.float32(step_size), np.float32(bias_correction2_sqrt))
    return run


def make_runner(workload, model, batches, info):
    """step() -> loss: one training step on the next of `batches` in turn, from the
    torch model's current weights. Each step puts its batch on the device (the torch
    modes copy theirs) and reads the loss (their `.item()`)."""
    import jax

    params = {name: jax.numpy.asarray(p.detach().numpy()) for name, p in model.named_parameters()}
    if workload == "mlp":
        train_step, state = _sgd_step(jax, lambda p, x, y: _mlp_loss(jax, p, x, y)), params
    else:
        def zeros():  # distinct buffers: each is donated
            return {n: jax.numpy.zeros_like(p) for n, p in params.items()}
        cfg = info["config"]
        train_step = _adamw_step(jax, lambda p, x, y: _gpt_loss(jax, cfg, p, x, y))
        state = (params, zeros(), zeros())
    host_batches = [(x.numpy(), y.numpy()) for x, y in batches]
    device = jax.devices()[0]
    index = 0

    def step():
        nonlocal state, index
        x, y = host_batches[index % len(host_batches)]
        index += 1
        state, loss = train_step(state, jax.device_put(x, device), jax.device_put(y, device))
        return float(loss)
    return step

