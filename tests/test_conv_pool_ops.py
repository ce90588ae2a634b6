"""Convolutions and pooling against CPU PyTorch (TORCH_TPU_FALLBACK=error):
forward, backward, ATen's padding/ceil/divisor rules and argument errors."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_tpu


def make(shape, dtype=torch.float32, seed=0, low=-2, high=2):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * (high - low) + low).to(dtype)


def run_both(fn, *cpu_args, grad=True, seed=100):
    """fn on CPU and on tpu; returns ((out, grads) cpu, (out, grads) tpu).
    Backward uses a random output gradient so every position matters."""
    results = []
    gy = None
    for device in ("cpu", "tpu"):
        args = [a.detach().to(device).requires_grad_(grad and a.is_floating_point())
                if isinstance(a, torch.Tensor) else a for a in cpu_args]
        out = fn(*args)
        grads = []
        if grad:
            if gy is None:
                gy = make(out.shape, out.dtype, seed=seed)
            out.backward(gy.to(device))
            grads = [a.grad.cpu() for a in args if isinstance(a, torch.Tensor) and a.grad is not None]
        assert out.device.type == device
        results.append((out.detach().cpu(), grads))
    return results


def check(fn, *cpu_args, grad=True, rtol=None, atol=None):
    (out_c, g_c), (out_t, g_t) = run_both(fn, *cpu_args, grad=grad)
    assert out_t.dtype == out_c.dtype
    assert_close(out_t, out_c, rtol=rtol, atol=atol, equal_nan=True)
    assert len(g_t) == len(g_c)
    for a, b in zip(g_t, g_c):
        assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True)


# ------------------------------------------------------------ convolution

CONV2D = [
    dict(),
    dict(stride=2),
    dict(stride=(2, 1), padding=(1, 2)),
    dict(padding=1, dilation=2),
    dict(stride=3, padding=2, dilation=(1, 2)),  # trailing input unused by the last window
    dict(padding="same"),
    dict(padding="valid", stride=2),
]


@pytest.mark.parametrize("i", range(len(CONV2D)), ids=[str(kw) for kw in CONV2D])
def test_conv2d(i):
    kw = CONV2D[i]
    x, w = make((2, 4, 9, 8)), make((6, 4, 3, 3), seed=1)
    b = make((6,), seed=2) if i % 2 == 0 else None  # with and without bias, alternately
    check(lambda x, w, b: F.conv2d(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("groups,cout", [(2, 6), (4, 4), (4, 8)], ids=["groups2", "depthwise", "depthwise_x2"])
def test_conv2d_groups(groups, cout):
    x, w, b = make((2, 4, 7, 7)), make((cout, 4 // groups, 3, 3), seed=1), make((cout,), seed=2)
    check(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=groups), x, w, b)


def test_conv2d_kernel_larger_than_padding_rules():
    # k=1 with padding 1: the input gradient needs negative effective padding
    check(lambda x, w: F.conv2d(x, w, padding=1), make((1, 3, 5, 5)), make((2, 3, 1, 1), seed=1))
    # stride larger than the kernel skips inputs entirely
    check(lambda x, w: F.conv2d(x, w, stride=3), make((1, 2, 8, 8)), make((3, 2, 2, 2), seed=1))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=3, groups=2), dict(padding="same")],
                         ids=str)
def test_conv1d(kw):
    x, w, b = make((3, 4, 17)), make((6, 4 // kw.get("groups", 1), 3), seed=1), make((6,), seed=2)
    check(lambda x, w, b: F.conv1d(x, w, b, **kw), x, w, b)


def test_conv3d():
    x, w, b = make((2, 2, 5, 6, 5)), make((3, 2, 2, 3, 2), seed=1), make((3,), seed=2)
    check(lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=1), x, w, b)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2), dict(stride=2, padding=1, output_padding=1),
                                dict(stride=(2, 3), padding=(0, 1), dilation=2, output_padding=(1, 0)),
                                dict(groups=2, stride=2)], ids=str)
def test_conv_transpose2d(kw):
    x, w, b = make((2, 4, 5, 6)), make((4, 3, 3, 3), seed=1), make((3 * kw.get("groups", 1),), seed=2)
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw), x, w, b)


def test_conv_transpose1d():
    x, w = make((2, 3, 7)), make((3, 5, 4), seed=1)
    check(lambda x, w: F.conv_transpose1d(x, w, stride=3, padding=1, output_padding=2), x, w)


def test_conv_unbatched_noncontiguous_and_module():
    check(lambda x, w: F.conv2d(x, w, padding=1), make((3, 6, 6)), make((2, 3, 3, 3), seed=1))
    x = make((2, 6, 6, 3)).permute(0, 3, 1, 2)  # channels-last layout
    check(lambda x, w: F.conv2d(x, w), x, make((4, 3, 2, 2), seed=1))
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 5, 3, padding=1)
    x = make((2, 3, 8, 8))
    expected = conv(x)
    conv_t = conv.to("tpu")
    assert_close(conv_t(x.to("tpu")).cpu(), expected, rtol=1e-4, atol=1e-5)


def test_conv_bfloat16():
    x, w, b = make((2, 4, 9, 9), torch.bfloat16), make((6, 4, 3, 3), torch.bfloat16, 1), make((6,), torch.bfloat16, 2)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b, grad=False, rtol=2e-2, atol=5e-2)
    check(lambda x, w: F.conv_transpose2d(x, w, stride=2), x, make((4, 3, 2, 2), torch.bfloat16, 1), grad=False,
          rtol=2e-2, atol=5e-2)


def test_conv_only_some_gradients():
    x, w, b = make((2, 3, 6, 6)), make((4, 3, 3, 3), seed=1), make((4,), seed=2)
    for needs in [(True, False, False), (False, True, False), (False, False, True)]:
        tensors = {}
        for device in ("cpu", "tpu"):
            args = [t.detach().clone().to(device).requires_grad_(n) for t, n in zip((x, w, b), needs)]
            F.conv2d(*args, stride=2).sum().backward()
            tensors[device] = [a.grad for a in args]
        for c, t in zip(tensors["cpu"], tensors["tpu"]):
            assert (c is None) == (t is None)
            if c is not None:
                assert_close(t.cpu(), c)


def test_conv_empty_batch():
    check(lambda x, w, b: F.conv2d(x, w, b), torch.zeros(0, 3, 5, 5), make((2, 3, 3, 3)), make((2,)))


def test_conv_errors():
    x = make((1, 3, 5, 5)).to("tpu")
    with pytest.raises(RuntimeError, match="expected input"):
        F.conv2d(x, make((2, 4, 3, 3)).to("tpu"))  # channel mismatch, ATen's own check
    with pytest.raises(RuntimeError, match="should be the same"):
        F.conv2d(x, make((2, 3, 3, 3), torch.bfloat16).to("tpu"))
    with pytest.raises(RuntimeError):
        F.conv2d(x, make((2, 3, 7, 7)).to("tpu"))  # kernel larger than the input


# ------------------------------------------------------------ max pooling

MAXPOOL = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(1, 2)),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=1, padding=1),  # overlapping windows: gradients add up
]


@pytest.mark.parametrize("kw", MAXPOOL, ids=str)
def test_max_pool2d(kw):
    x = make((2, 3, 9, 8))
    check(lambda x: F.max_pool2d(x, **kw), x)
    (v_c, _), (v_t, _) = run_both(lambda x: F.max_pool2d(x, return_indices=True, **kw)[1], x, grad=False)
    assert v_t.dtype == torch.int64
    assert torch.equal(v_t, v_c)


def test_max_pool2d_ties_nan_and_inf():
    x = torch.tensor([[[[1.0, 1.0, 0.0, 2.0], [1.0, float("nan"), 2.0, 2.0],
                        [float("-inf"), float("-inf"), 3.0, float("nan")], [float("-inf"), float("-inf"), 3.0, 3.0]]]])
    for kw in [dict(kernel_size=2), dict(kernel_size=2, stride=1), dict(kernel_size=3, padding=1, stride=2)]:
        check(lambda x: F.max_pool2d(x, **kw), x)
        (i_c, _), (i_t, _) = run_both(lambda x: F.max_pool2d(x, return_indices=True, **kw)[1], x, grad=False)
        assert torch.equal(i_t, i_c)


def test_max_pool_1d_unbatched_bf16_and_module():
    check(lambda x: F.max_pool1d(x, 3, stride=2, padding=1), make((2, 3, 11)))
    check(lambda x: F.max_pool2d(x, 2), make((3, 6, 6)))  # unbatched
    check(lambda x: F.max_pool2d(x, 3, stride=2), make((2, 3, 9, 9), torch.bfloat16), grad=False)
    check(torch.nn.MaxPool2d(2, return_indices=False), make((1, 2, 6, 6)))


def test_max_pool_out_and_errors():
    x = make((1, 2, 6, 6))
    out, idx = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.ops.aten.max_pool2d_with_indices.out(x.to("tpu"), [2, 2], [2, 2], [0, 0], [1, 1], False,
                                               out=out, indices=idx)
    v, i = F.max_pool2d(x, 2, return_indices=True)
    assert_close(out.cpu(), v)
    assert torch.equal(idx.cpu(), i)
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(x.to("tpu"), 2, padding=2)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.max_pool2d(make((1, 1, 2, 2)).to("tpu"), 3)


# ------------------------------------------------------------ average pooling

AVGPOOL = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),  # last window wholly in the padding
    dict(kernel_size=2, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), divisor_override=5),
    dict(kernel_size=3, stride=1, padding=1),
]


@pytest.mark.parametrize("kw", AVGPOOL, ids=str)
def test_avg_pool2d(kw):
    check(lambda x: F.avg_pool2d(x, **kw), make((2, 3, 9, 8)))


def test_avg_pool_1d_unbatched_bf16_out():
    check(lambda x: F.avg_pool1d(x, 3, stride=2, padding=1, count_include_pad=False), make((2, 3, 10)))
    check(lambda x: F.avg_pool2d(x, 2), make((3, 5, 6)))
    check(lambda x: F.avg_pool2d(x, 3, stride=2), make((2, 3, 9, 9), torch.bfloat16), grad=False,
          rtol=2e-2, atol=2e-2)
    x = make((1, 2, 6, 6))
    out = torch.empty(0, device="tpu")
    torch.ops.aten.avg_pool2d.out(x.to("tpu"), [2, 2], [2, 2], [0, 0], False, True, None, out=out)
    assert_close(out.cpu(), F.avg_pool2d(x, 2))
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        F.avg_pool2d(x.to("tpu"), 2, divisor_override=0)


# ------------------------------------------------------------ adaptive average pooling

@pytest.mark.parametrize("size", [(4, 4), (3, 3), (5, 3), (2, 1), (11, 10), (None, 3)], ids=str)
def test_adaptive_avg_pool2d(size):
    check(lambda x: F.adaptive_avg_pool2d(x, size), make((2, 3, 9, 8)))


def test_adaptive_avg_pool_1d_unbatched_bf16():
    check(lambda x: F.adaptive_avg_pool1d(x, 4), make((2, 3, 10)))
    check(lambda x: F.adaptive_avg_pool2d(x, (3, 2)), make((3, 7, 5)))
    check(lambda x: F.adaptive_avg_pool2d(x, 3), make((2, 3, 8, 8), torch.bfloat16), grad=False,
          rtol=2e-2, atol=2e-2)
    with pytest.raises(RuntimeError, match="non-zero size"):
        F.adaptive_avg_pool2d(torch.zeros(1, 0, 4, 4, device="tpu"), 2)


# ------------------------------------------------------------ a small CNN

class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, groups=2)
        self.fc = torch.nn.Linear(16 * 2 * 2, 5)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        x = F.adaptive_avg_pool2d(self.conv2(x), 2)
        return self.fc(torch.flatten(x, 1))


def test_small_cnn_forward_backward():
    torch.manual_seed(0)
    model = SmallCNN()
    model_t = SmallCNN().to("tpu")
    model_t.load_state_dict(model.state_dict())
    x = make((4, 3, 12, 12))
    torch_tpu.reset_metrics()
    out_c, out_t = model(x), model_t(x.to("tpu"))
    (out_c * out_c).mean().backward()
    (out_t * out_t).mean().backward()
    assert_close(out_t.cpu(), out_c, rtol=1e-4, atol=1e-4)
    for (name, p_c), p_t in zip(model.named_parameters(), model_t.parameters()):
        assert_close(p_t.grad.cpu(), p_c.grad, rtol=1e-3, atol=1e-4, msg=name)
    assert torch_tpu.metrics()["fallbacks"] == 0


# ------------------------------------------------------------ integer inputs and memory formats

@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8], ids=str)
def test_max_pool2d_integers(dtype):
    g = torch.Generator().manual_seed(0)
    low = 0 if dtype == torch.uint8 else -100
    x = torch.randint(low, 100, (2, 3, 7, 7), generator=g, dtype=dtype)
    check(lambda x: F.max_pool2d(x, 3, stride=2, padding=1), x, grad=False)
    (i_c, _), (i_t, _) = run_both(lambda x: F.max_pool2d(x, 2, return_indices=True)[1], x, grad=False)
    assert torch.equal(i_t, i_c)


def test_long_avg_pool_and_conv():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-50, 50, (2, 3, 7, 7), generator=g)
    check(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), x, grad=False)  # truncating division
    check(lambda x: F.avg_pool2d(x, 2, count_include_pad=False, padding=1), x, grad=False)
    w = torch.randint(-3, 3, (4, 3, 2, 2), generator=g)
    check(lambda x, w: F.conv2d(x, w, stride=2), x, w, grad=False)
    with pytest.raises(RuntimeError, match="not implemented for 'Int'"):
        F.avg_pool2d(x.int().to("tpu"), 2)
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        F.adaptive_avg_pool2d(x.to("tpu"), 2)


def _w(*shape):
    return lambda x: make(shape, seed=1).to(x.device)


# Ops whose results (and input gradients) ATen's CPU kernels lay out channels-last
# for a channels-last input, or contiguous where they do not (the 3-d average and
# adaptive pools); each entry: (fn, input shape). Shapes keep every result dim > 1,
# so a layout is never ambiguous.
LAYOUT_OPS = {
    "conv2d": (lambda x: F.conv2d(x, _w(4, 3, 3, 3)(x)), (2, 3, 6, 6)),
    "conv3d": (lambda x: F.conv3d(x, _w(4, 3, 2, 2, 2)(x)), (2, 3, 4, 4, 4)),
    "conv_transpose2d": (lambda x: F.conv_transpose2d(x, _w(3, 2, 2, 2)(x)), (2, 3, 4, 5)),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), (2, 3, 6, 6)),
    "max_pool3d": (lambda x: F.max_pool3d(x, 2), (2, 3, 4, 4, 6)),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), (2, 3, 6, 6)),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 2), (2, 3, 4, 4, 6)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 3), (2, 3, 6, 6)),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, 2), (2, 3, 4, 4, 6)),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, 3), (2, 3, 6, 6)),
    "adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x, 2), (2, 3, 4, 4, 6)),
    "max_unpool2d": (lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), (2, 3, 6, 6)),
    "max_unpool3d": (lambda x: F.max_unpool3d(*F.max_pool3d(x, 2, return_indices=True), 2), (2, 3, 4, 4, 6)),
    "nearest2d": (lambda x: F.interpolate(x, scale_factor=2), (2, 3, 4, 5)),
    "nearest3d": (lambda x: F.interpolate(x, scale_factor=2), (2, 3, 2, 3, 4)),
    "nearest_exact2d": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest-exact"), (2, 3, 4, 5)),
    "bilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (2, 3, 4, 5)),
    "bicubic": (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), (2, 3, 4, 5)),
    "bicubic_antialias": (lambda x: F.interpolate(x, size=(3, 2), mode="bicubic", antialias=True), (2, 3, 6, 5)),
    "nearest_exact3d": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest-exact"), (2, 3, 2, 3, 4)),
    "bilinear_antialias": (lambda x: F.interpolate(x, size=(3, 2), mode="bilinear", antialias=True), (2, 3, 6, 5)),
    "trilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), (2, 3, 2, 3, 4)),
    "batch_norm2d": (lambda x: F.batch_norm(x, None, None, _w(3)(x), None, training=True), (2, 3, 4, 5)),
    "batch_norm3d": (lambda x: F.batch_norm(x, None, None, None, _w(3)(x), training=True), (2, 3, 2, 3, 4)),
    "batch_norm_eval": (lambda x: F.batch_norm(x, torch.zeros(3, device=x.device), torch.ones(3, device=x.device)),
                        (2, 3, 4, 5)),
    "group_norm": (lambda x: F.group_norm(x, 2, _w(4)(x)), (2, 4, 3, 5)),
    "cat": (lambda x: torch.cat([x, x * 2], 1), (2, 3, 4, 5)),
    "cat_batch": (lambda x: torch.cat([x, x * 2]), (2, 3, 4, 5)),
    "cat_mixed": (lambda x: torch.cat([x, (x * 2).contiguous()], 1), (2, 3, 4, 5)),
    "stack": (lambda x: torch.stack([x, x * 2]), (2, 3, 4, 5)),
    "prelu": (lambda x: F.prelu(x, _w(3)(x)), (2, 3, 4, 5)),
}


# Where tpu lays out a result (first set) or an input gradient (second) contiguous though CPU
# keeps channels-last: PyTorch lays out an overrideable backend's convolution so, and
# torch.compile's fake tensors expect it; group norm's gradient as CUDA's and the meta kernel.
_CONVOLUTIONS = {"conv2d", "conv3d", "conv_transpose2d"}
CONTIGUOUS_ON_TPU = (_CONVOLUTIONS, _CONVOLUTIONS | {"group_norm"})


@pytest.mark.parametrize("name", LAYOUT_OPS)
def test_channels_last_input_gives_cpu_layouts(name):
    fn, shape = LAYOUT_OPS[name]
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    x = make(shape).contiguous(memory_format=fmt)
    y = fn(x.requires_grad_())
    gy = torch.empty_like(y).copy_(make(y.shape, seed=3))  # laid out as y, as autograd's ones_like(y) is
    (gx,) = torch.autograd.grad(y, x, gy)
    xt = x.detach().to("tpu").requires_grad_()
    yt = fn(xt)
    (gxt,) = torch.autograd.grad(yt, xt, gy.to("tpu"))
    expected = [t.stride() for t in (y, gx)]
    for i, t in enumerate((yt, gxt)):
        if name in CONTIGUOUS_ON_TPU[i]:
            expected[i] = t.contiguous().stride()
    assert [yt.stride(), gxt.stride()] == expected
    assert_close(yt.cpu(), y, rtol=1e-4, atol=1e-4)
    assert_close(gxt.cpu(), gx, rtol=1e-4, atol=1e-4)
