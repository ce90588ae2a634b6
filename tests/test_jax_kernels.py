"""Custom kernels written in JAX (torch_tpu.jax_kernel), run on tpu tensors and
compared with the same math in torch on CPU, forward and backward."""
import jax
import jax.numpy as jnp
import pytest
import torch
from torch.testing import assert_close

import torch_tpu
from support import make


@torch_tpu.jax_kernel
def gelu_matmul(x, w):
    return jax.nn.gelu(x @ w, approximate=True) + 1.0


def torch_gelu_matmul(x, w):
    return torch.nn.functional.gelu(x @ w, approximate="tanh") + 1.0


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
def test_forward_matches_torch(mode):
    x, w = make((4, 8)), make((8, 3), seed=1)
    with torch_tpu.eager_mode(mode):
        got = gelu_matmul(x.to("tpu"), w.to("tpu"))
        assert got.device.type == "tpu" and got.dtype == torch.float32
        assert_close(got.cpu(), torch_gelu_matmul(x, w), rtol=1e-5, atol=1e-5)


def test_pytree_outputs_helper_functions_and_mixed_dtypes():
    @torch_tpu.jax_kernel
    def stats(x, idx):
        probs = jax.nn.softmax(x, axis=-1)  # lowers with private helper functions
        return {"max": probs.max(axis=-1), "picked": jnp.take_along_axis(probs, idx[:, None], axis=-1)[:, 0],
                "argmax": jnp.argmax(x, axis=-1)}

    x, idx = make((5, 7)), torch.tensor([0, 3, 6, 2, 1], dtype=torch.int32)
    got = stats(x.to("tpu"), idx.to("tpu"))
    probs = torch.softmax(x, -1)
    assert sorted(got) == ["argmax", "max", "picked"]
    assert_close(got["max"].cpu(), probs.amax(-1))
    assert_close(got["picked"].cpu(), probs.gather(-1, idx.long()[:, None])[:, 0])
    assert got["argmax"].dtype == torch.int32
    assert torch.equal(got["argmax"].cpu(), x.argmax(-1).int())


def test_backward_through_jax_vjp():
    x, w = make((4, 8)), make((8, 3), seed=1)
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    (gelu_matmul(xt, wt) * torch.arange(3.0, device="tpu")).sum().backward()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    (torch_gelu_matmul(xc, wc) * torch.arange(3.0)).sum().backward()
    assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    assert_close(wt.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-5)


def test_backward_with_an_integer_input_and_an_unused_output():
    @torch_tpu.jax_kernel
    def scaled_rows(x, idx):
        return x[idx] * 2.0, x.sum()

    x, idx = make((6, 3)), torch.tensor([5, 0, 5], dtype=torch.int32)
    xt = x.to("tpu").requires_grad_()
    rows, _ = scaled_rows(xt, idx.to("tpu"))  # the second output never reaches the loss
    rows.sum().backward()
    xc = x.clone().requires_grad_()
    (xc[idx.long()] * 2.0).sum().backward()
    assert_close(xt.grad.cpu(), xc.grad)


def test_fused_mode_puts_the_kernel_in_the_pending_graph():
    x, w = make((4, 8)), make((8, 3), seed=1)
    with torch_tpu.eager_mode("fused"):
        xt, wt = x.to("tpu"), w.to("tpu")
        torch.tpu.synchronize()
        torch_tpu.reset_metrics()
        y = gelu_matmul(xt * 2, wt).relu() + gelu_matmul(xt, wt)  # two calls of one kernel among torch ops
        out = y.cpu()
        m = torch_tpu.metrics()
    assert m["fused_graphs"] == 1 and m["executions"] == 1, m
    assert_close(out, (torch_gelu_matmul(x * 2, w).relu() + torch_gelu_matmul(x, w)), rtol=1e-5, atol=1e-5)


def test_new_shapes_lower_again_and_programs_are_cached():
    @torch_tpu.jax_kernel
    def double(x):
        return x * 2

    for n in (3, 5, 3):
        assert_close(double(torch.ones(n, device="tpu")).cpu(), torch.full((n,), 2.0))
    assert len(double._lowered) == 2
    torch_tpu.reset_metrics()
    double(torch.ones(3, device="tpu")).cpu()
    assert torch_tpu.metrics()["compiles"] == 0


def test_two_kernels_with_the_same_function_name_do_not_clash():
    def make_kernel(scale):
        def kernel(x):
            return x * scale
        return torch_tpu.jax_kernel(kernel)

    a, b = make_kernel(2.0), make_kernel(3.0)
    with torch_tpu.eager_mode("fused"):
        x = torch.ones(4, device="tpu")
        out = (a(x) + b(x)).cpu()  # both in one program
    assert_close(out, torch.full((4,), 5.0))


def test_errors_name_the_kernel_and_the_problem():
    with pytest.raises(ValueError, match="gelu_matmul takes tpu tensors, got one on cpu"):
        gelu_matmul(torch.ones(4, 8), torch.ones(8, 3, device="tpu"))
    with pytest.raises(TypeError, match="gelu_matmul: JAX lowered the inputs .*jax_enable_x64"):
        gelu_matmul(torch.ones(4, 8, device="tpu", dtype=torch.int64), torch.ones(8, 3, device="tpu"))
    with pytest.raises(TypeError, match="takes tensors"):
        gelu_matmul(torch.ones(4, 8, device="tpu"), 3.0)
    with pytest.raises(Exception, match="dot_general|shapes|incompatible"):
        gelu_matmul(torch.ones(4, 8, device="tpu"), torch.ones(5, 3, device="tpu"))  # JAX's own shape error


def test_an_ignored_input_is_still_a_parameter():
    ignore_second = torch_tpu.jax_kernel(lambda x, unused: x + 1)
    assert_close(ignore_second(torch.ones(2, device="tpu"), torch.ones(3, device="tpu")).cpu(), torch.full((2,), 2.0))


def test_a_kernel_the_plugin_cannot_compile_raises_its_message():
    # JAX lowers CPU linear algebra to LAPACK custom calls, which only jaxlib's own
    # CPU runtime provides: a clear error naming the kernel, not a crash
    inverse = torch_tpu.jax_kernel(lambda x: jnp.linalg.inv(x))
    with pytest.raises(RuntimeError, match="jax__lambda_.*XLA compilation failed.*lapack"):
        inverse(torch.eye(3, device="tpu"))
    assert_close((torch.ones(2, device="tpu") + 1).cpu(), torch.full((2,), 2.0))  # the device still works
