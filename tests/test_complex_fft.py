"""complex64 tensors (copies, views, arithmetic) and the FFT family against
CPU PyTorch (TORCH_TPU_FALLBACK=error): forward, backward, edge cases."""
import pytest
import torch
from torch.testing import assert_close

import torch_tpu
from support import make, check


def cmake(shape, seed=0, dtype=torch.complex64):
    g = torch.Generator().manual_seed(seed)
    real = torch.randn(shape, generator=g, dtype=torch.float64)
    imag = torch.randn(shape, generator=g, dtype=torch.float64)
    return torch.complex(real, imag).to(dtype)


def check_grads(fn, *cpu_args, rtol=None, atol=None):
    """Gradients of a real loss of fn(args) w.r.t. every float/complex arg, tpu vs CPU."""
    out = []
    for device in ("cpu", "tpu"):
        args = [a.detach().to(device).requires_grad_(a.is_floating_point() or a.is_complex()) for a in cpu_args]
        r = fn(*args).resolve_conj()
        # A non-uniform weighting catches gradients that are only right on average.
        if r.is_complex():
            w = torch.linspace(-1, 2, r.numel() * 2).reshape(*r.shape, 2).to(device)
            loss = (torch.view_as_real(r) * w).sum()
        else:
            w = torch.linspace(-1, 2, r.numel()).reshape(r.shape).to(device)
            loss = (r * w).sum()
        loss.backward()
        out.append([a.grad.cpu() for a in args if a.grad is not None])
    assert len(out[0]) == len(out[1]) > 0
    for g_cpu, g_tpu in zip(*out):
        assert_close(g_tpu, g_cpu, rtol=rtol, atol=atol)


# ------------------------------------------------------------ copies and views


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_roundtrip(dtype):
    x = cmake((3, 5), dtype=dtype)
    assert_close(x.to("tpu").cpu(), x, rtol=0, atol=0)
    # A strided view and a 0-dim tensor.
    assert_close(x.to("tpu")[:, 1::2].cpu(), x[:, 1::2], rtol=0, atol=0)
    assert_close(x[1, 2].to("tpu").cpu(), x[1, 2], rtol=0, atol=0)
    assert x.to("tpu")[1, 2].item() == x[1, 2].item()


def test_empty_and_write_into_view():
    assert torch.empty(0, 3, dtype=torch.complex64, device="tpu").cpu().shape == (0, 3)
    t = torch.zeros(4, 4, dtype=torch.complex64, device="tpu")
    v = cmake((2, 4))
    t[1:3] = v.to("tpu")
    expected = torch.zeros(4, 4, dtype=torch.complex64)
    expected[1:3] = v
    assert_close(t.cpu(), expected, rtol=0, atol=0)


def test_view_as_real_and_complex_share_storage():
    x = cmake((4, 3))
    t = x.to("tpu")
    r = torch.view_as_real(t)
    assert_close(r.cpu(), torch.view_as_real(x), rtol=0, atol=0)
    # Writing through the real view changes the complex tensor, and back.
    r[..., 1] = 7.0
    assert_close(t.cpu().imag, torch.full((4, 3), 7.0), rtol=0, atol=0)
    c = torch.view_as_complex(r)
    c.mul_(2)
    assert_close(r.cpu()[..., 1], torch.full((4, 3), 14.0), rtol=0, atol=0)
    f = make((5, 2))
    check(torch.view_as_complex, f)
    check(lambda a: torch.view_as_real(torch.view_as_complex(a) * 3), f)


def test_real_imag_conj():
    x = cmake((3, 4))
    check(lambda a: a.real, x)
    check(lambda a: a.imag, x)
    check(lambda a: a.conj().resolve_conj(), x)
    check(torch.conj_physical, x)
    check(lambda a: a.conj() * 2, x)  # conj bit consumed by an op
    check(lambda a: a.conj().clone(), x)
    assert_close(x.to("tpu").conj().cpu(), x.conj())
    t = x.to("tpu")
    t.real.add_(1)
    assert_close(t.cpu(), x + 1)


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.complex64), (torch.complex64, torch.complex128),
                                     (torch.int64, torch.complex64), (torch.complex128, torch.complex64)],
                         ids=str)
def test_dtype_conversions(src, dst):
    x = cmake((6,), dtype=src) if src.is_complex else make((6,), src)
    check(lambda a: a.to(dst), x)
    check(lambda a: a.cfloat(), x)


