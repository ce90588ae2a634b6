"""More nn ops against CPU PyTorch (TORCH_TPU_FALLBACK=error): shrink/threshold/
glu/logsigmoid/prelu/rrelu activations, huber/smooth-L1/margin losses, padding,
interpolation, unfold/fold, channel_shuffle, 3d/adaptive/fractional pooling,
unpooling, and transposed-convolution gradients."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_tpu  # noqa: F401
from support import make, check, check_grads

BF16 = dict(rtol=3e-2, atol=3e-2)


def with_nan(x):
    x = x.clone()
    x.view(-1)[::7] = float("nan")
    return x


# ------------------------------------------------------------ activations

ACTIVATIONS = {
    "hardshrink": lambda x: F.hardshrink(x, 0.7),
    "softshrink": lambda x: F.softshrink(x, 0.7),
    "threshold": lambda x: F.threshold(x, 0.5, -2.0),
    "logsigmoid": F.logsigmoid,
    "glu": lambda x: F.glu(x, 1),
    "glu_last": lambda x: F.glu(x),
    "rrelu_eval": lambda x: F.rrelu(x, 0.1, 0.3, training=False),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_activation(name, dtype):
    fn = ACTIVATIONS[name]
    x = make((4, 6), dtype, 0)
    tol = BF16 if dtype == torch.bfloat16 else {}
    check(fn, x, **tol)
    check_grads(fn, x, **tol)


@pytest.mark.parametrize("name", ["hardshrink", "softshrink", "threshold", "logsigmoid"])
def test_activation_nan_and_extremes(name):
    x = with_nan(make((5, 7)) * 30)
    x[0, 0], x[0, 1] = float("inf"), -float("inf")
    check(ACTIVATIONS[name], x)


def test_activation_variants_out_inplace():
    x = make((3, 4))
    check(lambda t: torch.threshold_(t.clone(), 0.1, 9.0), x)
    check(lambda t: F.threshold(t.clone(), 0.1, 9.0, inplace=True), x)
    check(lambda t: torch.nn.functional.hardshrink(t, 0.5), x)
    check(lambda t: torch._C._nn.softshrink(t, 0.5, out=torch.empty_like(t)), x)
    check(lambda t: torch._C._nn.glu(t, 1, out=torch.empty(0, device=t.device)), x)
    check(lambda t: F.threshold(t, 1, 5), make((3, 4), torch.int64))  # integer threshold
    check(lambda t: F.rrelu(t.clone(), 0.1, 0.3, training=False, inplace=True), x)


def test_prelu():
    x, w = make((2, 3, 4, 5)), make((3,), seed=1)
    check(F.prelu, x, w)
    check_grads(F.prelu, x, w)
    check_grads(F.prelu, x, make((1,), seed=2))
    check(F.prelu, x.bfloat16(), w.bfloat16(), **BF16)


def test_rrelu_training_uses_noise():
    x = make((50, 40)).to("tpu")
    y = F.rrelu(x, 0.1, 0.3, training=True)
    ratio = (y / x)[x < 0].cpu()
    assert ((ratio >= 0.1 - 1e-6) & (ratio <= 0.3 + 1e-6)).all()
    assert ratio.std() > 0.01
    assert_close(y[x >= 0].cpu(), x[x >= 0].cpu())


def test_activation_errors():
    for device in ("cpu", "tpu"):
        x = make((3, 5)).to(device)
        with pytest.raises(RuntimeError, match="Halving dimension must be even"):
            F.glu(x, 1)
        with pytest.raises(RuntimeError, match="lambda must be in range"):
            F.softshrink(x, -1.0)


# ------------------------------------------------------------ losses

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", ["huber", "smooth_l1", "smooth_l1_beta0"])
def test_regression_losses(name, reduction):
    fn = {
        "huber": lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=0.8),
        "smooth_l1": lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.5),
        "smooth_l1_beta0": lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.0),
    }[name]
    a, b = make((4, 5)), make((4, 5), seed=1)
    b[0, :2] = a[0, :2] + torch.tensor([0.5, -0.8])  # on the branch boundaries
    check(fn, a, b)
    check_grads(fn, a, b)
    check(fn, a.bfloat16(), b.bfloat16(), **BF16)


def test_regression_loss_broadcast_and_errors():
    check(lambda a, b: F.huber_loss(a, b.expand(4, 5)), make((4, 5)), make((5,), seed=1))
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="huber_loss does not support non-positive values for delta"):
            F.huber_loss(make((3,)).to(device), make((3,)).to(device), delta=0.0)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p,weighted", [(1, False), (2, True)])
def test_multi_margin_loss(p, weighted, reduction):
    x, t = make((5, 4)), torch.tensor([0, 3, 1, 1, 2])
    w = make((4,), seed=3, low=0.1, high=2) if weighted else None
    fn = lambda a, tt: F.multi_margin_loss(a, tt, p=p, margin=0.7, weight=w.to(a.device) if w is not None else None,
                                           reduction=reduction)
    check(fn, x, t)
    check_grads(fn, x, t)
    check(lambda a, tt: F.multi_margin_loss(a, tt), make((4,)), torch.tensor(2))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(reduction):
    x = make((3, 5))
    t = torch.tensor([[3, 0, -1, 1, 2], [1, 1, 4, 2, -1], [0, 1, 2, 3, 4]])
    fn = lambda a, tt: F.multilabel_margin_loss(a, tt, reduction=reduction)
    check(fn, x, t)
    check_grads(fn, x, t)
    check(lambda a, tt: F.multilabel_margin_loss(a, tt), make((4,)), torch.tensor([2, -1, 0, 1]))


# ------------------------------------------------------------ padding

@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 7), (2, 3)), ((3, 7), (0, 4)), ((2, 2, 5, 6), (1, 2, 3, 0)),
                                       ((1, 2, 4, 5, 3), (1, 2, 0, 1, 2, 1)), ((2, 3, 8), (-2, 3))])
def test_pad(mode, shape, pad):
    x = make(shape)
    fn = lambda t: F.pad(t, pad, mode=mode)
    check(fn, x)
    check_grads(fn, x)


def test_pad_dtypes_and_errors():
    check(lambda t: F.pad(t, (2, 1), mode="reflect"), make((2, 3, 5), torch.bfloat16))
    check(lambda t: F.pad(t, (2, 1, 1, 1), mode="replicate"), make((1, 2, 3, 5), torch.int64))
    check_grads(lambda t: F.pad(t, (2, 1), mode="reflect"), make((2, 3, 5), torch.bfloat16))
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding input dimension"):
            F.pad(make((1, 2, 3)).to(device), (3, 0), mode="reflect")


# ------------------------------------------------------------ interpolation

INTERP = [
    ("nearest", (2, 3, 5), dict(size=9)),
    ("nearest", (2, 3, 5, 4), dict(scale_factor=(1.7, 0.6))),
    ("nearest", (1, 2, 3, 4, 5), dict(size=(5, 2, 7))),
    ("nearest-exact", (2, 3, 5, 4), dict(size=(7, 3))),
    ("nearest-exact", (1, 2, 3, 4, 5), dict(scale_factor=1.5)),
    ("linear", (2, 3, 5), dict(size=8, align_corners=False)),
    ("linear", (2, 3, 5), dict(size=3, align_corners=True)),
    ("bilinear", (2, 3, 5, 4), dict(size=(7, 9), align_corners=False)),
    ("bilinear", (2, 3, 5, 4), dict(size=(3, 9), align_corners=True)),
    ("bilinear", (2, 3, 5, 4), dict(scale_factor=(1.3, 2.7), align_corners=False)),
    ("bilinear", (1, 2, 9, 8), dict(size=(4, 3), antialias=True)),
    ("bilinear", (1, 2, 4, 5), dict(size=(9, 7), antialias=True, align_corners=True)),
    ("bicubic", (2, 3, 5, 4), dict(size=(8, 6), align_corners=False)),
    ("bicubic", (2, 3, 5, 4), dict(scale_factor=0.7, align_corners=True)),
    ("bicubic", (1, 2, 11, 10), dict(size=(4, 6), antialias=True)),
    ("trilinear", (1, 2, 3, 4, 5), dict(size=(5, 2, 7), align_corners=False)),
    ("trilinear", (1, 2, 3, 4, 5), dict(scale_factor=(1.5, 2.0, 0.5), align_corners=True)),
]


@pytest.mark.parametrize("mode,shape,kw", INTERP, ids=lambda v: str(v))
def test_interpolate(mode, shape, kw):
    fn = lambda t: F.interpolate(t, mode=mode, **kw)
    x = make(shape)
    check(fn, x)
    check_grads(fn, x)
    if "antialias" in kw or mode == "bicubic":
        check(fn, x.double())


def test_interpolate_low_precision_and_uint8():
    x = make((2, 3, 5, 4), torch.bfloat16)
    check(lambda t: F.interpolate(t, size=(7, 9), mode="bilinear"), x, **BF16)
    check(lambda t: F.interpolate(t, size=(7, 9), mode="bicubic"), x.half(), rtol=5e-3, atol=5e-3)
    check(lambda t: F.interpolate(t, size=(7, 3), mode="nearest"), make((2, 3, 5, 4), torch.uint8, low=0, high=255))
    check(lambda t: F.interpolate(t, size=(7, 3), mode="nearest"), with_nan(make((2, 3, 5, 4))))


def test_interpolate_errors():
    for device in ("cpu", "tpu"):
        msg = r"should be greater than 0, but got input \(H: 2, W: 2\) output \(H: 0, W: 3\)"
        with pytest.raises(RuntimeError, match=msg):
            torch._C._nn.upsample_nearest2d(make((1, 1, 2, 2)).to(device), (0, 3))
        with pytest.raises(RuntimeError, match="Non-empty 4D data tensor expected"):
            F.interpolate(make((1, 0, 2, 2)).to(device), size=(3, 3), mode="bilinear")
    check(lambda t: F.interpolate(t, size=(3, 3), mode="bilinear"), make((0, 2, 2, 2)))  # empty batch


# ------------------------------------------------------------ unfold / fold / channel_shuffle

@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(2, 1))])
def test_unfold_fold(kw):
    x = make((2, 3, 6, 7))
    check(lambda t: F.unfold(t, **kw), x)
    check_grads(lambda t: F.unfold(t, **kw), x)
    cols = F.unfold(x, **kw)
    check(lambda c: F.fold(c, (6, 7), **kw), cols)
    check_grads(lambda c: F.fold(c, (6, 7), **kw), cols)
    check(lambda t: F.unfold(t, **kw), make((3, 6, 7), torch.bfloat16))  # unbatched
    for device in ("cpu", "tpu"):  # no integer kernels, as on CPU
        with pytest.raises(NotImplementedError, match="im2col_out_cpu"):
            F.unfold(make((3, 6, 7), torch.int64).to(device), **kw)


def test_fold_errors():
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="sliding blocks"):
            F.fold(make((1, 4, 5)).to(device), (4, 4), kernel_size=2)


def test_channel_shuffle():
    x = make((2, 6, 3, 2))
    check(lambda t: F.channel_shuffle(t, 3), x)
    check(lambda t: torch.nn.ChannelShuffle(2)(t), make((1, 4, 5), torch.int64))
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="divisible by groups"):
            F.channel_shuffle(x.to(device), 4)


# ------------------------------------------------------------ pooling

@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=(3, 2, 2), stride=(2, 1, 2), padding=1),
                                dict(kernel_size=2, dilation=2, ceil_mode=True)])
def test_max_pool3d(kw):
    x = make((2, 2, 5, 6, 7))
    fn = lambda t: F.max_pool3d(t, return_indices=True, **kw)
    cpu, tpu = fn(x), fn(x.to("tpu"))
    assert_close(tpu[0].cpu(), cpu[0])
    assert_close(tpu[1].cpu(), cpu[1])
    check_grads(lambda t: F.max_pool3d(t, **kw), x)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                                dict(kernel_size=(2, 3, 2), ceil_mode=True, divisor_override=5)])
def test_avg_pool3d(kw):
    x = make((2, 2, 5, 6, 7))
    check(lambda t: F.avg_pool3d(t, **kw), x)
    check_grads(lambda t: F.avg_pool3d(t, **kw), x)


@pytest.mark.parametrize("size", [(1, 1, 1), (3, 2, 4), (4, 6, 5)])
def test_adaptive_avg_pool3d(size):
    x = make((2, 3, 4, 6, 5))
    check(lambda t: F.adaptive_avg_pool3d(t, size), x)
    check_grads(lambda t: F.adaptive_avg_pool3d(t, size), x)


@pytest.mark.parametrize("fn,shape,size", [(F.adaptive_max_pool1d, (2, 3, 10), 4),
                                           (F.adaptive_max_pool2d, (2, 3, 7, 5), (3, 4)),
                                           (F.adaptive_max_pool2d, (3, 7, 5), (7, 2)),
                                           (F.adaptive_max_pool3d, (1, 2, 5, 4, 6), (2, 3, 4))])
def test_adaptive_max_pool(fn, shape, size):
    x = make(shape)
    x.view(-1)[5:9] = x.view(-1)[4]  # ties take the first
    x.view(-1)[20] = float("nan")
    cpu, tpu = fn(x, size, return_indices=True), fn(x.to("tpu"), size, return_indices=True)
    assert_close(tpu[0].cpu(), cpu[0], equal_nan=True)
    assert_close(tpu[1].cpu(), cpu[1])
    check_grads(lambda t: fn(t, size), make(shape))
    check(lambda t: fn(t, size), make(shape, torch.bfloat16))


@pytest.mark.parametrize("dim", [2, 3])
def test_fractional_max_pool(dim):
    fn = F.fractional_max_pool2d if dim == 2 else F.fractional_max_pool3d
    x = make((2, 3) + (9,) * dim)
    samples = torch.rand(2, 3, dim, generator=torch.Generator().manual_seed(4))
    f = lambda t, s: fn(t, 2, output_size=(4,) * dim, return_indices=True, _random_samples=s)
    cpu, tpu = f(x, samples), f(x.to("tpu"), samples.to("tpu"))
    assert_close(tpu[0].cpu(), cpu[0])
    assert_close(tpu[1].cpu(), cpu[1])
    check_grads(lambda t: f(t, samples.to(t.device))[0], x)
    # the out= variants (ATen's .output and .grad_input overloads) write what the functional ones return
    op = getattr(torch.ops.aten, f"fractional_max_pool{dim}d")
    backward = getattr(torch.ops.aten, f"fractional_max_pool{dim}d_backward")
    xt, st = x.to("tpu"), samples.to("tpu")
    out, indices = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.int64, device="tpu")
    op.output(xt, [2] * dim, [4] * dim, st, output=out, indices=indices)
    assert_close(out.cpu(), cpu[0])
    assert_close(indices.cpu(), cpu[1])
    grad = torch.randn(cpu[0].shape)
    grad_input = torch.empty(0, device="tpu")
    backward.grad_input(grad.to("tpu"), xt, [2] * dim, [4] * dim, indices, grad_input=grad_input)
    assert_close(grad_input.cpu(), backward(grad, x, [2] * dim, [4] * dim, cpu[1]))


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_max_unpool(dim):
    pool = [F.max_pool1d, F.max_pool2d, F.max_pool3d][dim - 1]
    unpool = [F.max_unpool1d, F.max_unpool2d, F.max_unpool3d][dim - 1]
    x = make((2, 3) + (6,) * dim)
    y, idx = pool(x, 2, return_indices=True)
    check(lambda a, i: unpool(a, i, 2), y, idx)
    check(lambda a, i: unpool(a, i, 2, output_size=(7,) * dim), y, idx)
    check_grads(lambda a, i: unpool(a, i, 2), y, idx)


def test_pool3d_errors():
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="pad should be at most half"):
            F.max_pool3d(make((1, 1, 4, 4, 4)).to(device), 2, padding=2)


# ------------------------------------------------------------ transposed convolution

@pytest.mark.parametrize("dim", [1, 2, 3])
def test_conv_transpose_output_padding_past_stride(dim):
    # output_padding may reach the dilation, beyond the stride: the gradient
    # must not see the rows no input reaches.
    conv = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][dim - 1]
    x, w, b = make((2, 4) + (4,) * dim), make((4, 2) + (3,) * dim, seed=1), make((4,), seed=2)
    kw = dict(stride=2, padding=1, output_padding=3, groups=2, dilation=4)
    check(lambda a, c, d: conv(a, c, d, **kw), x, w, b)
    check_grads(lambda a, c, d: conv(a, c, d, **kw), x, w, b)


def test_conv_transpose_bf16_rounds_once():
    # Accumulates in f32 and rounds once: within half an ulp of the f32 result.
    x, w = make((1, 3, 4, 4), torch.bfloat16), make((3, 3, 3, 3), torch.bfloat16, 1)
    got = F.conv_transpose2d(x.to("tpu"), w.to("tpu"), stride=2, padding=2, output_padding=1).cpu()
    ref = F.conv_transpose2d(x.float(), w.float(), stride=2, padding=2, output_padding=1)
    assert_close(got, ref.bfloat16(), rtol=0, atol=0)


# ------------------------------------------------------------ grid sampling

@pytest.mark.parametrize("mode,padding,align", [("bilinear", "zeros", False), ("bilinear", "reflection", True),
                                                ("nearest", "border", True), ("bicubic", "reflection", False),
                                                ("bicubic", "zeros", True)])
def test_grid_sample_2d(mode, padding, align):
    x, grid = make((2, 3, 5, 6)), make((2, 4, 3, 2), seed=1, low=-1.3, high=1.3)
    fn = lambda a, b: F.grid_sample(a, b, mode=mode, padding_mode=padding, align_corners=align)
    check(fn, x, grid)
    check_grads(fn, x, grid, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode,padding", [("bilinear", "reflection"), ("nearest", "border")])
def test_grid_sample_3d(mode, padding):
    x, grid = make((1, 2, 3, 4, 5)), make((1, 2, 3, 2, 3), seed=1, low=-1.2, high=1.2)
    fn = lambda a, b: F.grid_sample(a, b, mode=mode, padding_mode=padding, align_corners=False)
    check(fn, x, grid)
    check_grads(fn, x, grid, atol=1e-4, rtol=1e-4)


def test_grid_sample_bf16_and_errors():
    x, grid = make((2, 3, 5, 6), torch.bfloat16), make((2, 4, 3, 2), torch.bfloat16, seed=1)
    check(lambda a, b: F.grid_sample(a, b, align_corners=False), x, grid, **BF16)
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="expected grid and input to have same batch size"):
            F.grid_sample(make((2, 3, 4, 4)).to(device), make((1, 2, 2, 2)).to(device), align_corners=False)


# ------------------------------------------------------------ embedding_bag

@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    w = make((10, 4))
    idx, off = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0]), torch.tensor([0, 3, 3, 7])  # bag 1 is empty
    fn = lambda ww, i, o: F.embedding_bag(i, ww, o, mode=mode, padding_idx=2)
    check(fn, w, idx, off)
    check_grads(fn, w, idx, off)
    if mode == "sum":
        psw = make((9,), seed=3)
        fn = lambda ww, i, o, p: F.embedding_bag(i, ww, o, mode="sum", per_sample_weights=p, include_last_offset=True)
        check(fn, w, idx, torch.tensor([0, 3, 3, 7, 9]), psw)
        check_grads(fn, w, idx, torch.tensor([0, 3, 3, 7, 9]), psw)
    else:
        check(lambda ww, i: F.embedding_bag(i, ww, mode=mode), w.bfloat16(), idx.reshape(3, 3).int(), **BF16)


# ------------------------------------------------------------ weight normalisation

@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_weight_norm_matches_cpu_forward_and_backward(dim, dtype):
    # dim 0 and the last run the fused _weight_norm_interface (and its backward); other
    # dims ATen's composite. wav2vec2's positional convolution is weight-normalised.
    v = make((4, 3, 5), dtype, 0)
    g = torch.norm_except_dim(v.float(), 2, dim).to(dtype) * 1.5
    tol = BF16 if dtype == torch.bfloat16 else {}
    check(lambda v, g: torch._weight_norm(v, g, dim), v, g, **tol)
    check_grads(lambda v, g: torch._weight_norm(v, g, dim) * torch.arange(60.0, device=v.device).view(4, 3, 5), v, g,
                **tol)


def test_weight_norm_interface_returns_the_norms_and_refuses_a_middle_dim():
    v, g = make((4, 3, 5), seed=1), make((4, 1, 1), seed=2)
    w_cpu, norms_cpu = torch._weight_norm_interface(v, g, 0)
    w, norms = torch._weight_norm_interface(v.to("tpu"), g.to("tpu"), 0)
    assert_close(w.cpu(), w_cpu)
    assert_close(norms.cpu(), norms_cpu)
    assert norms.shape == g.shape
    with pytest.raises(RuntimeError, match="first or last dim"):
        torch._weight_norm_interface(v.to("tpu"), make((1, 3, 1)).to("tpu"), 1)
