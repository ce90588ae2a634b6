"""Sorting, selection, indexing and small reductions against CPU PyTorch
(TORCH_TPU_FALLBACK=error: every op here must be native)."""
import pytest
import torch
from torch.testing import assert_close

import torch_tpu  # noqa: F401
from support import make, check, check_grads, to_tpu

NAN = float("nan")
DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.int32]


def check_all(fn, *args, **kwargs):
    """Like check() for functions returning tuples (or one tensor)."""
    expected = fn(*args, **kwargs)
    got = fn(*[to_tpu(a) for a in args], **kwargs)
    if isinstance(expected, torch.Tensor):
        expected, got = (expected,), (got,)
    for e, g in zip(expected, got):
        assert g.device.type == "tpu"
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert_close(g.cpu(), e, equal_nan=True)


def with_ties_and_nans(shape, dtype):
    x = make(shape, dtype, low=0 if dtype == torch.uint8 else -3, high=3)
    if dtype.is_floating_point:
        x = x.round()  # ties
        flat = x.view(-1)
        flat[::7] = NAN
        flat[1::11] = -0.0
    return x


# ------------------------------------------------------------ sort family

@pytest.mark.parametrize("dtype", DTYPES + [torch.bool, torch.uint8], ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable(dtype, descending):
    x = with_ties_and_nans((4, 37), dtype)
    for dim in (0, -1):
        check_all(lambda t: torch.sort(t, dim=dim, descending=descending, stable=True), x)
    check_all(lambda t: torch.argsort(t, dim=1, descending=descending, stable=True), x)


def test_sort_int64_wide_range_and_edges():
    x = torch.randint(-2**62, 2**62, (3, 200), generator=torch.Generator().manual_seed(0))
    x[0, :5] = torch.tensor([2**63 - 1, -2**63, 0, -1, 2**63 - 1])
    check_all(lambda t: torch.sort(t, stable=True), x)
    check_all(lambda t: torch.sort(t, descending=True, stable=True), x)
    check_all(lambda t: torch.msort(t), make((5, 3)))
    check_all(lambda t: torch.sort(t), torch.tensor(3.0))           # 0-dim
    check_all(lambda t: torch.sort(t, dim=0), torch.empty(0, 3))    # empty
    special = torch.tensor([float("inf"), -float("inf"), NAN, 0.0, -0.0, 1e-38, -1e-38, 3.0])
    check_all(lambda t: torch.sort(t, stable=True), special)
    check_all(lambda t: torch.sort(t, descending=True, stable=True), special)


def test_sort_out_and_backward():
    x = make((3, 6))
    v, i = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.sort(x.to("tpu"), dim=1, out=(v, i))
    e = torch.sort(x, dim=1)
    assert_close(v.cpu(), e.values)
    assert_close(i.cpu(), e.indices)
    check_grads(lambda t: torch.sort(t, dim=0).values * torch.arange(6.0, device=t.device), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_topk_kthvalue(dtype):
    # Distinct values: the order of tied elements in topk is unspecified.
    x = torch.stack([torch.randperm(40, generator=torch.Generator().manual_seed(i)) for i in range(5)])
    x = (x - 20).to(dtype)
    for largest in (True, False):
        check_all(lambda t: torch.topk(t, 7, dim=1, largest=largest), x)
        check_all(lambda t: torch.topk(t, 3, dim=0, largest=largest), x.t())
    check_all(lambda t: torch.kthvalue(t, 4, dim=1), x)
    check_all(lambda t: torch.kthvalue(t, 2, dim=0, keepdim=True), x.t())
    with pytest.raises(RuntimeError, match="k out of range"):
        torch.topk(x.to("tpu"), 41)


def test_topk_kthvalue_backward():
    x = make((4, 9))
    check_grads(lambda t: torch.topk(t, 3, dim=1).values, x)
    check_grads(lambda t: torch.kthvalue(t, 2, dim=0).values, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_median_nanmedian(dtype):
    x = make((6, 9), torch.float32).to(dtype)
    check_all(torch.median, x)
    check_all(torch.nanmedian, x)
    check_all(lambda t: torch.median(t, dim=1), x)
    check_all(lambda t: torch.median(t, dim=0, keepdim=True), x)
    check_all(lambda t: torch.nanmedian(t, dim=1), x)
    if dtype.is_floating_point:
        y = x.clone()
        y[0, 3] = NAN
        y[2, 1:] = NAN  # (an all-NaN row's index is unspecified)
        y[4, ::2] = NAN
        check_all(torch.median, y)
        check_all(torch.nanmedian, y)
        check_all(lambda t: torch.median(t, dim=1), y)
        check_all(lambda t: torch.nanmedian(t, dim=1), y)
    check_all(torch.median, torch.empty(0))
    check_grads(lambda t: torch.median(t, dim=1).values, make((4, 7)))
    check_grads(lambda t: torch.nanmedian(t), make((4, 7)))


def test_mode():
    x = torch.tensor([[1, 2, 2, 3, 3, 0], [5, 5, 5, 1, 1, 1], [4, 3, 2, 1, 0, -1]])
    check_all(lambda t: torch.mode(t, dim=1), x)
    check_all(lambda t: torch.mode(t, dim=1), x.float())
    check_all(lambda t: torch.mode(t, dim=0, keepdim=True), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_unique(dtype):
    x = make((5, 8), dtype, low=-4, high=4)
    if dtype.is_floating_point:
        x = x.round()
    check_all(lambda t: torch.unique(t), x)
    check_all(lambda t: torch.unique(t, return_inverse=True, return_counts=True), x)
    check_all(lambda t: torch.unique_consecutive(t, return_inverse=True, return_counts=True), x)
    check_all(lambda t: torch.unique_consecutive(t.view(-1)), x)
    check_all(lambda t: torch.unique_consecutive(t, dim=1, return_inverse=True, return_counts=True),
              torch.tensor([[1, 1, 2, 2, 1], [3, 3, 4, 4, 3]]).to(dtype))
    check_all(lambda t: torch.unique(t, return_counts=True), torch.empty(0, dtype=dtype))


def test_cummax_cummin_logcumsumexp():
    x = make((4, 10)).round()
    x[1, 3] = NAN
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        y = x.nan_to_num(2.0).to(dtype) if not dtype.is_floating_point else x.to(dtype)
        check_all(lambda t: torch.cummax(t, dim=1), y)
        check_all(lambda t: torch.cummin(t, dim=0), y)
    check(lambda t: torch.logcumsumexp(t, dim=1), make((3, 17)))
    check(lambda t: torch.logcumsumexp(t, dim=0), torch.tensor([-float("inf"), -float("inf"), 1.0, float("inf")]))
    check(lambda t: torch.logcumsumexp(t, dim=1), make((3, 17), torch.bfloat16))
    check_grads(lambda t: torch.cummax(t, dim=1).values, make((3, 8)))
    check_grads(lambda t: torch.logcumsumexp(t, dim=1), make((3, 8)))


def test_quantile():
    x = make((5, 12))
    check(lambda t: torch.quantile(t, 0.3, dim=1), x)
    check(lambda t: torch.quantile(t, torch.tensor([0.1, 0.5, 0.9], device=t.device)), x)
    y = x.clone()
    y[1, 2] = NAN
    check(lambda t: torch.nanquantile(t, 0.7, dim=1, keepdim=True), y)
    check(lambda t: torch.quantile(t, 0.7, dim=1), y)


# ------------------------------------------------------------ search

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_searchsorted_bucketize_isin(dtype):
    boundaries = torch.sort(make((20,), dtype, low=-50, high=50)).values
    values = make((4, 6), dtype, seed=2, low=-60, high=60)
    if dtype.is_floating_point:
        boundaries = torch.sort(make((20,), torch.float32) * 10).values.to(dtype)
        values = (make((4, 6), torch.float32, seed=2) * 12).to(dtype)
        values[0, :3] = boundaries[:3]
    for right in (False, True):
        check(lambda b, v: torch.searchsorted(b, v, right=right), boundaries, values)
        check(lambda v, b: torch.bucketize(v, b, right=right, out_int32=True), values, boundaries)
    rows = torch.sort(make((4, 7), dtype, low=-9, high=9), dim=1).values
    check(lambda b, v: torch.searchsorted(b, v, side="right"), rows, make((4, 3), dtype, seed=3, low=-9, high=9))
    unsorted = make((9,), dtype, low=-9, high=9)
    sorter = torch.argsort(unsorted, stable=True)
    check(lambda b, v, s: torch.searchsorted(b, v, sorter=s), unsorted, values, sorter)
    check(lambda e, t: torch.isin(e, t), values, boundaries)
    check(lambda e, t: torch.isin(e, t, invert=True), values, boundaries)
    check(lambda e: torch.isin(e, 3), make((5,), dtype, low=0, high=5))
    check(lambda t: torch.isin(2, t), make((5,), dtype, low=0, high=5))


def test_search_edges():
    nan_b = torch.tensor([1.0, 2.0, NAN])
    check(lambda b, v: torch.searchsorted(b, v), nan_b, torch.tensor([0.5, 2.0, 3.0, NAN]))
    check(lambda b: torch.searchsorted(b, 1.5), torch.tensor([1.0, 2.0]))
    check(lambda b, v: torch.searchsorted(b, v), torch.empty(0), torch.tensor([1.0]))
    check(lambda e, t: torch.isin(e, t), torch.tensor([NAN, 1.0]), torch.tensor([NAN, 1.0]))
    with pytest.raises(RuntimeError, match="boundaries tensor must be 1 dimension"):
        torch.bucketize(torch.ones(2, device="tpu"), torch.ones(2, 2, device="tpu"))


def test_histc():
    x = make((50,)) * 2
    check(lambda t: torch.histc(t, bins=7), x)
    check(lambda t: torch.histc(t, bins=4, min=-1, max=1), x)
    check(lambda t: torch.histc(t, bins=3), torch.tensor([2.0, 2.0, 2.0]))
    check(lambda t: torch.histc(t, bins=5, min=0, max=5), torch.tensor([0.0, 5.0, 2.5, NAN, 7.0]))
    check(lambda t: torch.histc(t, bins=4), torch.empty(0))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_of_integers_counts_in_their_dtype_as_cuda_does(dtype):
    # CPU's histc takes floating inputs only; CUDA's also integers, counting in their
    # dtype with the bounds converted to it. The expected counts come from the same
    # values as floats on CPU, with the bounds CUDA would use.
    g = torch.Generator().manual_seed(0)
    experts = torch.randint(0, 8, (64, 2), generator=g).to(dtype)  # a MoE layer's top-2 choices
    cases = [(experts, dict(bins=8, min=0, max=7), None),  # tokens per expert
             (experts, dict(bins=3, min=1, max=6), None),  # values outside the range are not counted
             (experts, dict(bins=5), None),  # min == max: the data's own range
             (torch.full((4,), 3, dtype=dtype), dict(bins=3), None),  # one value: widened by 1 each way
             (experts, dict(bins=4, min=2.2, max=2.7), dict(bins=4, min=1, max=3))]  # bounds meet as integers
    for values, kwargs, as_cuda in cases:
        got = torch.histc(values.to("tpu"), **kwargs)
        assert got.dtype == dtype
        assert_close(got.cpu(), torch.histc(values.float(), **(as_cuda or kwargs)).to(dtype), rtol=0, atol=0)


def test_histc_names_the_dtypes_it_cannot_count():
    with pytest.raises(RuntimeError, match="torch.histc: input of dtype Bool is not supported"):
        torch.histc(torch.ones(3, dtype=torch.bool, device="tpu"), bins=2)


# ------------------------------------------------------------ small reductions

@pytest.mark.parametrize("dtype", DTYPES + [torch.bool], ids=str)
def test_nansum_count_nonzero_trace_equal(dtype):
    x = make((4, 5), dtype, low=-2, high=3)
    if dtype.is_floating_point:
        x[1, 1] = NAN
        check(torch.nansum, x)
        check(lambda t: torch.nansum(t, dim=1, keepdim=True), x)
    elif dtype != torch.bool:
        check(torch.nansum, x)
    check(lambda t: torch.count_nonzero(t), x)
    check(lambda t: torch.count_nonzero(t, dim=(0,)), x)
    if dtype != torch.bool:
        check(torch.trace, x)
    xt = x.to("tpu")
    assert torch.equal(xt, xt.clone()) == (not dtype.is_floating_point)  # NaN != NaN
    assert not torch.equal(xt, xt[:2])
    assert torch.equal(xt[:2, :2], x[:2, :2].to("tpu").clone()) == torch.equal(x[:2, :2], x[:2, :2])
    check_grads(lambda t: torch.nansum(t, dim=0) * 2, make((3, 4)))
    check_grads(torch.trace, make((4, 4)))


def test_renorm():
    x = make((4, 3, 5))
    check(lambda t: torch.renorm(t, 2, 0, 3.0), x)
    check(lambda t: torch.renorm(t, 1, 1, 5.0), x)
    check(lambda t: torch.renorm(t, float("inf"), -1, 1.0), x)
    check(lambda t: torch.renorm(t, 2, 0, 3.0), x.to(torch.bfloat16), atol=2e-2, rtol=2e-2)
    check_grads(lambda t: torch.renorm(t, 2, 0, 3.0), x)


# ------------------------------------------------------------ products

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_dot_mv_addmv_addbmm(dtype):
    tol = dict(atol=5e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    a, b = make((7,), dtype), make((7,), dtype, seed=1)
    check(torch.dot, a, b, **tol)
    check(torch.vdot, a, b, **tol)
    m, v = make((4, 7), dtype, seed=2), make((7,), dtype, seed=3)
    check(torch.mv, m, v, **tol)
    check(torch.matmul, m, v, **tol)
    check(lambda s, m, v: torch.addmv(s, m, v, beta=2, alpha=3), make((4,), dtype, seed=4), m, v, **tol)
    check(lambda s, m, v: torch.addmv(s, m, v), make((1,), dtype, seed=4), m, v, **tol)
    b1, b2 = make((3, 4, 5), dtype, seed=5), make((3, 5, 2), dtype, seed=6)
    check(lambda s, x, y: torch.addbmm(s, x, y, beta=0.5 if dtype.is_floating_point else 2, alpha=2),
          make((4, 2), dtype, seed=7), b1, b2, **tol)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.dot(a.to("tpu"), b.to("tpu").to(torch.float64 if dtype != torch.float64 else torch.float32))
    with pytest.raises(RuntimeError, match="inconsistent tensor size"):
        torch.dot(a.to("tpu"), a[:3].to("tpu"))


def test_product_backward_and_inplace():
    check_grads(torch.dot, make((6,)), make((6,), seed=1))
    check_grads(torch.mv, make((3, 6)), make((6,), seed=1))
    check_grads(lambda s, x, y: torch.addbmm(s, x, y, alpha=0.5), make((4, 2)), make((3, 4, 5)), make((3, 5, 2)))
    s, m, v = make((4,)), make((4, 3)), make((3,))
    st = s.to("tpu")
    st.addmv_(m.to("tpu"), v.to("tpu"), beta=0.5)
    assert_close(st.cpu(), s.addmv_(m, v, beta=0.5))
    out = torch.empty(0, device="tpu")
    torch.mv(m.to("tpu"), v.to("tpu"), out=out)
    assert_close(out.cpu(), m @ v)


def test_bf16_products_with_f32_accumulation():
    # bilinear's backward contracts bf16 operands into f32 results.
    x1, x2 = make((3, 4), torch.bfloat16), make((3, 5), torch.bfloat16, seed=1)
    w, bias = make((2, 4, 5), torch.bfloat16, seed=2), make((2,), torch.bfloat16, seed=3)
    check(torch.nn.functional.bilinear, x1, x2, w, bias, atol=0.1, rtol=3e-2)
    cpu, tpu = [], []
    for device, res in (("cpu", cpu), ("tpu", tpu)):
        args = [t.detach().to(device).requires_grad_() for t in (x1, x2, w, bias)]
        torch.nn.functional.bilinear(*args).float().sum().backward()
        res.extend(a.grad.cpu().float() for a in args)
    for c, t in zip(cpu, tpu):
        assert_close(t, c, atol=0.1, rtol=3e-2)


def test_linalg_cross():
    a, b = make((4, 3)), make((4, 3), seed=1)
    check(lambda x, y: torch.linalg.cross(x, y), a, b)
    check(lambda x, y: torch.cross(x, y, dim=1), a, b)
    check(lambda x, y: torch.linalg.cross(x, y, dim=0), make((3, 2)), make((3, 1), seed=1))
    check(lambda x, y: torch.linalg.cross(x, y), make((2, 3), torch.int64), make((2, 3), torch.int64, seed=1))
    check_grads(lambda x, y: torch.linalg.cross(x, y), a, b)
    with pytest.raises(RuntimeError, match="must have length 3"):
        torch.linalg.cross(torch.ones(2, 2, device="tpu"), torch.ones(2, 2, device="tpu"))


def test_eye():
    for dtype in (torch.float32, torch.int64, torch.bool, torch.bfloat16):
        assert_close(torch.eye(4, 3, dtype=dtype, device="tpu").cpu(), torch.eye(4, 3, dtype=dtype))
        assert_close(torch.eye(3, dtype=dtype, device="tpu").cpu(), torch.eye(3, dtype=dtype))
    assert torch.eye(0, device="tpu").shape == (0, 0)


# ------------------------------------------------------------ indexing

@pytest.mark.parametrize("dtype", DTYPES + [torch.bool], ids=str)
def test_take_put_index_fill(dtype):
    x = make((3, 5), dtype)
    idx = torch.tensor([[0, -1], [7, 14]])
    check(torch.take, x, idx)
    src = make((4,), dtype, seed=1)
    check(lambda t, i, s: t.clone().put_(i, s), x, torch.tensor([1, -2, 5, 1]), src)
    if dtype != torch.bool:
        check(lambda t, i, s: t.put(i, s, accumulate=True), x, torch.tensor([1, -2, 5, 1]), src)
    fill = True if dtype == torch.bool else 2
    check(lambda t, i: t.index_fill(1, i, fill), x, torch.tensor([0, -1, 2]))
    check(lambda t, i: t.index_fill(0, i, torch.tensor(fill, dtype=dtype)), x, torch.tensor([1]))
    check(lambda t, i: t.index_fill(0, i, fill), torch.tensor(5, dtype=dtype), torch.tensor([0]))


def test_index_backward_paths():
    check_grads(lambda t: torch.take(t, torch.tensor([0, 3, 3], device=t.device)), make((2, 3)))
    check_grads(lambda t, s: t.put(torch.tensor([1, 4], device=t.device), s, accumulate=True), make((2, 3)),
                make((2,), seed=1))
    check_grads(lambda t: t.index_fill(1, torch.tensor([0, 2], device=t.device), 1.5), make((2, 3)))


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_index_reduce(reduce, include_self, dtype):
    x = make((5, 3), dtype, low=-4, high=5)
    src = make((4, 3), dtype, seed=1, low=-4, high=5)
    idx = torch.tensor([0, 2, 0, 4])
    check(lambda t, i, s: t.index_reduce(0, i, s, reduce, include_self=include_self), x, idx, src)
    check(lambda t, i, s: t.index_reduce(1, i, s, reduce, include_self=include_self), x.t().contiguous(),
          torch.tensor([1, 1, 0]), make((3, 3), dtype, seed=2, low=-4, high=5))
    if dtype.is_floating_point:
        check_grads(lambda t, s: t.index_reduce(0, idx.to(t.device), s, reduce, include_self=include_self), x, src)


def test_repeat_interleave_nonzero_static():
    check(lambda r: torch.repeat_interleave(r), torch.tensor([2, 0, 3, 1]))
    check(lambda r: torch.repeat_interleave(r), torch.tensor([2, 0, 3], dtype=torch.int32))
    check(lambda x, r: torch.repeat_interleave(x, r, dim=0), make((3, 2)), torch.tensor([1, 0, 2]))
    check(lambda r: torch.repeat_interleave(r, output_size=4), torch.tensor([1, 3]))
    check(lambda r: torch.repeat_interleave(r), torch.empty(0, dtype=torch.long))
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device="tpu"))
    x = make((4, 5), torch.int64, low=-1, high=2)
    for size in (0, 3, 20):
        check(lambda t: torch.nonzero_static(t, size=size, fill_value=-7), x)
    check(lambda t: torch.nonzero_static(t, size=2), torch.zeros(0, 3))


# ------------------------------------------------------------ elementwise

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rsub_floor_divide(dtype):
    a, b = make((3, 4), dtype), make((3, 4), dtype, seed=1)
    check(lambda x, y: torch.rsub(x, y, alpha=2), a, b)
    check(lambda x: torch.rsub(x, 3), a)
    b = torch.where(b == 0, torch.ones_like(b), b)
    check(torch.floor_divide, a, b)
    check(lambda x: torch.floor_divide(x, 2), a)
    check(lambda x, y: x.clone().floor_divide_(y), a, b)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.floor_divide(a.to("tpu"), b.to("tpu"), out=out)
    assert_close(out.cpu(), torch.floor_divide(a, b))
    check_grads(lambda x, y: torch.rsub(x, y, alpha=0.5), make((3,)), make((3,), seed=1))


def test_clamp_bool():
    a, b = make((6,), torch.bool), make((6,), torch.bool, seed=1)
    check(torch.clamp_min, a, b)
    check(torch.clamp_max, a, b)
    check(lambda x, y: torch.clamp(x, min=y), a, b)
    check(lambda x, y: x.clone().clamp_max_(y), a, b)
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
            torch.clamp_min(a.to(device), True)
        with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
            torch.clamp(a.to(device), b.to(device), b.to(device))