def test_complex_to_real_copy_keeps_real_part():
    x = cmake((5,))
    t = torch.empty(5, device="tpu")
    t.copy_(x.to("tpu"))  # warns once per process, as on CPU
    assert_close(t.cpu(), x.real)


def test_complex_and_polar():
    re, im = make((3, 4), seed=0), make((3, 4), seed=1)
    check(torch.complex, re, im)
    check(torch.polar, make((3, 4), low=0, high=2), im)
    check(lambda a, b: torch.complex(a, b), make((3, 1)), make((4,)))  # broadcasting
    out = torch.empty(0, dtype=torch.complex64, device="tpu")
    torch.complex(re.to("tpu"), im.to("tpu"), out=out)
    assert_close(out.cpu(), torch.complex(re, im))
    with pytest.raises(RuntimeError, match="Float"):
        torch.complex(re.to("tpu"), im.double().to("tpu"))
    check_grads(torch.complex, re, im)
    check_grads(torch.polar, make((3, 4), low=0.5, high=2), im)


# ------------------------------------------------------------ arithmetic


@pytest.mark.parametrize("op", [torch.add, torch.sub, torch.mul, torch.div], ids=lambda f: f.__name__)
def test_binary(op):
    a, b = cmake((3, 4), 0), cmake((3, 4), 1)
    check(op, a, b)
    check(op, a, make((4,)))  # complex with real, broadcast
    check(op, a, 2.5)
    check(op, a, 1.5 - 2j)  # a complex Python scalar
    check(lambda x: op(x, torch.tensor(0.5 + 1j)), a)  # 0-dim CPU complex tensor
    check(op, make((3, 4)), 1j)  # real tensor promoted by a complex scalar
    check_grads(op, a, b)


def test_add_alpha_and_inplace():
    a, b = cmake((4,), 0), cmake((4,), 1)
    check(lambda x, y: torch.add(x, y, alpha=2 - 1j), a, b)
    t = a.to("tpu")
    t.mul_(b.to("tpu"))
    assert_close(t.cpu(), a * b)


@pytest.mark.parametrize("name", ["neg", "exp", "log", "sqrt", "tanh", "sin", "cos", "reciprocal", "abs", "sgn"])
def test_unary(name):
    fn = getattr(torch, name)
    x = cmake((3, 5))
    x[0, 0] = 0 if name in ("abs", "sgn") else x[0, 0]
    check(fn, x, rtol=1e-5, atol=1e-5)
    if name not in ("sgn",):
        check_grads(fn, cmake((3, 5), 2), rtol=1e-4, atol=1e-4)


def test_sum_mean_and_where():
    x = cmake((3, 4))
    check(torch.sum, x)
    check(lambda a: a.sum(1, keepdim=True), x)
    check(lambda a: a.mean(0), x)
    check(lambda a: torch.where(a.real > 0, a, torch.zeros_like(a)), x)
    check(lambda a: a.fill_(1 + 2j), x.clone())


# The matrix products and linalg_solve_triangular get lazily conjugated (and negated)
# operands unresolved: the Conjugate and Negative dispatch keys pass them through.
LAZY_BIT_PRODUCTS = {
    "mm": lambda a, b, c: torch.mm(a.conj(), b),
    "mH_matmul": lambda a, b, c: a.mH @ b,
    "matmul_conj_rhs": lambda a, b, c: a @ b.conj(),
    "mm_out_conj": lambda a, b, c: torch.mm(a, b, out=torch.empty_like(c).conj()).resolve_conj(),
    "bmm": lambda a, b, c: torch.bmm(a.conj()[None], b[None]),
    "matmul_batched": lambda a, b, c: torch.matmul(a.conj().expand(2, 3, 3), b),
    "addmm": lambda a, b, c: torch.addmm(c.conj(), a.conj(), b, beta=0.5, alpha=2),
    "addmm_": lambda a, b, c: c.clone().addmm_(a.conj(), b.conj()),
    "baddbmm": lambda a, b, c: torch.baddbmm(c.conj()[None], a[None], b.conj()[None]),
    "dot": lambda a, b, c: torch.dot(a.conj()[0], b[:, 0]),
    "vdot": lambda a, b, c: torch.vdot(a[0], b[:, 0]),
    "vdot_conj": lambda a, b, c: torch.vdot(a.conj()[0], b.conj()[:, 0]),
    "einsum": lambda a, b, c: torch.einsum("ij,jk->ik", a.conj(), b),
    "tensordot": lambda a, b, c: torch.tensordot(a.conj(), b, 1),
}


