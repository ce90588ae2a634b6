"""F.scaled_dot_product_attention on tpu: ATen's overrideable fused backend (one program
forward, one backward) against CPU PyTorch, forward and backward; the math path where the
fused kernels do not apply; layouts as torch.compile's fake tensors have them."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import torch_tpu
from support import make

FUSED = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def _inputs(b, hq, hk, l, s, e, ev, dtype=torch.float32):
    return make((b, hq, l, e), dtype, seed=1), make((b, hk, s, e), dtype, seed=2), make((b, hk, s, ev), dtype, seed=3)


def _forward_backward(device, tensors, grad, **kwargs):
    """Output and gradients of every floating input (the mask too, when it is float)."""
    args = [t.detach().to(device).requires_grad_(t.is_floating_point()) for t in tensors]
    q, k, v, *mask = args
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[0] if mask else None, **kwargs)
    out.backward(grad.to(device))
    return [out] + [a.grad for a in args if a.requires_grad]


CASES = {
    "plain": (dict(), (2, 4, 4, 5, 7, 8, 8), None),
    "value width": (dict(), (2, 2, 2, 5, 7, 8, 6), None),
    "gqa": (dict(enable_gqa=True), (2, 4, 2, 5, 7, 8, 8), None),
    "gqa causal one key head": (dict(enable_gqa=True, is_causal=True), (1, 4, 1, 6, 6, 8, 8), None),
    "causal longer keys": (dict(is_causal=True, scale=0.3), (2, 2, 2, 4, 6, 8, 8), None),
    "float mask": (dict(), (2, 2, 2, 5, 7, 8, 8), (5, 7)),
    "float mask per batch": (dict(), (2, 2, 2, 5, 7, 8, 8), (2, 1, 5, 7)),
    "bool mask": (dict(), (2, 2, 2, 5, 7, 8, 8), "bool"),
    "bool mask, a row all masked": (dict(), (2, 2, 2, 5, 7, 8, 8), "row"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fused_attention_matches_cpu(case):
    kwargs, sizes, mask = CASES[case]
    tensors = list(_inputs(*sizes))
    l, s = sizes[3], sizes[4]
    if mask == "bool":
        tensors.append(make((l, s), torch.bool, seed=4))
    elif mask == "row":
        m = torch.ones(l, s, dtype=torch.bool)
        m[1] = False  # nothing kept: 0, as the math path's safe softmax gives
        tensors.append(m)
    elif mask is not None:
        tensors.append(make(mask, seed=4))
    grad = make((sizes[0], sizes[1], l, sizes[6]), seed=5)
    expected = _forward_backward("cpu", tensors, grad, **kwargs)
    with _Ops() as seen:
        got = _forward_backward("tpu", tensors, grad, **kwargs)
    assert FUSED in seen.ops and torch.ops.aten.bmm.default not in seen.ops
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.device.type == "tpu" and g.dtype == e.dtype and g.shape == e.shape
        assert_close(g.cpu(), e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_attention_half_types(dtype):
    """Half-type inputs are computed in float32 (CPU's kernel rounds its scores and
    probabilities to the half type): compared with CPU's float32 result of the same inputs."""
    tensors = _inputs(2, 2, 2, 5, 7, 16, 16, dtype)
    grad = make((2, 2, 5, 16), dtype, seed=5)
    expected = _forward_backward("cpu", [t.float() for t in tensors], grad.float(), is_causal=True)
    got = _forward_backward("tpu", tensors, grad, is_causal=True)
    for g, e in zip(got, expected):
        assert g.dtype == dtype
        assert_close(g.cpu(), e.to(dtype), rtol=2e-2, atol=2e-2)


def test_output_laid_out_as_the_meta_kernel_says():
    """Heads-transposed inputs (as Transformers passes them): the result and the gradients
    take the layout PyTorch's meta kernels give, which torch.compile traces against."""
    q, k, v = (t.transpose(1, 2) for t in _inputs(2, 5, 5, 4, 4, 8, 6))  # [B, L, H, E] storage
    q, k, v = q.contiguous().transpose(1, 2), k.contiguous().transpose(1, 2), v.contiguous().transpose(1, 2)
    tq, tk, tv = (t.to("tpu").requires_grad_() for t in (q, k, v))
    out = FUSED(tq, tk, tv)
    meta = FUSED(q.to("meta"), k.to("meta"), v.to("meta"))
    assert out[0].stride() == meta[0].stride() and out[1].shape == meta[1].shape
    F.scaled_dot_product_attention(tq, tk, tv).sum().backward()
    assert (tq.grad.stride(), tk.grad.stride(), tv.grad.stride()) == (tq.stride(), tk.stride(), tv.stride())


