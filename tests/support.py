"""Helpers shared by the op test files: deterministic inputs, moving
arguments to tpu, comparing tpu results and gradients with CPU PyTorch."""
import torch
from torch.testing import assert_close


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
