"""Helpers shared by the test files: deterministic inputs, moving arguments to
tpu, comparing tpu results and gradients with CPU PyTorch, fresh interpreters."""
import os
import subprocess
import sys

import torch
from torch.testing import assert_close


def run_python(code, *args, timeout=300, **env):
    """Runs `code` in a fresh interpreter with `args` as sys.argv[1:] and `env` added
    to this process's environment (a None value removes the variable); returns the
    CompletedProcess (output as text)."""
    environment = {k: v for k, v in dict(os.environ, **env).items() if v is not None}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=environment, timeout=timeout)


def make(shape, dtype=torch.float32, seed=0, low=-3, high=3):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g) * (high - low) + low).to(dtype)
    return torch.randint(low, high, shape, generator=g, dtype=dtype)


def to_tpu(a):
    """Tensors (also inside lists and tuples) moved to tpu; anything else as is."""
    if isinstance(a, torch.Tensor):
        return a.to("tpu")
    if isinstance(a, (list, tuple)):
        return type(a)(to_tpu(x) for x in a)
    return a


def check(fn, *cpu_args, rtol=None, atol=None, **kwargs):
    """Runs fn on CPU and on tpu copies of the tensor args; compares outputs."""
    expected = fn(*cpu_args, **kwargs)
    got = fn(*[to_tpu(a) for a in cpu_args], **kwargs)
    assert got.device.type == "tpu"
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert_close(got.cpu(), expected, rtol=rtol, atol=atol, equal_nan=True)
    return got


def grads(fn, *cpu_args):
    """Gradients of sum(fn(args)) w.r.t. every floating arg, on CPU and tpu."""
    out = []
    for device in ("cpu", "tpu"):
        args = [a.detach().to(device).requires_grad_(a.is_floating_point()) for a in cpu_args]
        fn(*args).sum().backward()
        out.append([a.grad.cpu() for a in args if a.grad is not None])
    return out


def check_grads(fn, *cpu_args, rtol=None, atol=None):
    cpu, tpu = grads(fn, *cpu_args)
    assert len(cpu) == len(tpu) > 0
    for g_cpu, g_tpu in zip(cpu, tpu):
        assert_close(g_tpu, g_cpu, rtol=rtol, atol=atol, equal_nan=True)


# An op with a CPU kernel only: it always goes through the tpu CPU fallback, so
# the fallback tests do not depend on which ATen ops still lack a lowering.
# Its autograd formula (grad * 2) runs natively.
_test_lib = torch.library.Library("torch_tpu_test", "DEF")
_test_lib.define("cpu_only_scale(Tensor x) -> Tensor")
_test_lib.define("cpu_only_scale.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
_test_lib.impl("cpu_only_scale", lambda x: x * 2, "CPU")


def _cpu_only_scale_out(x, *, out):
    return out.copy_(x * 2)


_test_lib.impl("cpu_only_scale.out", _cpu_only_scale_out, "CPU")
torch.library.register_autograd("torch_tpu_test::cpu_only_scale", lambda ctx, grad: grad * 2)
cpu_only_scale = torch.ops.torch_tpu_test.cpu_only_scale
_test_lib.define("cpu_only_combine(Tensor x, Tensor y) -> Tensor")
_test_lib.impl("cpu_only_combine", lambda x, y: x * 2 + y, "CPU")
cpu_only_combine = torch.ops.torch_tpu_test.cpu_only_combine


class TinyCausalLM(torch.nn.Module):
    """A decoder step with a growing key/value cache, as in Hugging Face generate()."""

    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.q, self.k, self.v = torch.nn.Linear(d, d), torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.out = torch.nn.Linear(d, vocab)

    def forward(self, tokens, past_k, past_v):
        x = self.emb(tokens)
        k = torch.cat([past_k, self.k(x)], 1)
        v = torch.cat([past_v, self.v(x)], 1)
        attention = torch.nn.functional.softmax((self.q(x) @ k.transpose(1, 2)) / 4.0, -1)
        return self.out(attention @ v), k, v


def kv_cache_decode(cpu_model, compiled, steps, measure=lambda: 0):
    """Greedy decoding with a growing cache, on CPU and through `compiled` on tpu in
    lockstep; logits and cache are compared at each step. Returns, per step, how much
    measure() changed across the compiled call."""
    past_k = past_v = torch.zeros(1, 0, cpu_model.k.out_features)
    tpu_k, tpu_v = past_k.to("tpu"), past_v.to("tpu")
    tokens = torch.tensor([[3]])
    changes = []
    with torch.no_grad():
        for _ in range(steps):
            logits, past_k, past_v = cpu_model(tokens, past_k, past_v)
            before = measure()
            tpu_logits, tpu_k, tpu_v = compiled(tokens.to("tpu"), tpu_k, tpu_v)
            changes.append(measure() - before)
            assert_close(tpu_logits.cpu(), logits, rtol=1e-4, atol=1e-5)
            assert_close(tpu_v.cpu(), past_v, rtol=1e-4, atol=1e-5)
            tokens = logits[:, -1:].argmax(-1)
    return changes