@pytest.mark.parametrize("why", ["dropout", "3-d", "mask dtype", "math only"])
def test_math_path_where_the_fused_kernels_do_not_apply(why):
    q, k, v = (t.to("tpu") for t in _inputs(1, 2, 2, 3, 3, 4, 4))
    kwargs, context = {}, sdpa_kernel([SDPBackend.MATH]) if why == "math only" else torch.no_grad()
    if why == "dropout":
        kwargs["dropout_p"] = 0.5
    elif why == "3-d":
        q, k, v = q[0], k[0], v[0]
    elif why == "mask dtype":  # a float32 mask with bfloat16 inputs
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
        kwargs["attn_mask"] = torch.zeros(3, 3, device="tpu")
    with context, _Ops() as seen:
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert FUSED not in seen.ops
    if why != "dropout":
        expected = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(),
                                                  **{k_: (a.cpu() if torch.is_tensor(a) else a) for k_, a in kwargs.items()})
        assert_close(out.cpu(), expected, **(dict(rtol=2e-2, atol=2e-2) if why == "mask dtype" else {}))


def test_errors_as_cpu():
    q, k, v = _inputs(1, 4, 2, 3, 3, 4, 4)
    with pytest.raises(RuntimeError) as cpu:  # more query heads without enable_gqa
        F.scaled_dot_product_attention(q, k, v)
    with pytest.raises(type(cpu.value)):
        F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"))
    tq, tk, tv = (t.to("tpu") for t in _inputs(1, 2, 2, 3, 3, 4, 4))
    with pytest.raises(NotImplementedError, match="dropout"):
        FUSED(tq, tk, tv, None, 0.5)
    with pytest.raises(RuntimeError, match="broadcast"):
        FUSED(tq, tk, tv, torch.zeros(2, 3, device="tpu"))
    with pytest.raises(RuntimeError, match="same dtype"):
        FUSED(tq, tk.double(), tv)
    no_heads = torch.zeros(1, 0, 3, 4, device="tpu")  # no key heads to divide the query heads by
    with pytest.raises(RuntimeError, match="incompatible shapes"):
        FUSED(tq, no_heads, no_heads)


def test_compiled_attention_copies_nothing():
    """torch.compile of Transformers-style attention (heads transposed, grouped query heads,
    a float mask): one program per graph, results and gradients as CPU's, no layout copy."""
    from torch_tpu import _compile

    def attend(q, k, v, mask):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=mask, enable_gqa=True)
        return out.transpose(1, 2).sum(-1)

    cpu = [make((2, 5, 4, 8), seed=1), make((2, 7, 2, 8), seed=2), make((2, 7, 2, 8), seed=3), make((5, 7), seed=4)]
    cpu = [t.requires_grad_() for t in cpu]
    attend(*cpu).sum().backward()
    tpu = [t.detach().to("tpu").requires_grad_() for t in cpu]
    before = dict(_compile.stats()["layout_copies"])
    torch._dynamo.reset()
    out = torch.compile(attend, backend="tpu")(*tpu)
    out.sum().backward()
    assert_close(out.cpu(), attend(*cpu).detach())
    for t, c in zip(tpu, cpu):
        assert_close(t.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5)
    assert _compile.stats()["layout_copies"] == before


DTENSOR_ATTENTION = """
import sys, tempfile, torch, torch_tpu, torch.distributed as dist, torch.nn.functional as F
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.device_mesh import init_device_mesh
dist.init_process_group(init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
mesh = init_device_mesh("tpu", (1,))
q = torch.randn(2, 4, 5, 8)
attend = lambda a: F.scaled_dot_product_attention(a, a, a, is_causal=True)
for fn in (attend, torch.compile(attend, backend="tpu")):
    for placement in (Replicate(), Shard(1)):
        d = distribute_tensor(q.to("tpu"), mesh, [placement]).requires_grad_()
        out = fn(d)
        out.sum().backward()
        torch.testing.assert_close(out.full_tensor().cpu(), attend(q))
        assert type(out).__name__ == "DTensor" and out.placements == (placement,) and d.grad is not None
dist.destroy_process_group()
print("ok")
"""


def test_dtensor_attention_is_sharded_by_the_fused_ops_rules():
    """DTensor shards the fused ops by torch_tpu's rules (torch_tpu/_dtensor_rules.py), eager and
    compiled; causal attention on DTensor raised on the math path (a plain mask added to a
    DTensor). Several ranks: distributed_worker.py's `attention`."""
    from support import run_python

    proc = run_python(DTENSOR_ATTENTION)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