@pytest.mark.parametrize("name", sorted(LAZY_BIT_PRODUCTS))
def test_products_of_lazily_conjugated_operands(name):
    a, b, c = (cmake((3, 3), seed) for seed in range(3))
    f = LAZY_BIT_PRODUCTS[name]
    assert_close(f(a.to("tpu"), b.to("tpu"), c.to("tpu")).cpu(), f(a, b, c))


def test_solve_triangular_with_negated_operand():
    # b.conj().imag is a negated view: the Negative key passes it through unresolved.
    a = torch.triu(make((4, 4))) + 4 * torch.eye(4)
    b = cmake((4, 2))
    assert b.conj().imag.is_neg()
    got = torch.linalg.solve_triangular(a.to("tpu"), b.to("tpu").conj().imag, upper=True)
    assert_close(got.cpu(), torch.linalg.solve_triangular(a, b.conj().imag, upper=True))


def test_eig_backward_through_abs_of_eigenvectors(allow_fallback):
    # linalg_eig_backward checks that the loss ignores the eigenvectors' phases
    # with V^H gV, a product of a lazily conjugated operand.
    a = make((5, 5))
    grads = []
    for device in ("cpu", "tpu"):
        x = a.to(device).detach().requires_grad_(True)
        values, vectors = torch.linalg.eig(x)
        (values.abs().sum() + vectors.abs().sum()).backward()
        grads.append(x.grad.cpu())
    assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-4)


def test_unsupported_ops_raise_naming_op_and_dtype():
    t = cmake((4,)).to("tpu")
    with pytest.raises(RuntimeError, match="sign is not intended to support complex"):
        torch.sign(t)
    with pytest.raises(NotImplementedError, match="ComplexFloat"):
        torch.floor_divide(t, t)


def test_complex32_copies_and_conversions():
    # XLA has no complex32: a tpu chalf tensor stores float16 (real, imag) pairs.
    pairs = torch.view_as_real
    x = torch.randn(4, 3)
    for src in (x, x.t(), x.to(torch.int64), x > 0, cmake((4, 3))):
        got = src.to("tpu").chalf()
        assert got.dtype == torch.complex32 and got.device.type == "tpu"
        assert_close(pairs(got.cpu()), pairs(src.chalf()))
    c = cmake((6,)).to(torch.complex32)
    t = c.to("tpu")
    assert_close(pairs(t.cpu()), pairs(c))
    assert_close(pairs(t[1::2].clone().cpu()), pairs(c[1::2]))
    assert_close(t.to(torch.complex64).cpu(), c.to(torch.complex64))
    assert_close(t.float().cpu(), c.real.float())
    assert t[1].item() == c[1].item()
    z = torch.zeros(3, dtype=torch.complex32, device="tpu")
    assert_close(pairs(z.cpu()), torch.zeros(3, 2, dtype=torch.half))
    z.copy_(t[:3])
    assert_close(pairs(z.cpu()), pairs(c[:3]))
    z.copy_(torch.tensor([1.5, -2.0, 3.0]))
    assert_close(pairs(z.cpu()), pairs(torch.tensor([1.5, -2.0, 3.0]).chalf()))
    re, im = torch.randn(5).half(), torch.randn(5).half()
    assert_close(pairs(torch.complex(re.to("tpu"), im.to("tpu")).cpu()), pairs(torch.complex(re, im)))
    # Lazily conjugated chalf tensors copy with their conjugation.
    assert_close(pairs(t.conj().cpu().resolve_conj()), pairs(c.conj().resolve_conj()))
    z.copy_(c[:3].conj())
    assert_close(pairs(z.cpu()), pairs(c[:3].conj().resolve_conj()))
    with pytest.raises(TypeError, match="complex32"):
        torch.add(t, t)


def test_tpu_platform_rejects_complex128():
    reason = torch_tpu._C._unsupported_dtype_reason("tpu", torch.complex128)
    assert "complex128" in reason and "TPU" in reason
    assert torch_tpu._C._unsupported_dtype_reason("tpu", torch.complex64) == ""


def test_unfold_backward():
    # Overlapping and gapped windows, along an inner dim.
    for size, step in [(4, 2), (2, 3)]:
        check_grads(lambda a: a.unfold(1, size, step), make((3, 9, 2)))
        check_grads(lambda a: a.unfold(1, size, step), cmake((3, 9, 2)))
    # A 0-dim input unfolds to one window of size 1 (or none of size 0).
    check_grads(lambda a: a.unfold(0, 1, 1), make(()))
    check_grads(lambda a: a.unfold(0, 0, 1).sum() + a, make(()))


