"""Elementwise op family against CPU PyTorch (TORCH_TPU_FALLBACK=error, so every
op here must be native): unary math, binary math, clamp/lerp/addc*/masked_fill,
activations and their gradients, and the optimizers built on them."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_tpu  # noqa: F401
from support import make, to_tpu, check, grads, check_grads, run_python

NAN, INF = float("nan"), float("inf")
BF16_TOL = dict(rtol=1.6e-2, atol=1e-2)


def check_variants(fn, inplace, x, *args, rtol=None, atol=None):
    """fn(x, *args) functional, out= and in-place (method `inplace`) forms."""
    expected = check(fn, x, *args, rtol=rtol, atol=atol)
    targs = [to_tpu(a) for a in args]
    out = torch.empty(0, dtype=expected.dtype, device="tpu")
    fn(to_tpu(x), *targs, out=out)
    assert_close(out.cpu(), expected.cpu(), rtol=rtol, atol=atol, equal_nan=True)
    if inplace is not None and expected.dtype == x.dtype and expected.shape == x.shape:
        t = to_tpu(x.clone())
        getattr(t, inplace)(*targs)
        assert_close(t.cpu(), expected.cpu(), rtol=rtol, atol=atol, equal_nan=True)


SPECIAL = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5])

# name -> (low, high) of a domain where the op is finite
UNARY_FLOAT = {
    "sin": (-3, 3), "cos": (-3, 3), "tan": (-1.4, 1.4), "asin": (-0.99, 0.99), "acos": (-0.99, 0.99),
    "atan": (-5, 5), "sinh": (-3, 3), "cosh": (-3, 3), "asinh": (-5, 5), "acosh": (1.01, 5),
    "atanh": (-0.99, 0.99), "log1p": (-0.9, 5), "expm1": (-3, 3), "log2": (0.1, 9), "log10": (0.1, 9),
    "exp2": (-5, 5), "erf": (-3, 3), "erfinv": (-0.99, 0.99), "reciprocal": (0.2, 4),
}
UNARY_KEEP = ["floor", "ceil", "round", "trunc", "frac", "sign", "sgn"]


@pytest.mark.parametrize("name", list(UNARY_FLOAT) + UNARY_KEEP)
def test_unary_float32_variants_and_special_values(name):
    low, high = UNARY_FLOAT.get(name, (-4, 4))
    fn = getattr(torch, name)
    check_variants(fn, name + "_", make((5, 6), low=low, high=high))
    check(fn, SPECIAL)


@pytest.mark.parametrize("fn", [torch.sin, torch.floor, torch.erfinv, F.gelu, torch.isnan, torch.sign],
                         ids=lambda f: f.__name__)
def test_unary_zero_dim_and_empty(fn):
    check(fn, torch.tensor(0.25))
    check(fn, torch.zeros(0, 3))


@pytest.mark.parametrize("name", list(UNARY_FLOAT) + UNARY_KEEP)
def test_unary_bfloat16(name):
    low, high = UNARY_FLOAT.get(name, (-4, 4))
    check(getattr(torch, name), make((4, 8), torch.bfloat16, low=low, high=high), **BF16_TOL)


@pytest.mark.parametrize("name", ["sin", "exp2", "log2", "erf", "reciprocal", "atan", "sqrt"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool], ids=str)
def test_unary_integer_inputs_promote_to_float(name, dtype):
    check(getattr(torch, name), make((7,), dtype, low=1, high=6))
    with pytest.raises(RuntimeError, match="can't be cast"):
        getattr(make((3,), dtype).to("tpu"), name + "_")()


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc", "sign", "sgn", "abs", "neg"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.uint8], ids=str)
def test_unary_integer_inputs_keep_dtype(name, dtype):
    check(getattr(torch, name), make((9,), dtype, low=-4 if dtype != torch.uint8 else 0, high=5))


def test_unary_dtype_errors():
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch.frac(torch.ones(3, dtype=torch.long, device="tpu"))
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        torch.floor(torch.ones(3, dtype=torch.bool, device="tpu"))
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
        torch.bitwise_not(torch.ones(3, device="tpu"))
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        torch.round(torch.ones(3, dtype=torch.long, device="tpu"), decimals=2)


def test_round_decimals():
    x = make((6, 5), low=-300, high=300)
    for d in (0, 1, 3, -1, -2):
        check(torch.round, x, decimals=d)
    t = x.to("tpu")
    t.round_(decimals=2)
    assert_close(t.cpu(), x.round(decimals=2))
    out = torch.empty(0, device="tpu")
    torch.round(x.to("tpu"), decimals=-1, out=out)
    assert_close(out.cpu(), x.round(decimals=-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool], ids=str)
def test_predicates_and_logical_not(dtype):
    x = SPECIAL.to(dtype) if dtype.is_floating_point else make((8,), dtype, low=-3 if dtype != torch.uint8 else 0)
    for fn in (torch.isnan, torch.isinf, torch.isposinf, torch.isneginf, torch.signbit, torch.logical_not,
               torch.isfinite):
        check(fn, x)
    out = torch.empty(0, dtype=torch.float32, device="tpu")
    torch.logical_not(x.to("tpu"), out=out)
    assert_close(out.cpu(), torch.logical_not(x).float())
    t = x.to("tpu")
    t.logical_not_()
    assert_close(t.cpu(), x.clone().logical_not_())


def test_signbit_of_negative_zero_and_nan():
    x = torch.tensor([-0.0, 0.0, -NAN, NAN, -1.0])
    check(torch.signbit, x)
    check(torch.signbit, x.double())


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.uint8, torch.bool], ids=str)
def test_bitwise_not(dtype):
    check_variants(torch.bitwise_not, "bitwise_not_", make((4, 5), dtype, low=0 if dtype == torch.uint8 else -9,
                                                            high=9))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
def test_nan_to_num(dtype):
    x = SPECIAL.to(dtype) if dtype.is_floating_point else make((5,), dtype)
    check(torch.nan_to_num, x)
    check(torch.nan_to_num, x, nan=1.5, posinf=100.0, neginf=-7.0)
    t = x.to("tpu")
    t.nan_to_num_(nan=2.0)
    assert_close(t.cpu(), x.nan_to_num(nan=2.0))
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.nan_to_num(x.to("tpu"), posinf=3.0, out=out)
    assert_close(out.cpu(), x.nan_to_num(posinf=3.0))


UNARY_GRAD = ["sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p",
              "expm1", "log2", "log10", "exp2", "erf", "erfinv", "reciprocal", "floor", "round", "trunc", "frac",
              "sign"]


@pytest.mark.parametrize("name", UNARY_GRAD)
def test_unary_backward(name):
    low, high = UNARY_FLOAT.get(name, (-4, 4))
    check_grads(getattr(torch, name), make((4, 5), low=low, high=high), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ binary math

BINARY = {
    "pow": torch.pow, "maximum": torch.maximum, "minimum": torch.minimum, "fmax": torch.fmax, "fmin": torch.fmin,
    "atan2": torch.atan2, "remainder": torch.remainder, "fmod": torch.fmod, "copysign": torch.copysign,
    "hypot": torch.hypot, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
}
FLOAT_ONLY = {"hypot"}
NONZERO_DIVISOR = {"remainder", "fmod"}


def binary_operands(name, dtype):
    a = make((4, 5), dtype, 0, low=-4 if dtype != torch.uint8 else 0, high=5)
    b = make((4, 5), dtype, 1, low=-4 if dtype != torch.uint8 else 0, high=5)
    if name == "pow":
        if dtype.is_floating_point:
            a = a.abs() + 0.1
        else:
            b = b.abs()  # negative integer powers are tested separately
    if name in NONZERO_DIVISOR and not dtype.is_floating_point:
        b = torch.where(b == 0, torch.ones_like(b), b)
    return a, b


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8], ids=str)
def test_binary(name, dtype):
    if name in FLOAT_ONLY and not dtype.is_floating_point:
        with pytest.raises(NotImplementedError, match="not implemented for"):
            BINARY[name](*[t.to("tpu") for t in binary_operands(name, dtype)])
        return
    a, b = binary_operands(name, dtype)
    tol = BF16_TOL if dtype == torch.bfloat16 else {}
    inplace = None if name in ("maximum", "minimum", "fmax", "fmin") else name + "_"
    check_variants(BINARY[name], inplace, a, b, **tol)
    if dtype == torch.float32:
        check(BINARY[name], a, b[1:2])  # broadcasting


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_special_values_and_mixed_dtypes(name):
    a = SPECIAL
    b = torch.tensor([1.0, NAN, 2.0, -0.0, 3.0, INF, -INF, -2.0, 0.5, -1.0])
    check(BINARY[name], a, b)
    check(BINARY[name], b, a)
    if name not in FLOAT_ONLY:
        check(BINARY[name], make((6,), torch.int64, low=1, high=4), make((6,), torch.float32, low=1, high=4))
        check(BINARY[name], make((6,), torch.float32, low=1, high=4), torch.tensor(2))  # 0-dim operand
    check(BINARY[name], torch.zeros(0, 2), torch.zeros(1, 2))


@pytest.mark.parametrize("name", ["pow", "maximum", "minimum", "fmax", "fmin", "atan2", "remainder", "fmod",
                                  "copysign", "hypot"])
def test_binary_backward(name):
    a, b = make((3, 4), low=0.5, high=3), make((1, 4), seed=1, low=0.6, high=2.5)
    check_grads(BINARY[name], a, b, rtol=1e-5, atol=1e-5)


def test_pow_overloads():
    x = make((3, 4), low=0.1, high=3)
    for e in (2, 3, 0.5, -1, -0.5, 0, 1, 2.7):
        check_variants(torch.pow, "pow_", x, e)
    check(torch.pow, 2, make((5,), torch.int64, low=0, high=10))  # pow.Scalar
    check(torch.pow, 2.5, make((5,), torch.int64, low=0, high=5))
    check(torch.pow, 1.5, x)
    out = torch.empty(0, device="tpu")
    torch.pow(3.0, x.to("tpu"), out=out)
    assert_close(out.cpu(), torch.pow(3.0, x))
    check(torch.pow, make((5,), torch.int64, low=0, high=5), 0.5)  # float exponent promotes
    check(torch.pow, make((5,), torch.bool), 2)
    check(torch.pow, torch.tensor([NAN, 1.0, -1.0, -1.0, 0.0]), torch.tensor([0.0, NAN, INF, -INF, -1.0]))
    check_grads(lambda t: t.pow(3) + t ** 0.5 + 2 ** t, x)


def test_integer_pow():
    base = torch.tensor([-3, -2, -1, 0, 1, 2, 3, 7])
    check(torch.pow, base, torch.tensor([-1, -3, -2, -2, -1, -2, 2, 3]))
    check(torch.pow, base, torch.tensor([0, 1, 2, 3, 4, 5, 6, 21]))  # 7**21 wraps, as on CPU
    check(torch.pow, base.int(), 5)
    check(torch.pow, torch.tensor([3, 200], dtype=torch.uint8), torch.tensor([7, 2], dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        torch.pow(base.to("tpu"), -1)
    with pytest.raises(NotImplementedError):
        torch.pow(torch.ones(2, dtype=torch.bool, device="tpu"), torch.ones(2, dtype=torch.bool, device="tpu"))


def test_remainder_and_fmod_scalars():
    x = make((4, 5), low=-7, high=7)
    for fn in (torch.remainder, torch.fmod):
        check(fn, x, 2.5)
        check(fn, x, -3)
        check(fn, make((6,), torch.int64, low=-9, high=9), 4)
        t = x.to("tpu")
        getattr(t, fn.__name__ + "_")(1.5)
        assert_close(t.cpu(), fn(x, 1.5))
    check(torch.remainder, 5, make((6,), torch.int64, low=1, high=4))  # remainder.Scalar_Tensor
    check(torch.remainder, -5.5, make((6,), low=1, high=4))


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.uint8, torch.bool], ids=str)
def test_bitwise(op, dtype):
    a, b = make((4, 5), dtype, 0, low=0, high=100), make((4, 5), dtype, 1, low=0, high=100)
    check_variants(getattr(torch, op), op + "_", a, b)
    check(getattr(torch, op), a, 3 if dtype != torch.bool else True)
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
        getattr(torch, op)(torch.ones(2, device="tpu"), torch.ones(2, device="tpu"))


def test_operators_and_shifts():
    a, b = make((4, 5), torch.int32, low=-50, high=50), make((4, 5), torch.int32, 1, low=0, high=8)
    for fn in (lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x ^ y, lambda x, y: x << y,
               lambda x, y: x >> y, lambda x, y: ~x, lambda x, y: x << 3, lambda x, y: x >> 2):
        check(fn, a, b)
    # out-of-range and negative shift counts, signed and unsigned
    check(torch.bitwise_right_shift, torch.tensor([1, -8, 5, -1], dtype=torch.int8),
          torch.tensor([9, 1, -1, 100], dtype=torch.int8))
    check(torch.bitwise_left_shift, torch.tensor([1, -8, 5, 3], dtype=torch.int8),
          torch.tensor([7, 8, -1, 2], dtype=torch.int8))
    check(torch.bitwise_right_shift, torch.tensor([1, 255, 5], dtype=torch.uint8),
          torch.tensor([7, 8, 200], dtype=torch.uint8))
    check_variants(torch.bitwise_left_shift, "bitwise_left_shift_", a, b)
    check_variants(torch.bitwise_right_shift, "bitwise_right_shift_", a, b)
    t = a.to("tpu")
    t <<= 2
    t >>= torch.tensor(1, dtype=torch.int32).to("tpu")
    assert_close(t.cpu(), (a << 2) >> 1)
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
        torch.ones(2, device="tpu") << 1


def test_logical_ops_mixed_dtypes_and_out():
    a, b = make((4, 5), torch.float32, low=-1, high=1).round(), make((5,), torch.int64, 1, low=-1, high=2)
    for fn in (torch.logical_and, torch.logical_or, torch.logical_xor):
        check(fn, a, b)
        out = torch.empty(0, dtype=torch.int32, device="tpu")
        fn(a.to("tpu"), b.to("tpu"), out=out)
        assert_close(out.cpu(), fn(a, b).int())
        t = a.to("tpu")
        getattr(t, fn.__name__ + "_")(b.to("tpu"))
        assert_close(t.cpu(), getattr(a.clone(), fn.__name__ + "_")(b))


# ------------------------------------------------------------ clamp, lerp, addcmul/addcdiv, masked_fill


def test_clamp_scalar_overloads():
    x = torch.cat([make((20,), low=-3, high=3), SPECIAL])
    check_variants(lambda t, out=None: torch.clamp(t, -1, 1.5, out=out), None, x)
    for kw in (dict(min=-1), dict(max=0.5), dict(min=1, max=-1), dict(min=NAN), dict(max=NAN)):
        check(torch.clamp, x, **kw)
    check_variants(torch.clamp_min, "clamp_min_", x, 0.5)
    check_variants(torch.clamp_max, "clamp_max_", x, -0.5)
    check_variants(torch.clamp_min, "clamp_min_", x, NAN)
    t = x.to("tpu")
    t.clamp_(min=-2, max=2)
    assert_close(t.cpu(), x.clamp(-2, 2), equal_nan=True)
    check(torch.clamp, make((5,), torch.int64), min=-1, max=1)
    check(torch.clamp, make((5,), torch.int64), min=0.5)  # promotes to float
    check(torch.clamp_min, make((5,), torch.int64), 1.5)
    check(torch.clamp, make((3, 4), torch.bfloat16), min=-1, max=1)
    with pytest.raises(RuntimeError, match="can't be cast"):
        make((5,), torch.int64).to("tpu").clamp_(min=0.5)
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        torch.clamp(x.to("tpu"))
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        torch.clamp(torch.ones(2, dtype=torch.bool, device="tpu"), min=False, max=True)
    check(torch.clamp, torch.tensor([True, False]), min=0)  # int bound promotes bool


def test_clamp_tensor_overloads():
    x = torch.cat([make((20,), low=-3, high=3), SPECIAL])
    lo, hi = make((30,), seed=1, low=-2, high=0), make((30,), seed=2, low=0, high=2)
    lo[3], hi[5] = NAN, NAN
    check(torch.clamp, x, lo, hi)
    check(torch.clamp, x, lo)
    check(torch.clamp, x, None, hi)
    check(torch.clamp, x.reshape(5, 6), lo[:6], None)  # broadcast bound
    check(torch.clamp, make((5,), torch.int64), torch.tensor([1.5]))  # promotion
    check_variants(torch.clamp_min, "clamp_min_", x, lo)
    check_variants(torch.clamp_max, "clamp_max_", x, hi)
    out = torch.empty(0, device="tpu")
    torch.clamp(x.to("tpu"), lo.to("tpu"), hi.to("tpu"), out=out)
    assert_close(out.cpu(), torch.clamp(x, lo, hi), equal_nan=True)
    t = x.to("tpu")
    t.clamp_(lo.to("tpu"), hi.to("tpu"))
    assert_close(t.cpu(), torch.clamp(x, lo, hi), equal_nan=True)
    check_grads(lambda a, l, h: torch.clamp(a, l, h), make((30,)), make((30,), seed=1, low=-2, high=0),
                make((30,), seed=2, low=0, high=2))
    check_grads(lambda a: torch.clamp(a, -1, 1) + a.clamp_min(0.5) + a.clamp_max(-0.5), make((30,)))


def test_lerp():
    a, b, w = make((4, 5)), make((4, 5), seed=1), make((4, 5), seed=2, low=-0.5, high=1.5)
    check_variants(torch.lerp, "lerp_", a, b, 0.3)
    check_variants(torch.lerp, "lerp_", a, b, 0.9)
    check_variants(torch.lerp, "lerp_", a, b, w)
    check(torch.lerp, a, b[0], w[:, :1])  # broadcasting
    check(torch.lerp, a.bfloat16(), b.bfloat16(), 0.7, **BF16_TOL)
    check(torch.lerp, a, b, torch.tensor(0.25))  # 0-dim CPU weight
    # A Python weight picks its formula on the host: both sides of |w| = 0.5, exact ends, NaN.
    for weight in (0.0, 1.0, 0.5, 0.4999, -0.3, -0.7, 2.0, NAN):
        expected = torch.lerp(a, b, weight)
        exact = dict(rtol=0, atol=0) if weight in (0.0, 1.0) else {}
        assert_close(torch.lerp(a.to("tpu"), b.to("tpu"), weight).cpu(), expected, equal_nan=True, **exact)
    with pytest.raises(RuntimeError, match="expected dtype float for `end` but got dtype double"):
        torch.lerp(a.to("tpu"), b.double().to("tpu"), 0.5)
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        torch.lerp(a.long().to("tpu"), b.long().to("tpu"), 0.5)
    check_grads(lambda x, y, z: torch.lerp(x, y, z), a, b, w)
    check_grads(lambda x, y: torch.lerp(x, y, 0.75), a, b)


@pytest.mark.parametrize("op", [torch.addcmul, torch.addcdiv], ids=lambda f: f.__name__)
def test_addcmul_addcdiv(op):
    s, t1, t2 = make((4, 5)), make((4, 5), seed=1), make((1, 5), seed=2, low=0.5, high=2)
    check_variants(op, op.__name__ + "_", s, t1, t2)
    check(op, s, t1, t2, value=-0.37)
    check(op, s.bfloat16(), t1.bfloat16(), t2.bfloat16(), value=2, **BF16_TOL)
    check(op, make((5,), torch.int64), make((4, 5)), t2)  # mixed dtypes promote
    t = s.to("tpu")
    getattr(t, op.__name__ + "_")(t1.to("tpu"), t2.to("tpu"), value=0.5)
    assert_close(t.cpu(), op(s, t1, t2, value=0.5))
    check_grads(lambda a, b, c: op(a, b, c, value=1.5), s, t1, t2)
    if op is torch.addcmul:
        check(op, make((5,), torch.int64), make((5,), torch.int64, 1), make((5,), torch.int64, 2), value=3)
    else:
        with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer supported"):
            op(*[make((5,), torch.int64).to("tpu")] * 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16], ids=str)
def test_masked_fill(dtype):
    x, mask = make((4, 5), dtype), make((4, 5), torch.bool, seed=3)
    check(lambda a, m: a.masked_fill(m, 1.7), x, mask)
    check(lambda a, m: a.masked_fill(m, 0), x, mask[0])  # broadcast mask
    check(lambda a, m: a.masked_fill(m, torch.tensor(2.5)), x, mask)  # 0-dim CPU value
    check(lambda a, m, v: a.masked_fill(m, v), x, mask, torch.tensor(3, dtype=dtype))  # 0-dim tpu value
    t = x.to("tpu")
    t.masked_fill_(mask.to("tpu"), -1)
    assert_close(t.cpu(), x.masked_fill(mask, -1))
    t.masked_fill_(mask.to("tpu")[:, 0:1], torch.tensor(5).to("tpu"))
    assert_close(t.cpu(), x.masked_fill(mask, -1).masked_fill(mask[:, 0:1], 5))


def test_masked_fill_errors_and_grad():
    x = make((4, 5))
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        x.to("tpu").masked_fill(torch.ones(4, 5, dtype=torch.int64, device="tpu"), 1)
    with pytest.raises(RuntimeError, match="0-dimensional value tensor"):
        x.to("tpu").masked_fill(torch.ones(4, 5, dtype=torch.bool, device="tpu"), torch.ones(1, device="tpu"))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x[0].to("tpu").masked_fill_(torch.ones(4, 5, dtype=torch.bool, device="tpu"), 1.0)
    mask = make((4, 5), torch.bool, seed=3)
    check_grads(lambda a: a.masked_fill(mask.to(a.device), 0.0) * a, x)


# ------------------------------------------------------------ activations

ACTIVATIONS = {
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "mish": F.mish,
    "hardtanh": F.hardtanh, "hardtanh_range": lambda x: F.hardtanh(x, -0.5, 2.0),
    "leaky_relu": F.leaky_relu, "leaky_relu_slope": lambda x: F.leaky_relu(x, 0.2), "elu": F.elu,
    "elu_params": lambda x: F.elu(x, alpha=0.7), "selu": F.selu, "celu": lambda x: F.celu(x, alpha=1.3),
    "softplus": F.softplus, "softplus_params": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "logit": lambda x: torch.logit(x * 0.3 + 0.5), "logit_eps": lambda x: torch.logit(x * 0.4 + 0.5, eps=0.1),
    "relu6": F.relu6,
}
INPLACE_ACTIVATIONS = {
    "gelu": lambda x: x.gelu_() if hasattr(x, "gelu_") else torch.ops.aten.gelu_(x),
    "silu": lambda x: F.silu(x, inplace=True), "hardtanh": lambda x: F.hardtanh(x, inplace=True),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1, inplace=True), "elu": lambda x: F.elu(x, inplace=True),
    "hardswish": lambda x: F.hardswish(x, inplace=True), "hardsigmoid": lambda x: F.hardsigmoid(x, inplace=True),
    "mish": lambda x: F.mish(x, inplace=True), "logit": lambda x: x.mul_(0.3).add_(0.5).logit_(),
}


def activation_input(dtype=torch.float32):
    x = make((6, 7), dtype, low=-5, high=5)
    x[0, :4] = torch.tensor([-3.0, 3.0, 0.0, 30.0])  # kinks of hardswish/hardsigmoid, softplus threshold
    return x


def check_special_values(fn):
    special = torch.tensor([NAN, INF, -INF])
    # CPU's reference one element at a time: its vectorized kernels differ by ISA on
    # special values (with AVX-512, gelu(inf) is nan; with AVX2 and unvectorized, inf).
    expected = torch.cat([fn(special[i:i + 1]) for i in range(len(special))])
    assert_close(fn(special.to("tpu")).cpu(), expected, equal_nan=True)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_forward_and_backward(name):
    fn = ACTIVATIONS[name]
    check(fn, activation_input())
    check(fn, activation_input(torch.bfloat16), **BF16_TOL)
    check_special_values(fn)
    check_grads(fn, activation_input(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(INPLACE_ACTIVATIONS))
def test_activation_inplace(name):
    fn = INPLACE_ACTIVATIONS[name]
    x = activation_input()
    t = x.to("tpu")
    fn(t)
    expected = x.clone()
    fn(expected)
    assert_close(t.cpu(), expected, equal_nan=True)
    # autograd through the in-place form (the backward uses the result)
    if name in ("silu", "hardtanh", "leaky_relu", "elu", "hardswish", "hardsigmoid", "mish"):
        check_grads(lambda a: fn(a * 1.0), x, rtol=1e-5, atol=1e-5)


def test_activation_out_variants():
    x = activation_input()
    for op, args in ((torch.ops.aten.gelu.out, ()), (torch.ops.aten.silu.out, ()),
                     (torch.ops.aten.softplus.out, (2.0, 5.0)), (torch.ops.aten.elu.out, (1.0, 1.0, 1.0)),
                     (torch.ops.aten.leaky_relu.out, (0.3,)), (torch.ops.aten.hardswish.out, ()),
                     (torch.ops.aten.hardsigmoid.out, ()), (torch.ops.aten.mish.out, ()),
                     (torch.ops.aten.hardtanh.out, (-1.0, 1.0))):
        out = torch.empty(0, device="tpu")
        op(x.to("tpu"), *args, out=out)
        assert_close(out.cpu(), op(x, *args, out=torch.empty(0)))


def test_activation_backward_ops_directly():
    g, x = make((4, 5), seed=1), activation_input()[:4, :5]
    y = torch.sigmoid(x)
    aten = torch.ops.aten
    cases = [
        (aten.gelu_backward, (g, x), dict(approximate="tanh")), (aten.gelu_backward, (g, x), {}),
        (aten.silu_backward, (g, x), {}), (aten.sigmoid_backward, (g, y), {}), (aten.tanh_backward, (g, y), {}),
        (aten.hardtanh_backward, (g, x, -1.0, 1.0), {}), (aten.leaky_relu_backward, (g, x, 0.1, False), {}),
        (aten.elu_backward, (g, 1.0, 1.0, 1.0, False, x), {}), (aten.elu_backward, (g, 1.0, 1.0, 1.0, True, y), {}),
        (aten.softplus_backward, (g, x, 1.0, 20.0), {}), (aten.hardswish_backward, (g, x), {}),
        (aten.hardsigmoid_backward, (g, x), {}), (aten.logit_backward, (g, y), {}),
        (aten.logit_backward, (g, y), dict(eps=0.3)), (aten.mish_backward, (g, x), {}),
    ]
    for op, args, kw in cases:
        check(op, *args, **kw)
    with pytest.raises(RuntimeError, match="negative slope"):
        aten.leaky_relu_backward(g.to("tpu"), x.to("tpu"), -0.1, True)
    with pytest.raises(RuntimeError, match="negative slope"):
        aten.elu_backward(g.to("tpu"), -1.0, 1.0, 1.0, True, x.to("tpu"))


def test_activation_errors():
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        torch.ops.aten.gelu(torch.ones(2, device="tpu"), approximate="fast")
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.silu(torch.ones(2, dtype=torch.long, device="tpu"))
    with pytest.raises(RuntimeError, match="Bool inputs not supported for hardtanh"):
        F.hardtanh(torch.ones(2, dtype=torch.bool, device="tpu"))
    check(F.hardtanh, make((5,), torch.int64))


def test_changing_scalar_parameters_do_not_recompile():
    x = activation_input().to("tpu")
    F.leaky_relu(x, 0.1).cpu()
    torch.clamp(x, -1.0, 1.0).cpu()
    torch.lerp(x, x * 2, 0.1).cpu()
    before = torch_tpu.metrics()["compiles"]
    for i in range(5):
        F.leaky_relu(x, 0.01 * (i + 2)).cpu()
        torch.clamp(x, -0.1 * i, 2.0 + i).cpu()
        torch.lerp(x, x * 2, 0.05 * i).cpu()
    assert torch_tpu.metrics()["compiles"] - before <= 1  # only x * 2 the first time, if at all


# ------------------------------------------------------------ optimizers


def run_optimizer(device, make_opt, steps=3):
    torch.manual_seed(0)
    params = [torch.randn(5, 4), torch.randn(4), torch.randn(3, 2, 2)]
    grads = [[torch.randn_like(p) for p in params] for _ in range(steps)]
    params = [p.to(device).requires_grad_() for p in params]
    opt = make_opt(params)
    for step in range(steps):
        for p, g in zip(params, grads[step]):
            p.grad = g.to(device)
        opt.step()
    return [p.detach().cpu() for p in params]


OPTIMIZERS = {
    "sgd_momentum": lambda p, fe: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=fe),
    "sgd_nesterov_wd": lambda p, fe: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                                                     foreach=fe),
    "sgd_dampening": lambda p, fe: torch.optim.SGD(p, lr=0.05, momentum=0.5, dampening=0.1, foreach=fe),
    "adam": lambda p, fe: torch.optim.Adam(p, lr=0.01, foreach=fe),
    "adam_amsgrad_wd": lambda p, fe: torch.optim.Adam(p, lr=0.01, amsgrad=True, weight_decay=0.1, foreach=fe),
    "adamw": lambda p, fe: torch.optim.AdamW(p, lr=0.01, weight_decay=0.05, foreach=fe),
    "adamw_amsgrad": lambda p, fe: torch.optim.AdamW(p, lr=0.01, amsgrad=True, foreach=fe),
}


@pytest.mark.parametrize("foreach", [False, True], ids=["for_loop", "foreach"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps_match_cpu(name, foreach):
    make_opt = lambda p: OPTIMIZERS[name](p, foreach)  # noqa: E731
    expected = run_optimizer("cpu", make_opt)
    got = run_optimizer("tpu", make_opt)
    for g, e in zip(got, expected):
        assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_zero_tensors_like_cpu():
    # sgn's gradient for real inputs is a ZeroTensor (no memory): same on tpu as on CPU.
    x = torch.randn(5)
    grads = []
    for device in ("cpu", "tpu"):
        t = x.to(device, copy=True).requires_grad_()
        (t.sgn() * 2).sum().backward()
        grads.append(t.grad)
    assert grads[0]._is_zerotensor() and grads[1]._is_zerotensor()
    torch.testing.assert_close(grads[1].cpu(), grads[0])
    z = torch._efficientzerotensor(3, 2, device="tpu")
    assert z.device.type == "tpu" and z._is_zerotensor()
    torch.testing.assert_close((z + 1).cpu(), torch.ones(3, 2))
    torch.testing.assert_close((z * torch.full((3, 2), 7.0, device="tpu")).cpu(), torch.zeros(3, 2))
    assert z.sum().item() == 0.0
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):
        z.add_(1)


@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod", "div_trunc", "floor_divide_scalar",
                                "remainder_scalar", "floor_divide_"])
def test_debug_mode_raises_for_integer_division_by_zero_as_cpu_does(op):
    ops = {
        "floor_divide": lambda a, b: a // b,
        "remainder": lambda a, b: a % b,
        "fmod": lambda a, b: a.fmod(b),
        "div_trunc": lambda a, b: a.div(b, rounding_mode="trunc"),
        "floor_divide_scalar": lambda a, b: a // 0,
        "remainder_scalar": lambda a, b: a.remainder(0),
        "floor_divide_": lambda a, b: a.floor_divide_(b),
    }
    a, b = torch.tensor([7, -7, 2]), torch.tensor([2, 2, 0])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        ops[op](a.clone(), b)
    ta = a.to("tpu")
    with torch_tpu.eager_mode("debug"), pytest.raises(RuntimeError, match=r"^ZeroDivisionError \(torch_tpu debug mode"):
        ops[op](ta, b.to("tpu"))
    assert_close(ta.cpu(), a)  # nothing written
    with torch_tpu.eager_mode("debug"):  # float division by zero is inf, as on CPU
        assert_close((ta.float() // b.to("tpu")).cpu(), a.float() // b)


def test_debug_mode_integer_division_without_zero_divisors_runs():
    a, b = torch.tensor([7, -7, 2]), torch.tensor([2, 3, -3])
    ta, tb = a.to("tpu"), b.to("tpu")
    with torch_tpu.eager_mode("debug"):
        assert_close((ta // tb).cpu(), a // b)
        assert_close((ta % tb).cpu(), a % b)
        assert_close(ta.fmod(tb).cpu(), a.fmod(b))
        assert_close((ta // 2).cpu(), a // 2)


LAYOUTS = {
    "transposed": lambda d: torch.randn(4, 8, device=d).t(),
    "permuted 3d": lambda d: torch.randn(3, 4, 5, device=d).permute(2, 0, 1),
    "expanded": lambda d: torch.randn(8, 1, device=d).expand(8, 4),
    "sliced": lambda d: torch.randn(8, 8, device=d)[:, ::2],
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_results_are_laid_out_as_on_cpu(layout):
    """A new elementwise result takes the dimension order of its inputs' strides, as CPU's
    TensorIterator gives it: code that views a transposed result (and torch.compile, whose
    fake tensors assume CPU's layout) depends on it."""
    torch.manual_seed(0)
    x = LAYOUTS[layout]("cpu")
    t = to_tpu(x)
    contiguous = torch.randn(x.shape)
    cases = {
        "x + 1": lambda a, c: a + 1,
        "x * x": lambda a, c: a * a,
        "relu": lambda a, c: a.relu(),
        "c + x": lambda a, c: c + a,
        "x + c": lambda a, c: a + c,
        "where": lambda a, c: torch.where(c > 0, a, c),
    }
    for name, fn in cases.items():
        expected, got = fn(x, contiguous), fn(t, to_tpu(contiguous))
        assert got.stride() == expected.stride(), (name, got.stride(), expected.stride())
        assert_close(got.cpu(), expected)
    # the transposed result of a transposed input views back without a copy, as on CPU
    if layout == "transposed":
        assert_close((t + 1).t().view(-1).cpu(), (x + 1).t().view(-1))


A = torch.ops.aten
GRADIENTS = {  # (grad, x) -> result; each of these ATen ops or its meta kernel iterates x first
    "threshold_backward": lambda g, x: A.threshold_backward(g, x, 0.0),
    "softplus_backward": lambda g, x: A.softplus_backward(g, x, 1, 20),
    "hardtanh_backward": lambda g, x: A.hardtanh_backward(g, x, -1, 1),
    "elu_backward": lambda g, x: A.elu_backward(g, 1.0, 1, 1, False, x),
    "leaky_relu_backward": lambda g, x: A.leaky_relu_backward(g, x, 0.01, False),
    "hardsigmoid_backward": lambda g, x: A.hardsigmoid_backward(g, x),
    "hardswish_backward": lambda g, x: A.hardswish_backward(g, x),
    "logit_backward": lambda g, x: A.logit_backward(g, x.sigmoid()),
    "gelu_backward": lambda g, x: A.gelu_backward(g, x),  # grad first: its layout
}


@pytest.mark.parametrize("op", GRADIENTS)
def test_backward_results_are_laid_out_as_torch_compile_expects(op):
    """A gradient of a transposed grad and a contiguous x is laid out as PyTorch's meta
    kernel lays it out (CPU's differs for some): a compiled backward views these results
    as its fake tensors, made by the meta kernels, say."""
    torch.manual_seed(0)
    grad, x = torch.randn(2, 32, 16).transpose(1, 2), torch.randn(2, 16, 32)
    fn = GRADIENTS[op]
    got = fn(to_tpu(grad), to_tpu(x))
    assert got.stride() == fn(grad.to("meta"), x.to("meta")).stride()
    assert_close(got.cpu(), fn(grad, x))


LAYER_NORM_LAYOUTS = {
    "transposed grad": (lambda: torch.randn(2, 64, 13).transpose(1, 2), lambda: torch.randn(2, 13, 64)),
    # XLNet's: both permuted alike; the meta kernel's result is contiguous, not grad's layout
    "permuted grad and input": (lambda: torch.randn(13, 2, 64).transpose(0, 1),
                                lambda: torch.randn(13, 2, 64).transpose(0, 1)),
    "expanded grad": (lambda: torch.randn(1, 1, 64).expand(2, 13, 64), lambda: torch.randn(13, 2, 64).transpose(0, 1)),
    "channels-last": (lambda: torch.randn(2, 5, 3, 64).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
                      .permute(0, 2, 3, 1), lambda: torch.randn(2, 5, 3, 64)),
}


@pytest.mark.parametrize("layouts", LAYER_NORM_LAYOUTS)
@pytest.mark.parametrize("dtype, weight", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True)])
def test_layer_norm_backward_grad_input_is_laid_out_as_torch_compile_expects(layouts, dtype, weight):
    # grad_input is laid out as PyTorch's meta kernel lays it out (CPU's is always contiguous):
    # a compiled backward views it as its fake tensors say
    torch.manual_seed(0)
    grad, x = (make().to(dtype) for make in LAYER_NORM_LAYOUTS[layouts])
    w, b = (torch.randn(64, dtype=dtype), torch.randn(64, dtype=dtype)) if weight else (None, None)
    _, mean, rstd = A.native_layer_norm(x, [64], w, b, 1e-5)
    args = (grad, x, [64], mean, rstd, w, b, [True, weight, weight])
    expected = A.native_layer_norm_backward(*args)
    meta = A.native_layer_norm_backward(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
    got = A.native_layer_norm_backward(*[to_tpu(a) if isinstance(a, torch.Tensor) else a for a in args])
    assert got[0].stride() == meta[0].stride()
    for g, e in zip(got, expected):
        if e is not None:
            assert_close(g.cpu(), e, **({"rtol": 5e-2, "atol": 1e-1} if dtype == torch.bfloat16 else {}))  # bf16 sums


def test_a_transposed_result_backward_matches_cpu():
    x = torch.randn(4, 8, requires_grad=True)
    t = x.detach().to("tpu").requires_grad_()
    for a in (x, t):
        y = (a.t() * 2).exp()
        (y.t().reshape(-1) * torch.arange(32.0, device=a.device)).sum().backward()
    assert_close(t.grad.cpu(), x.grad)


def test_fused_integer_division_by_a_folded_zero_does_not_kill_the_process():
    # a - a folds to a constant zero in the fused graph; XLA's StableHLO folder then divided
    # by it on the host (SIGFPE). Run in a child so a crash fails this test, not the suite.
    code = """
import torch, torch_tpu
a = torch.tensor([7, -7, 2], dtype=torch.int32, device="tpu")
with torch_tpu.eager_mode("fused"):
    z = a - a
    outs = [a // z, a % z, a.fmod(z), a.div(z, rounding_mode="trunc"), z // z, (a * 0).remainder(z)]
    torch.tpu.synchronize()
print([tuple(o.cpu().shape) for o in outs])
"""
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str([(3,)] * 6)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_bool_times_inf_and_over_zero_give_nan_where_false_as_on_cpu(mode):
    # XLA's simplifier rewrites convert(pred) * y to select(pred, y, 0), losing 0 * inf = NaN.
    a = torch.tensor([False, True, False])
    ops = [lambda x: x / 0, lambda x: x * float("inf"), lambda x: x.float() * float("-inf"),
           lambda x: x.float() / torch.zeros((), device=x.device), lambda x: x.to(torch.complex64) * float("inf")]
    with torch_tpu.eager_mode(mode):
        for op in ops:
            assert_close(op(a.to("tpu")).cpu(), op(a), equal_nan=True)


def test_bool_floor_division_of_mismatched_shapes_names_the_shapes_as_cpu_does():
    a, b = torch.ones(5, 2, dtype=torch.bool), torch.ones(3, dtype=torch.bool)
    with pytest.raises(RuntimeError) as cpu:
        a // b
    with pytest.raises(RuntimeError) as tpu:
        a.to("tpu") // b.to("tpu")
    assert str(tpu.value) == str(cpu.value)
    with pytest.raises(NotImplementedError, match="div_floor"):  # same shapes: the Bool is what is named
        a.to("tpu") // a.to("tpu")


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", [torch.remainder, torch.fmod, torch.floor_divide,
                                lambda a, b: torch.div(a, b, rounding_mode="trunc")])
def test_rounding_ops_round_a_wider_operand_to_the_half_type_first(mode, dtype, op):
    # Found by the fuzzer: CPU casts both operands to the common (half) type before these
    # discontinuous ops; float32 1.7801 % bfloat16 1.78125 is 0 there, not 1.7801.
    wide = torch.tensor(1.7801474, dtype=torch.float32)
    half = torch.tensor([1.78125, -0.5, 3.0], dtype=torch.float32).to(dtype)
    with torch_tpu.eager_mode(mode):
        for a, b in ((wide, half), (half, wide), (half * 3, wide)):
            assert_close(op(a.to("tpu"), b.to("tpu")).cpu(), op(a, b), rtol=0, atol=0)
            assert_close(op(a.to("tpu") if a.dim() else a, b.to("tpu") if b.dim() else b).cpu(), op(a, b),
                         rtol=0, atol=0)  # a CPU 0-dim operand too
