"""Reductions and nn ops against CPU PyTorch (TORCH_TPU_FALLBACK=error):
forward, out=/in-place variants, backward, NaN and empty edge cases."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_tpu
from support import check_grads, make, to_tpu

NAN = float("nan")
INF = float("inf")


def tol(dtype):
    return dict(rtol=2e-2, atol=2e-2) if dtype in (torch.bfloat16, torch.float16) else {}


def compare(got, expected, **kw):
    if isinstance(expected, torch.Tensor):
        assert got.device.type == "tpu"
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        assert got.shape == expected.shape, (got.shape, expected.shape)
        assert_close(got.cpu(), expected, equal_nan=True, **kw)
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            compare(g, e, **kw)
    else:
        assert got == expected


def check(fn, *cpu_args, **kw):
    expected = fn(*cpu_args)
    got = fn(*[to_tpu(a) for a in cpu_args])
    compare(got, expected, **kw)
    return got


def grads(fn, *cpu_args, wrt=None, **kw):
    """Compares d(sum(fn(args) * r))/d(args) on CPU and tpu, for the args at
    positions `wrt` (default: every floating tensor)."""
    results = []
    for device in ("cpu", "tpu"):
        args = [a.detach().to(device).requires_grad_(a.is_floating_point() and (wrt is None or i in wrt))
                if isinstance(a, torch.Tensor) else a for i, a in enumerate(cpu_args)]
        out = fn(*args)
        r = make(out.shape, out.dtype, seed=7).to(device)
        (out * r).sum().backward()
        results.append([a.grad.cpu() for a in args if isinstance(a, torch.Tensor) and a.grad is not None])
    assert len(results[0]) == len(results[1]) > 0
    for g_cpu, g_tpu in zip(*results):
        assert_close(g_tpu, g_cpu, **kw)


# ------------------------------------------------------------ reductions

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool], ids=str)
def test_prod(dtype):
    x = make((3, 4, 5), dtype, low=-2, high=3) if dtype != torch.float32 else make((3, 4, 5), low=0.5, high=1.5)
    check(torch.prod, x, **tol(dtype))
    check(lambda t: torch.prod(t, 1), x, **tol(dtype))
    check(lambda t: torch.prod(t, -1, keepdim=True), x, **tol(dtype))
    check(lambda t: torch.prod(t, 0, dtype=torch.float64), x)
    check(lambda t: torch.prod(t, 0), torch.zeros(0, 3, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_max_min_amax_amin(dtype):
    x = make((4, 6, 5), dtype, low=0, high=4)  # small ints: ties, first index must win
    for op in (torch.max, torch.min):
        check(op, x)
        check(lambda t: op(t, 1), x)
        check(lambda t: op(t, -1, keepdim=True), x)
    for op in (torch.amax, torch.amin):
        check(op, x)
        check(lambda t: op(t, (0, 2)), x)
        check(lambda t: op(t, 1, keepdim=True), x)
    for op in (torch.argmax, torch.argmin):
        if dtype == torch.bool:
            with pytest.raises(RuntimeError, match="does not support bool input"):
                op(x.to("tpu"))
            continue
        check(op, x)
        check(lambda t: op(t, 1), x)
        check(lambda t: op(t, 0, keepdim=True), x)
        check(lambda t: op(t, keepdim=True), x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.uint8], ids=str)
def test_extrema_other_dtypes(dtype):
    x = make((4, 6), dtype, low=0, high=4)
    check(lambda t: torch.max(t, 1), x)
    check(torch.amin, x)
    check(lambda t: torch.argmin(t, 0), x)


def test_extrema_nan_and_zero_dim():
    x = torch.tensor([[1.0, NAN, 3.0, NAN], [4.0, 2.0, -INF, 0.0], [INF, INF, 1.0, 1.0]])
    for op in (torch.max, torch.min, torch.argmax, torch.argmin, torch.amax, torch.amin):
        check(op, x)
        check(lambda t: op(t, 1), x)
        check(lambda t: op(t, 0), x)
    s = torch.tensor(2.5)
    for op in (torch.max, torch.argmax, torch.amin):
        check(op, s)
        check(lambda t: op(t, 0), s)
        check(lambda t: op(t, -1, keepdim=True), s)
    check(torch.aminmax, x)
    check(lambda t: torch.aminmax(t, dim=1, keepdim=True), x)
    check(torch.aminmax, make((5, 3), torch.int32))


def test_accumulate_checks_the_dtype_before_the_dims():
    # As ATen: a mean of bools over a dim that does not exist is the dtype error, not an IndexError.
    x = torch.ones(3, dtype=torch.bool)
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
            x.to(device).mean(1)
    with pytest.raises(IndexError):
        torch.ones(3, device="tpu").sum(1)


def test_extrema_errors_on_empty():
    e = torch.zeros(0, 3, device="tpu")
    with pytest.raises(RuntimeError, match="Expected reduction dim to be specified"):
        e.max()
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        e.max(0)
    with pytest.raises(IndexError, match="amax.*non-zero size"):
        e.amax(0)
    with pytest.raises(IndexError, match="argmax"):
        e.argmax()
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.ones(3, device="tpu").max(2)
    check(lambda t: t.amax(1), torch.zeros(0, 3))  # reducing a non-empty dim of an empty tensor is fine
    check(lambda t: t.argmax(1), torch.zeros(0, 3))


def test_extrema_out_variants():
    x = make((4, 5))
    v, i = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.max(x.to("tpu"), 1, out=(v, i))
    ev, ei = torch.max(x, 1)
    compare((v, i), (ev, ei))
    out = torch.empty(0, device="tpu")
    torch.amin(x.to("tpu"), 0, out=out)
    compare(out, torch.amin(x, 0))
    out = torch.empty(0, dtype=torch.long, device="tpu")
    torch.argmax(x.to("tpu"), 1, out=out)
    compare(out, torch.argmax(x, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_var_std(dtype):
    x = make((4, 5, 6), dtype)
    for op in (torch.var, torch.std, torch.var_mean, torch.std_mean):
        check(lambda t: op(t, 1), x, **tol(dtype))
        if dtype == torch.float32:
            check(op, x)
            check(lambda t: op(t, (0, 2), keepdim=True, correction=0), x)
            check(lambda t: op(t, -1, unbiased=False), x)
            check(lambda t: op(t, 1, correction=2.5), x)
    check(lambda t: torch.var(t, 0), make((1, 3)))  # N - correction == 0: inf/NaN as ATen
    out = torch.empty(0, device="tpu")
    torch.std(x.float().to("tpu"), 1, out=out)
    compare(out, torch.std(x.float(), 1))
    with pytest.raises(RuntimeError, match="floating point"):
        torch.var(torch.arange(3).to("tpu"))


def test_logsumexp():
    x = make((4, 7))
    check(lambda t: torch.logsumexp(t, 1), x)
    check(lambda t: torch.logsumexp(t, (0, 1), keepdim=True), x)
    check(lambda t: torch.logsumexp(t, 0), torch.tensor([[1.0, -INF], [INF, -INF], [NAN, 0.0]]))
    check(lambda t: torch.logsumexp(t, 0), torch.tensor([1000.0, 1000.5]))  # stabilised
    check(lambda t: torch.logsumexp(t, 0), make((5,), torch.int64))  # ints promote to float
    check(lambda t: torch.logsumexp(t, 0), torch.zeros(0))
    check(lambda t: torch.logsumexp(t, 1), make((3, 4), torch.bfloat16), **tol(torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8, torch.bool], ids=str)
def test_all_any(dtype):
    x = make((3, 4, 5), dtype, low=0, high=2)
    for op in (torch.all, torch.any):
        check(op, x)
        check(lambda t: op(t, 1), x)
        check(lambda t: op(t, -1, keepdim=True), x)
        check(lambda t: op(t, (0, 2)), x)
        check(op, torch.zeros(0, 2, dtype=dtype))
        check(lambda t: op(t, 0), torch.zeros(0, 2, dtype=dtype))
    check(torch.any, torch.tensor([0.0, NAN]))
    out = torch.empty(0, dtype=torch.bool, device="tpu")
    torch.all(x.to("tpu"), 1, out=out)
    compare(out, torch.all(x, 1).bool())


@pytest.mark.parametrize("ord", [2, 1, INF, -INF, 0, 3, 0.5, -1])
def test_vector_norm(ord):
    x = make((4, 5))
    x[0, 0] = 0
    check(lambda t: torch.linalg.vector_norm(t, ord), x)
    check(lambda t: torch.linalg.vector_norm(t, ord, dim=1, keepdim=True), x)
    check(lambda t: torch.linalg.vector_norm(t, ord, dim=(0, 1)), x)
    check(lambda t: torch.norm(t, ord, dim=0), x)
    check(lambda t: torch.linalg.vector_norm(t, ord, dim=1), make((3, 8), torch.bfloat16), **tol(torch.bfloat16))


def test_norm_overloads_and_errors():
    x = make((3, 4))
    check(torch.norm, x)
    check(lambda t: t.norm(1), x)
    check(lambda t: torch.norm(t, dim=1, dtype=torch.float64), x)
    check(lambda t: torch.linalg.vector_norm(t, dtype=torch.float64), x)
    check(lambda t: torch.linalg.vector_norm(t), torch.zeros(0, 3))
    with pytest.raises(RuntimeError, match="floating point or complex"):
        torch.linalg.vector_norm(torch.arange(3).to("tpu"))
    with pytest.raises(RuntimeError, match="cannot compute the inf norm on an empty tensor"):
        torch.linalg.vector_norm(torch.zeros(0, device="tpu"), INF)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.bfloat16], ids=str)
def test_cumsum_cumprod(dtype):
    x = make((5, 37), dtype, low=-2, high=3) if dtype != torch.float32 else make((5, 37), low=0.8, high=1.2)
    for op in (torch.cumsum, torch.cumprod):
        check(lambda t: op(t, 1), x, **tol(dtype))
        if dtype == torch.float32:
            check(lambda t: op(t, 0), x)
            check(lambda t: op(t, -1, dtype=torch.float64), x)
    check(lambda t: torch.cumsum(t, 0), torch.tensor(3.0))
    check(lambda t: torch.cumsum(t, 1), torch.zeros(2, 0))
    t = make((4, 6)).to("tpu")
    t.cumsum_(1)
    assert_close(t.cpu(), make((4, 6)).cumsum(1))


# Long reductions: XLA:CPU's own split of them is off, and torch_tpu splits
# them (32-element windows, then the partial results) except for a row of at
# most ir::kLongestUnsplitReduction elements, which stays one fused reduction.
# Each shape below takes one of those paths; sums are checked against float64
# tighter than float32 summation in one sequential chain would manage.
LONG_REDUCTIONS = [
    ((8, 4096), (1,)),          # a row under the limit: one reduction
    ((2, 16384), (1,)),         # exactly the limit
    ((2, 100003), (1,)),        # a row over it, not a multiple of 32
    ((300, 700), (0, 1)),       # the whole tensor
    ((5000, 8), (0,)),          # a column
    ((3, 2000, 5), (1,)),       # a middle dim
    ((64, 3, 100), (0, 2)),     # dims that are not trailing
    ((1000003,), (0,)),         # 1-D, split twice
]


@pytest.mark.parametrize("shape,dims", LONG_REDUCTIONS, ids=str)
def test_long_reductions_stay_accurate(shape, dims):
    x = torch.rand(shape, generator=torch.Generator().manual_seed(3)) + 0.5
    t = x.to("tpu")
    exact = x.double().sum(dims)
    assert_close(t.sum(dims).cpu().double(), exact, rtol=2e-6, atol=0)
    assert_close(t.mean(dims).cpu().double(), exact / math.prod(shape[d] for d in dims), rtol=2e-6, atol=0)
    # Max and min see the padding of a split (its init value), never pick it.
    assert_close(t.amax(dims).cpu(), x.amax(dims), rtol=0, atol=0)
    assert_close((-t).amax(dims).cpu(), (-x).amax(dims), rtol=0, atol=0)
    ints = (x * 100).to(torch.int32)
    assert torch.equal(ints.to("tpu").sum(dims).cpu(), ints.sum(dims))
    flags = x > 0.501
    assert torch.equal(flags.to("tpu").all(dims[0]).cpu(), flags.all(dims[0]))
    assert torch.equal((~flags).to("tpu").any(dims[0]).cpu(), (~flags).any(dims[0]))


def test_long_reductions_backward():
    x = make((3, 200, 40), low=0.5, high=2)
    grads(lambda t: torch.softmax(t, 2).sum(1), x)
    grads(lambda t: torch.nn.functional.layer_norm(t.transpose(1, 2), (200,)), x)
    grads(lambda t: t.sum(1) + t.amax(1), x)


def test_reduction_backward():
    x = make((4, 5), low=0.5, high=2)
    grads(lambda t: t.prod(1), x)
    grads(lambda t: t.amax(1), x)
    grads(lambda t: t.var(1), x)
    grads(lambda t: torch.logsumexp(t, 1), x)


def test_reduction_backward_through_composites():
    # These backward formulas use masked_fill_, pow, flip, isnan or scatter.
    x = make((4, 5), low=0.5, high=2)
    grads(lambda t: t.max(0).values, x)
    grads(lambda t: t.min(), x)
    grads(lambda t: t.std(0, keepdim=True), x)
    grads(lambda t: torch.linalg.vector_norm(t, 2, dim=1), x)
    grads(lambda t: torch.linalg.vector_norm(t, 3, dim=0), x)
    grads(lambda t: torch.cumsum(t, 1), x)


# ------------------------------------------------------------ softmax

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_softmax(dtype):
    x = make((4, 5, 6), dtype)
    for fn in (F.softmax, F.log_softmax):
        check(lambda t: fn(t, 1), x, **tol(dtype))
        check(lambda t: fn(t, -1), x, **tol(dtype))
        check(lambda t: fn(t, 0, dtype=torch.float32), x, **tol(dtype))
    check(lambda t: F.softmax(t, 0), torch.tensor([1000.0, 0.0, -INF]))  # stable
    check(lambda t: F.log_softmax(t, 0), torch.tensor([1000.0, 999.0]))
    check(lambda t: F.softmax(t, 0), torch.tensor(1.5))
    half = make((3, 4), torch.bfloat16).to("tpu")
    got = torch.ops.aten._softmax(half, 1, True)
    assert got.dtype == torch.float32
    assert_close(got.cpu(), torch.softmax(half.cpu().float(), 1))


def test_softmax_nan_and_infinite_rows():
    # The shift before exp may skip a NaN (it poisons the row's sum anyway): rows with
    # NaN, all -inf, +inf or a -inf entry come out as on CPU.
    nan = float("nan")
    x = torch.tensor([[1.0, nan, 2.0], [-INF, -INF, -INF], [INF, 1.0, 2.0], [1.0, 2.0, 3.0], [-INF, 0.0, 1.0]])
    for fn in (lambda t: F.softmax(t, 1), lambda t: F.log_softmax(t, 1), lambda t: torch.logsumexp(t, 1)):
        assert_close(fn(x.to("tpu")).cpu(), fn(x), equal_nan=True)


def test_softmax_backward():
    x = make((4, 7))
    grads(lambda t: F.softmax(t, 1), x)
    grads(lambda t: F.log_softmax(t, 0), x)
    grads(lambda t: F.log_softmax(t, -1), make((2, 3, 4)))
    g, o = make((3, 4), seed=1), torch.softmax(make((3, 4)), 1)
    check(lambda a, b: torch.ops.aten._softmax_backward_data(a, b, 1, torch.float32), g, o)
    check(lambda a, b: torch.ops.aten._log_softmax_backward_data(a, b, 1, torch.float32), g, o.log())


# ------------------------------------------------------------ layer norm

@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_layer_norm(affine, dtype):
    x = make((3, 4, 8), dtype)
    w, b = (make((4, 8), dtype, 1), make((4, 8), dtype, 2)) if affine else (None, None)
    check(lambda t, w, b: torch.native_layer_norm(t, [4, 8], w, b, 1e-5), x, w, b, **tol(dtype))
    check(lambda t, w, b: F.layer_norm(t, [8], w[0] if w is not None else None, None), x, w, b, **tol(dtype))
    if dtype == torch.float32:
        grads(lambda t, w, b: F.layer_norm(t, [4, 8], w, b), x, w, b, rtol=1e-4, atol=1e-4)
        grads(lambda t: F.layer_norm(t, [8]), x, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(x.to("tpu"), [5])


def test_layer_norm_backward_mask():
    x, w, b = make((3, 6)), make((6,), seed=1), make((6,), seed=2)
    grad = make((3, 6), seed=3)
    _, mean, rstd = torch.native_layer_norm(x, [6], w, b, 1e-5)
    for mask in ([True, False, False], [False, True, True], [True, True, False]):
        check(lambda *a: torch.ops.aten.native_layer_norm_backward(a[0], a[1], [6], a[2], a[3], a[4], a[5], mask),
              grad, x, mean, rstd, w, b, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------ group norm

@pytest.mark.parametrize("shape,groups", [((2, 6, 5), 3), ((3, 4, 2, 3), 2), ((2, 4), 4), ((1, 6, 2, 2, 2), 1)],
                         ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_backward(shape, groups, affine):
    # The multiplier r makes the input gradient non-trivial (the sum of a
    # normalised group does not depend on its input).
    x, r = make(shape), make(shape, seed=5)
    c = shape[1]
    w, b = (make((c,), seed=1), make((c,), seed=2)) if affine else (None, None)
    args = (x, r, w, b) if affine else (x, r)
    check_grads(lambda t, r, *wb: F.group_norm(t, groups, *wb) * r, *args, rtol=1e-4, atol=1e-4)


def test_group_norm_backward_bfloat16_and_mask():
    x, grad = make((2, 4, 6), torch.bfloat16), make((2, 4, 6), torch.bfloat16, seed=3)
    w = make((4,), torch.bfloat16, seed=1)
    _, mean, rstd = torch.native_group_norm(x, w, None, 2, 4, 6, 2, 1e-5)
    for mask in ([True, True, True], [False, True, False], [True, False, True]):
        check(lambda *a: torch.ops.aten.native_group_norm_backward(*a, 2, 4, 6, 2, mask), grad, x, mean, rstd, w,
              rtol=2e-2, atol=2e-2)
    with pytest.raises(RuntimeError, match="divisible"):
        torch.ops.aten.native_group_norm_backward(*[t.to("tpu") for t in (grad, x, mean, rstd, w)], 2, 4, 6, 3,
                                                  [True, True, True])


@pytest.mark.parametrize("dtype,params", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                          (torch.bfloat16, torch.float32)], ids=str)
def test_group_norm_forward_and_its_statistics(dtype, params):
    # A bfloat16 input with float parameters keeps float statistics, as on CPU.
    x, w, b = make((2, 6, 5), dtype), make((6,), params, seed=1), make((6,), params, seed=2)
    kw = tol(dtype) or dict(rtol=1e-4, atol=1e-4)
    check(lambda x, w, b: torch.native_group_norm(x, w, b, 2, 6, 5, 3, 1e-5), x, w, b, **kw)
    check(lambda x: torch.native_group_norm(x, None, None, 2, 6, 5, 2, 1e-5), x, **kw)


def test_group_norm_remembered_graph_keeps_groups_eps_and_parameters_apart():
    """Group norm's graph is remembered per kind of call (aten/op_memo.h): calls alike in
    shape but with other groups, eps, parameters or values each get their own result."""
    x, w, b = make((2, 8, 6)), make((8,), seed=1), make((8,), seed=2)
    for groups, eps, params in [(2, 1e-5, (w, b)), (4, 1e-5, (w, b)), (4, 0.5, (w, b)), (4, 0.5, (None, b)),
                                (4, 0.5, (w, None)), (4, 0.5, (None, None))]:
        for t in (x, x * 3 + 1):  # the same graph applied to new values
            check(lambda t, *p: F.group_norm(t, groups, *p, eps=eps), t, *params, rtol=1e-4, atol=1e-4)
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        _, mean, rstd = torch.native_group_norm(x, w, b, 2, 8, 6, 4, 1e-5)
        for grad in (make((2, 8, 6), seed=3), make((2, 8, 6), seed=4)):
            check(lambda *a: torch.ops.aten.native_group_norm_backward(*a, 2, 8, 6, 4, mask), grad, x, mean, rstd, w,
                  rtol=1e-4, atol=1e-4)


def test_group_norm_of_a_channels_last_input():
    # ATen's composite group norm views its input and fails on a channels-last one.
    x = make((2, 4, 3, 5)).contiguous(memory_format=torch.channels_last)
    out = check(lambda x: F.group_norm(x, 2), x, rtol=1e-4, atol=1e-4)
    assert out.is_contiguous(memory_format=torch.channels_last)
    check_grads(lambda t, w, b: F.group_norm(t, 2, w, b), x, make((4,), seed=1), make((4,), seed=2), rtol=1e-4,
                atol=1e-4)


def test_group_norm_empty_and_bad_input():
    check(lambda x: torch.native_group_norm(x, None, None, 2, 4, 0, 2, 1e-5), make((2, 4, 0)))  # mean 0, rstd NaN
    check(lambda x: torch.native_group_norm(x, None, None, 0, 4, 3, 2, 1e-5), make((0, 4, 3)))
    x = make((2, 4, 3)).to("tpu")
    for args, message in [((torch.ones(3, device="tpu"), None, 2, 4, 3, 2), "weight to be a vector of size equal"),
                          ((None, torch.ones(4, 1, device="tpu"), 2, 4, 3, 2), "bias to be a vector of size equal"),
                          ((None, None, 2, 4, 3, 3), "divisible by num_groups"),
                          ((None, None, 2, 4, 3, 0), "num groups to be greater than 0"),
                          ((None, None, 2, 4, 5, 2), "N \\* C \\* HxW"),
                          ((torch.ones(4, device="tpu", dtype=torch.bfloat16), None, 2, 4, 3, 2),
                           "expect parameter to have scalar type of Float"),
                          ((torch.ones(4, device="tpu"), torch.ones(4, device="tpu", dtype=torch.float64), 2, 4, 3, 2),
                           "expected scalar type Float but found Double")]:
        with pytest.raises(RuntimeError, match=message):
            torch.native_group_norm(x, *args, 1e-5)
        with pytest.raises(RuntimeError, match=message):  # CPU's own message
            torch.native_group_norm(x.cpu(), *[a.cpu() if isinstance(a, torch.Tensor) else a for a in args], 1e-5)


# ------------------------------------------------------------ batch norm

@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 5)], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_train_updates_running_stats(shape, affine):
    x = make(shape)
    w, b = (make((3,), seed=1), make((3,), seed=2)) if affine else (None, None)
    rm, rv = make((3,), seed=3), make((3,), seed=4, low=0.5, high=2)
    trm, trv = rm.to("tpu"), rv.to("tpu")
    expected = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-3)
    got = F.batch_norm(x.to("tpu"), trm, trv, to_tpu(w), to_tpu(b), training=True, momentum=0.3, eps=1e-3)
    compare(got, expected, rtol=1e-4, atol=1e-4)
    compare(trm, rm)
    compare(trv, rv)  # momentum with the unbiased batch variance
    grads(lambda t, w, b: F.batch_norm(t, None, None, w, b, training=True), x, w, b, rtol=1e-4, atol=1e-4)


def test_batch_norm_eval_and_module():
    x = make((4, 3, 5))
    rm, rv = make((3,), seed=3), make((3,), seed=4, low=0.5, high=2)
    w, b = make((3,), seed=1), make((3,), seed=2)
    check(lambda t, rm, rv, w, b: F.batch_norm(t, rm, rv, w, b, training=False), x, rm, rv, w, b)
    grads(lambda t, w, b: F.batch_norm(t, rm.to(t.device), rv.to(t.device), w, b, training=False), x, w, b,
          rtol=1e-4, atol=1e-4)
    check(lambda t, w, b: F.batch_norm(t, None, None, w, b, training=True), x, w, b, rtol=1e-4, atol=1e-4)
    m_cpu = torch.nn.BatchNorm2d(3)
    m_tpu = torch.nn.BatchNorm2d(3).to("tpu")
    x4 = make((2, 3, 4, 4))
    for _ in range(2):
        compare(m_tpu(x4.to("tpu")), m_cpu(x4), rtol=1e-4, atol=1e-4)
    compare(m_tpu.running_var, m_cpu.running_var)
    compare(m_tpu.num_batches_tracked, m_cpu.num_batches_tracked)
    m_cpu.eval(), m_tpu.eval()
    compare(m_tpu(x4.to("tpu")), m_cpu(x4), rtol=1e-4, atol=1e-4)
    check(lambda t: torch.ops.aten._native_batch_norm_legit_no_training(t, None, None, rm.to(t.device),
                                                                          rv.to(t.device), 0.1, 1e-5), x)


def test_batch_norm_bf16_input_float_params():
    x = make((4, 3, 5), torch.bfloat16)
    check(lambda t, w, b, rm, rv: torch.native_batch_norm(t, w, b, rm, rv, True, 0.1, 1e-5), x,
          make((3,)), make((3,), seed=1), torch.zeros(3), torch.ones(3), **tol(torch.bfloat16))


# ------------------------------------------------------------ losses

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    x = F.log_softmax(make((6, 5)), 1)
    target = torch.tensor([0, 4, 2, 2, 1, 3])
    w = make((5,), seed=1, low=0.2, high=2) if weighted else None
    fn = lambda t, tg, w: F.nll_loss(t, tg, w, reduction=reduction, ignore_index=2)  # noqa: E731
    check(fn, x, target, w)
    grads(fn, x, target, w, wrt={0})
    check(lambda t, tg, w: F.nll_loss(t, tg, w, reduction=reduction), x[0], target[1], w)  # 1-D input
    check(lambda t, tg, w: torch.ops.aten.nll_loss_forward(t, tg, w, 1, -100), x, target, w)
    x4, t4 = F.log_softmax(make((2, 5, 3, 4)), 1), make((2, 3, 4), torch.int64, low=0, high=5)
    check(lambda t, tg, w: F.nll_loss(t, tg, w, reduction=reduction, ignore_index=1), x4, t4, w)
    grads(lambda t, tg, w: F.nll_loss(t, tg, w, reduction=reduction, ignore_index=1), x4, t4, w, wrt={0})


def test_nll_loss_all_ignored_and_errors():
    x = F.log_softmax(make((3, 4)), 1)
    check(lambda t, tg: F.nll_loss(t, tg, ignore_index=1), x, torch.tensor([1, 1, 1]))  # 0/0 = NaN
    with pytest.raises(RuntimeError, match="batch_size"):
        torch.ops.aten.nll_loss_forward(x.to("tpu"), torch.tensor([0, 1]).to("tpu"), None, 1, -100)
    with pytest.raises(RuntimeError, match="weight tensor should be defined"):
        torch.ops.aten.nll_loss_forward(x.to("tpu"), torch.tensor([0, 1, 1]).to("tpu"), torch.ones(3).to("tpu"), 1,
                                        -100)


def test_nll_loss_out_of_range_targets_pick_no_class():
    # Targets are not range-checked on the device (README, Known limits): one out of
    # range picks no class, like an ignored one. The one-hot compares s32 indices, so
    # 2**32 + 1 must not wrap around to class 1.
    x = F.log_softmax(make((3, 4)), 1).to("tpu").requires_grad_()
    ignored = torch.tensor([0, -100, 3]).to("tpu")
    for far in (2**32 + 1, 4, -7):
        target = torch.tensor([0, far, 3]).to("tpu")
        loss = F.nll_loss(x, target, reduction="sum")
        expected = F.nll_loss(x, ignored, reduction="sum")
        torch.testing.assert_close(loss.cpu(), expected.cpu())
        (grad,) = torch.autograd.grad(loss, x)
        (expected_grad,) = torch.autograd.grad(expected, x)
        torch.testing.assert_close(grad.cpu(), expected_grad.cpu())
        assert grad[1].abs().sum().item() == 0


def test_cross_entropy():
    cross_entropy(0.0)


def test_cross_entropy_label_smoothing():
    cross_entropy(0.2)


def cross_entropy(label_smoothing):
    x, target = make((6, 5)), torch.tensor([0, 4, 2, 2, 1, 3])
    w = make((5,), seed=1, low=0.2, high=2)
    for weight in (None, w):
        fn = lambda t, tg, w: F.cross_entropy(t, tg, w, label_smoothing=label_smoothing)  # noqa: E731
        check(fn, x, target, weight)
        grads(fn, x, target, weight, wrt={0}, rtol=1e-4, atol=1e-5)
    x4, t4 = make((2, 5, 3, 3)), make((2, 3, 3), torch.int64, low=0, high=5)
    check(lambda t, tg: F.cross_entropy(t, tg, label_smoothing=label_smoothing), x4, t4)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_mse_and_bce(reduction):
    a, b = make((4, 5)), make((4, 5), seed=1)
    check(lambda a, b: F.mse_loss(a, b, reduction=reduction), a, b)
    grads(lambda a, b: F.mse_loss(a, b, reduction=reduction), a, b)
    p, t, w = make((4, 5), low=0.01, high=0.99), make((4, 5), seed=1, low=0, high=1), make((4, 5), seed=2, low=0,
                                                                                           high=2)
    check(lambda p, t: F.binary_cross_entropy(p, t, reduction=reduction), p, t)
    check(lambda p, t, w: F.binary_cross_entropy(p, t, w, reduction=reduction), p, t, w)
    grads(lambda p, t, w: F.binary_cross_entropy(p, t, w, reduction=reduction), p, t, w, wrt={0})
    edge = torch.tensor([0.0, 1.0, 0.5])
    check(lambda p, t: F.binary_cross_entropy(p, t, reduction=reduction), edge, torch.tensor([1.0, 0.0, 1.0]))


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_bce_with_logits(reduction):
    x, t = make((4, 5), low=-30, high=30), make((4, 5), seed=1, low=0, high=1)
    w, pw = make((4, 5), seed=2, low=0, high=2), make((5,), seed=3, low=0.5, high=3)
    fn = lambda x, t, w, pw: F.binary_cross_entropy_with_logits(x, t, w, pos_weight=pw, reduction=reduction)  # noqa
    check(fn, x, t, None, None)
    check(fn, x, t, w, pw)
    grads(fn, x, t, w, pw, wrt={0})
    grads(fn, x, t, None, None, wrt={0})


def test_clip_grad_norm():
    params_cpu = [torch.nn.Parameter(make(s, seed=i)) for i, s in enumerate([(4, 3), (3,), (2, 2, 2)])]
    params_tpu = [torch.nn.Parameter(p.detach().to("tpu")) for p in params_cpu]
    for i, (pc, pt) in enumerate(zip(params_cpu, params_tpu)):
        pc.grad = make(pc.shape, seed=10 + i)
        pt.grad = pc.grad.to("tpu")
    for max_norm, norm_type in ((1.0, 2.0), (0.5, INF)):
        total_cpu = torch.nn.utils.clip_grad_norm_(params_cpu, max_norm, norm_type)
        total_tpu = torch.nn.utils.clip_grad_norm_(params_tpu, max_norm, norm_type)
        compare(total_tpu, total_cpu)
        for pc, pt in zip(params_cpu, params_tpu):
            compare(pt.grad, pc.grad)