def test_fallback_with_complex(allow_fallback):
    # An op without a complex lowering may still run on the CPU when allowed.
    x = cmake((3, 3))
    assert_close(torch.linalg.det(x.to("tpu")).cpu(), torch.linalg.det(x))


# ------------------------------------------------------------ FFT


C2C = ["fft", "ifft", "fftn", "ifftn", "fft2", "ifft2"]
R2C = ["rfft", "rfft2", "rfftn", "ihfft", "ihfft2", "ihfftn"]
C2R = ["irfft", "irfft2", "irfftn", "hfft", "hfft2", "hfftn"]


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("name", C2C)
def test_fft_c2c(name, norm):
    fn = getattr(torch.fft, name)
    check(lambda a: fn(a, norm=norm), cmake((4, 6, 5)), rtol=1e-4, atol=1e-4)
    check(lambda a: fn(a, norm=norm), make((4, 6, 5)), rtol=1e-4, atol=1e-4)  # real input


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("name", R2C)
def test_fft_r2c(name, norm):
    fn = getattr(torch.fft, name)
    check(lambda a: fn(a, norm=norm), make((4, 6, 5)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("name", C2R)
def test_fft_c2r(name, norm):
    fn = getattr(torch.fft, name)
    check(lambda a: fn(a, norm=norm), cmake((4, 6, 5)), rtol=1e-4, atol=1e-4)


def test_fft_sizes_dims_and_many_dims():
    x = cmake((2, 3, 4, 5, 6))
    check(lambda a: torch.fft.fftn(a), x, rtol=1e-4, atol=1e-4)  # five dims: more than one stablehlo.fft
    check(lambda a: torch.fft.fft(a, n=9, dim=1), x, rtol=1e-4, atol=1e-4)  # zero-padded
    check(lambda a: torch.fft.fft(a, n=2, dim=0), x, rtol=1e-4, atol=1e-4)  # trimmed
    check(lambda a: torch.fft.irfft(a, n=7, dim=-2), x, rtol=1e-4, atol=1e-4)
    check(lambda a: torch.fft.rfftn(a.real, s=(3, 8), dim=(0, 3)), x, rtol=1e-4, atol=1e-4)
    check(lambda a: torch.fft.ifft2(a, dim=(3, 1)), x, rtol=1e-4, atol=1e-4)
    check(torch.fft.rfft, make((7,)), rtol=1e-4, atol=1e-4)
    check(torch.fft.fft, cmake((1,)))


def test_fft_out_and_float64():
    x = cmake((8,))
    out = torch.empty(8, dtype=torch.complex64, device="tpu")
    torch.fft.fft(x.to("tpu"), out=out)
    assert_close(out.cpu(), torch.fft.fft(x), rtol=1e-4, atol=1e-4)
    check(torch.fft.fft, cmake((8,), dtype=torch.complex128))
    check(torch.fft.rfft, make((8,), torch.float64))


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "rfftn", "irfftn"])
def test_fft_backward(name):
    fn = getattr(torch.fft, name)
    x = make((4, 6)) if name in ("rfft", "ihfft", "rfftn") else cmake((4, 6))
    check_grads(fn, x, rtol=1e-4, atol=1e-4)


def test_stft_istft():
    x = make((2, 64))
    window = torch.hann_window(16)
    fn = lambda a, w: torch.stft(a, 16, hop_length=4, window=w, return_complex=True)
    check(fn, x, window, rtol=1e-4, atol=1e-4)
    check_grads(fn, x, window, rtol=1e-4, atol=1e-4)
    spec = fn(x, window)
    check(lambda s, w: torch.istft(s, 16, hop_length=4, window=w, length=64), spec, window, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_angle_of_complex(dtype):
    z = cmake((16,), dtype=dtype)
    # the axes, signed zeros and non-finite parts, where atan2's quadrants show
    special = torch.tensor([complex(-1, 0), complex(-1, -0.0), complex(0, 0), complex(0, -1), complex(-0.0, 0),
                            complex(float("inf"), 1), complex(-float("inf"), -float("inf")), complex(float("nan"), 1)],
                           dtype=dtype)
    for x in (z, special):
        got = torch.angle(x.to("tpu"))
        assert got.dtype == torch.angle(x).dtype
        assert_close(got.cpu(), torch.angle(x), equal_nan=True)
    check_grads(torch.angle, z)
