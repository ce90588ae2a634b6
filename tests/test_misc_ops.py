"""Leftover ops against CPU PyTorch (TORCH_TPU_FALLBACK=error): random samplers
(distributions, reproducibility), multinomial, logspace, batch norm with
update, embedding max_norm, cdist/pdist, histogram(dd), segment_reduce and
igamma/igammac, forward and backward."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_tpu  # noqa: F401
from support import make, check, check_grads, to_tpu

N = 100_000


def cmp(got, expected, **tol):
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            cmp(g, e, **tol)
        return
    assert got.device.type == "tpu" and got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert_close(got.cpu(), expected, equal_nan=True, **tol)


def same(fn, *args, tol=None, **kwargs):
    """fn on CPU and on tpu copies of every tensor argument (also in kwargs and lists)."""
    expected = fn(*args, **kwargs)
    got = fn(*to_tpu(list(args)), **{k: to_tpu(v) for k, v in kwargs.items()})
    cmp(got, expected, **(tol or {}))
    return got


# ------------------------------------------------------------ samplers

def draw(method, *args, dtype=torch.float32, n=N):
    return getattr(torch.empty(n, device="tpu", dtype=dtype), method)(*args).cpu().double()


def test_exponential():
    x = draw("exponential_", 2.0)
    assert x.min() >= 0 and abs(x.mean() - 0.5) < 0.01 and abs(x.var() - 0.25) < 0.01
    assert draw("exponential_", 1.0, dtype=torch.bfloat16).min() >= 0


def test_cauchy():
    x = draw("cauchy_", 1.0, 2.0)
    # No mean; the median and quartiles are median -/+ sigma.
    q = torch.quantile(x[:50_000], torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert_close(q, torch.tensor([-1.0, 1.0, 3.0], dtype=torch.float64), atol=0.06, rtol=0)


def test_geometric():
    x = draw("geometric_", 0.3)
    assert x.min() >= 1 and torch.equal(x, x.round())
    assert abs(x.mean() - 1 / 0.3) < 0.05 and abs(x.var() - 0.7 / 0.09) < 0.3
    y = torch.empty(1000, device="tpu", dtype=torch.int64).geometric_(0.5).cpu()
    assert y.dtype == torch.int64 and y.min() >= 1


def test_log_normal():
    x = draw("log_normal_", 0.5, 0.4)
    assert x.min() > 0
    assert abs(x.log().mean() - 0.5) < 0.01 and abs(x.log().std() - 0.4) < 0.01
    assert abs(x.mean() - math.exp(0.5 + 0.08)) < 0.02


def test_sampler_reproducible_and_checks():
    for method, args in [("cauchy_", ()), ("exponential_", ()), ("geometric_", (0.2,)), ("log_normal_", ())]:
        torch.tpu.manual_seed(7)
        a = getattr(torch.empty(100, device="tpu"), method)(*args).cpu()
        torch.tpu.manual_seed(7)
        b = getattr(torch.empty(100, device="tpu"), method)(*args).cpu()
        c = getattr(torch.empty(100, device="tpu"), method)(*args).cpu()
        assert torch.equal(a, b) and not torch.equal(a, c)
    t = torch.empty(3, device="tpu")
    with pytest.raises(RuntimeError, match="sigma > 0.0"):
        t.cauchy_(0, 0)
    with pytest.raises(RuntimeError, match="lambda > 0.0"):
        t.exponential_(-1)
    with pytest.raises(RuntimeError, match=r"p to be in \(0, 1\)"):
        t.geometric_(1.0)
    with pytest.raises(RuntimeError, match="std > 0.0"):
        t.log_normal_(0, 0)
    with pytest.raises(RuntimeError, match="floating point"):
        torch.empty(3, device="tpu", dtype=torch.int64).exponential_()
    # The functional variants (composites over the in-place ones).
    assert torch.ops.aten.exponential(torch.empty(4, 5, device="tpu")).shape == (4, 5)
    assert torch.empty(0, device="tpu").cauchy_().shape == (0,)


def test_normal_tensor_mean_std():
    mean = torch.tensor([-5.0, 0.0, 10.0], device="tpu").repeat(N // 3, 1)
    std = torch.tensor([0.5, 1.0, 3.0], device="tpu")
    x = torch.normal(mean, std).cpu()
    assert x.shape == (N // 3, 3)
    assert_close(x.mean(0), torch.tensor([-5.0, 0.0, 10.0]), atol=0.05, rtol=0)
    assert_close(x.std(0), torch.tensor([0.5, 1.0, 3.0]), atol=0.05, rtol=0)
    y = torch.normal(torch.full((N,), 2.0, device="tpu"), 0.5).cpu()
    assert abs(y.mean() - 2) < 0.01 and abs(y.std() - 0.5) < 0.01
    z = torch.normal(-1.0, torch.full((N,), 2.0, device="tpu", dtype=torch.float64)).cpu()
    assert z.dtype == torch.float64 and abs(z.mean() + 1) < 0.03 and abs(z.std() - 2) < 0.03
    # Broadcasting, out=, zero std, reproducibility.
    assert torch.normal(torch.zeros(3, 1, device="tpu"), torch.ones(4, device="tpu")).shape == (3, 4)
    out = torch.empty(0, device="tpu")
    torch.normal(torch.ones(5, device="tpu"), 0.0, out=out)
    assert torch.equal(out.cpu(), torch.ones(5))
    torch.normal(torch.ones(2, 2, device="tpu"), torch.ones(2, 2, device="tpu"), out=out.resize_(0))
    assert out.shape == (2, 2)
    torch.tpu.manual_seed(3)
    a = torch.normal(torch.zeros(10, device="tpu"), 1.0).cpu()
    torch.tpu.manual_seed(3)
    assert torch.equal(torch.normal(torch.zeros(10, device="tpu"), 1.0).cpu(), a)
    with pytest.raises(RuntimeError, match="all elements of std >= 0.0"):
        torch.normal(torch.zeros(3, device="tpu"), -torch.ones(3, device="tpu"))
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        torch.normal(torch.zeros(3, device="tpu"), -1.0)


def test_multinomial_with_replacement():
    p = torch.tensor([0.1, 0.0, 0.6, 0.3], device="tpu")
    s = torch.multinomial(p, N, replacement=True).cpu()
    assert s.dtype == torch.int64 and s.shape == (N,)
    freq = torch.bincount(s, minlength=4).double() / N
    assert freq[1] == 0
    assert_close(freq, torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64), atol=0.01, rtol=0)
    # Unnormalised rows, 2-D, trailing zero category.
    w = torch.tensor([[1.0, 3.0, 0.0], [5.0, 0.0, 5.0]], device="tpu")
    s = torch.multinomial(w, 20_000, True).cpu()
    assert s.shape == (2, 20_000)
    assert (s[0] != 2).all() and (s[1] != 1).all()
    assert abs((s[0] == 1).double().mean() - 0.75) < 0.02 and abs((s[1] == 0).double().mean() - 0.5) < 0.02


def test_multinomial_without_replacement():
    p = torch.tensor([0.5, 0.0, 0.25, 0.25], device="tpu").repeat(20_000, 1)
    s = torch.multinomial(p, 2).cpu()
    assert s.shape == (20_000, 2) and (s[:, 0] != s[:, 1]).all() and (s != 1).all()
    first = torch.bincount(s[:, 0], minlength=4).double() / 20_000
    assert_close(first, torch.tensor([0.5, 0.0, 0.25, 0.25], dtype=torch.float64), atol=0.02, rtol=0)
    # P(second = 0) = sum over first j != 0 of p_j * p_0 / (1 - p_j) = 2 * 0.25 * 0.5 / 0.75.
    assert abs((s[:, 1] == 0).double().mean() - 1 / 3) < 0.02
    # All categories: a permutation.
    perm = torch.multinomial(torch.ones(6, device="tpu"), 6).cpu()
    assert sorted(perm.tolist()) == list(range(6))
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    torch.multinomial(torch.ones(2, 5, device="tpu"), 3, out=out)
    assert out.shape == (2, 3)
    torch.tpu.manual_seed(11)
    a = torch.multinomial(torch.ones(50, device="tpu"), 10).cpu()
    torch.tpu.manual_seed(11)
    assert torch.equal(torch.multinomial(torch.ones(50, device="tpu"), 10).cpu(), a)


@pytest.mark.parametrize("replacement", [False, True])
def test_multinomial_errors(replacement):
    t = lambda *v: torch.tensor(v, device="tpu")  # noqa: E731
    n = 2 if replacement else 1
    with pytest.raises(RuntimeError, match="< 0"):
        torch.multinomial(t(1.0, -1.0), n, replacement)
    with pytest.raises(RuntimeError, match="inf|infinity"):
        torch.multinomial(t(1.0, float("inf")), n, replacement)
    with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
        torch.multinomial(t(0.0, 0.0), n, replacement)
    with pytest.raises(RuntimeError, match="1 or 2 dim"):
        torch.multinomial(torch.ones(2, 2, 2, device="tpu"), 1, replacement)
    with pytest.raises(RuntimeError, match="n_sample <= 0"):
        torch.multinomial(t(1.0), 0, replacement)
    if not replacement:
        with pytest.raises(RuntimeError, match="without replacement"):
            torch.multinomial(t(1.0, 1.0), 3)


# ------------------------------------------------------------ logspace

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.float64], ids=str)
def test_logspace(dtype):
    for start, end, steps, base in [(-2.3, 3.7, 7, 2.5), (0, 2, 5, 10.0), (1, 3, 1, 10.0), (1, 3, 0, 2.0),
                                    (3, -1, 10, 0.5)]:
        expected = torch.logspace(start, end, steps, base=base, dtype=dtype)
        cmp(torch.logspace(start, end, steps, base=base, dtype=dtype, device="tpu"), expected)
    out = torch.empty(2, device="tpu")
    torch.logspace(0, 1, 4, out=out)
    assert_close(out.cpu(), torch.logspace(0, 1, 4))
    cmp(torch.logspace(torch.tensor(1.0), torch.tensor(2.0), 3, device="tpu"),
        torch.logspace(torch.tensor(1.0), torch.tensor(2.0), 3))


# ------------------------------------------------------------ batch norm with update, embedding max_norm

def test_batch_norm_with_update_and_backward():
    x, w, b = make((4, 3, 5)), make((3,), seed=1), make((3,), seed=2)
    stats = [torch.zeros(3), torch.ones(3)]
    expected = torch.ops.aten._batch_norm_with_update(x, w, b, *stats, 0.1, 1e-5)
    tstats = [torch.zeros(3, device="tpu"), torch.ones(3, device="tpu")]
    got = torch.ops.aten._batch_norm_with_update(*to_tpu([x, w, b]), *tstats, 0.1, 1e-5)
    cmp(got[:3], expected[:3])
    assert got[3].shape == (0,) and got[3].dtype == torch.uint8
    cmp(tstats, stats)  # updated in place
    # Eval mode from the running statistics, and the functional variant.
    cmp(torch.ops.aten._batch_norm_no_update(*to_tpu([x, w, b]), *tstats, 0.1, 1e-5)[0],
        torch.ops.aten._batch_norm_no_update(x, w, b, *stats, 0.1, 1e-5)[0])
    fn = torch.ops.aten._batch_norm_with_update_functional
    cmp(fn(*to_tpu([x, w, b]), *tstats, 0.1, 1e-5)[4:], fn(x, w, b, *stats, 0.1, 1e-5)[4:])
    check_grads(lambda x, w, b: torch.ops.aten._batch_norm_with_update(x, w, b, torch.zeros(3, device=x.device),
                                                                      torch.ones(3, device=x.device), 0.1, 1e-5)[0]
                * torch.arange(60.0, device=x.device).reshape(4, 3, 5), x, w, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0])
def test_embedding_max_norm(norm_type):
    weight = make((10, 4), seed=3) * 2
    idx = torch.tensor([[1, 2, 1], [7, 1, 0]])
    w_cpu, w_tpu = weight.clone(), weight.to("tpu")
    cmp(F.embedding(idx.to("tpu"), w_tpu, max_norm=1.5, norm_type=norm_type),
        F.embedding(idx, w_cpu, max_norm=1.5, norm_type=norm_type))
    cmp(w_tpu, w_cpu)  # renormalised in place, rows not looked up untouched
    a, b = weight.clone(), weight.to("tpu")
    torch.embedding_renorm_(b, torch.tensor([3, 3, 9], dtype=torch.int32, device="tpu"), 0.5, norm_type)
    torch.embedding_renorm_(a, torch.tensor([3, 3, 9], dtype=torch.int32), 0.5, norm_type)
    cmp(b, a)
    with pytest.raises(RuntimeError, match="2-dimensional"):
        torch.embedding_renorm_(torch.ones(3, device="tpu"), torch.tensor([0], device="tpu"), 1.0, 2.0)
    with pytest.raises(RuntimeError, match="Long, Int"):
        torch.embedding_renorm_(b, torch.tensor([0.0], device="tpu"), 1.0, 2.0)


# ------------------------------------------------------------ cdist, pdist

PS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf]


@pytest.mark.parametrize("p", PS)
def test_cdist(p):
    a, b = make((2, 5, 4), seed=1), make((1, 6, 4), seed=2)
    for mode in ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"]:
        same(torch.cdist, a, b, p=p, compute_mode=mode, tol=dict(atol=1e-4, rtol=1e-4))
    same(torch.cdist, make((30, 3)), make((4, 3), seed=5), p=p, tol=dict(atol=1e-4, rtol=1e-4))
    b = a[:, :3].clone()
    b[0, 0] = a[0, 1]  # a zero distance: its gradient is 0
    check_grads(lambda a, b: torch.cdist(a, b, p=p, compute_mode="donot_use_mm_for_euclid_dist")
                * torch.arange(15.0, device=a.device).reshape(5, 3), a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("p", PS)
def test_pdist(p):
    x = make((7, 3), seed=4)
    x[3] = x[5]  # a zero distance
    same(torch.pdist, x, p=p, tol=dict(atol=1e-4, rtol=1e-4))
    check_grads(lambda x: torch.pdist(x, p=p) * torch.arange(21.0, device=x.device), x, atol=1e-4, rtol=1e-4)


def test_distance_edge_cases_and_errors():
    same(torch.cdist, torch.zeros(0, 3), make((4, 3)))
    same(torch.cdist, torch.zeros(2, 0), torch.zeros(3, 0))
    same(torch.pdist, make((1, 3)))
    same(torch.pdist, torch.zeros(4, 0))
    same(torch.ops.aten._cdist_forward, make((3, 2)), make((4, 2), seed=1), 2.0, 1)
    with pytest.raises(RuntimeError, match="same number of columns"):
        torch.cdist(torch.ones(3, 4, device="tpu"), torch.ones(2, 3, device="tpu"))
    with pytest.raises(RuntimeError, match="non-negative p"):
        torch.cdist(torch.ones(3, 4, device="tpu"), torch.ones(2, 4, device="tpu"), p=-1)
    with pytest.raises(RuntimeError, match="2D"):
        torch.pdist(torch.ones(3, 4, 2, device="tpu"))


# ------------------------------------------------------------ histogram, histogramdd

def with_nan(x):
    x = x.clone()
    x.view(-1)[::7] = float("nan")
    return x


def test_histogram():
    x = make((50,))
    same(torch.histogram, x, 7)
    same(torch.histogram, make((5, 10)), 7, range=(-1.0, 1.5), weight=make((5, 10), seed=1, low=0, high=1),
         density=True)
    same(torch.histogram, with_nan(x), torch.tensor([-1.0, 0.0, 0.5, 2.0]))
    same(torch.histogram, x, torch.tensor([-1.0, 0.0, 0.5, 2.0]), density=True,
         weight=make((50,), seed=2, low=0, high=1))
    same(torch.histogram, torch.tensor([0.0, 1.0, 1.0, 3.0]), 3)  # the max lands in the last bin
    same(torch.histogram, torch.zeros(0), 4)
    same(torch.histogram, torch.ones(6), 4)  # a zero range widens by 0.5 each way
    hist, edges = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    torch.histogram(x.to("tpu"), 5, out=(hist, edges))
    cmp((hist, edges), torch.histogram(x, 5))
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histogram(with_nan(x).to("tpu"), 3)
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histogram(x.to("tpu"), 0)


def test_histogramdd():
    same(torch.histogramdd, make((30, 2)), [3, 4])
    same(torch.histogramdd, make((5, 6, 3)), [3, 4, 2], density=True, weight=make((5, 6), seed=1, low=0, high=1))
    same(torch.histogramdd, with_nan(make((30, 2))), [torch.tensor([-1.0, 0, 1]), torch.tensor([-2.0, 0.5, 1, 3])])
    same(torch.histogramdd, make((30, 2)), 5, range=[-1.0, 1.0, 0.0, 2.0])
    with pytest.raises(RuntimeError, match="range should have 4 elements"):
        torch.histogramdd(make((30, 2)).to("tpu"), 5, range=[-1.0, 1.0])


# ------------------------------------------------------------ segment_reduce

REDUCTIONS = ["max", "min", "sum", "mean", "prod"]


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_segment_reduce(reduce):
    d = torch.tensor([1.0, 5, float("nan"), 2, 3, 0, 4])
    lengths = torch.tensor([2, 0, 2, 3])
    same(torch.segment_reduce, d, reduce, lengths=lengths)
    same(torch.segment_reduce, d, reduce, lengths=lengths, initial=2.0)
    same(torch.segment_reduce, d, reduce, offsets=torch.tensor([0, 2, 2, 4, 7]))
    same(torch.segment_reduce, make((2, 6, 3)), reduce, lengths=torch.tensor([[1, 2, 3], [0, 4, 2]]), axis=1)
    same(torch.segment_reduce, make((6, 3)), reduce, lengths=torch.tensor([2, 4], dtype=torch.int32), axis=0)
    same(torch.segment_reduce, d, reduce, lengths=torch.tensor([1, 2]), unsafe=True)
    # Gradients, with ties, zeros and an empty segment.
    x = torch.tensor([1.0, 2, 2, 0, -1, -1, 3, 0, 0, 5])
    w = torch.tensor([1.0, -2, 3, 4])
    check_grads(lambda x: torch.segment_reduce(x, reduce, lengths=torch.tensor([3, 4, 0, 3], device=x.device))
                * w.to(x.device), x)
    check_grads(lambda x: torch.segment_reduce(x, reduce, offsets=torch.tensor([[0, 1, 3], [0, 2, 3]], device=x.device),
                                               axis=1, initial=1.5) * 2.0, make((2, 3, 2)))


def test_segment_reduce_errors():
    d = torch.ones(7, device="tpu")
    with pytest.raises(RuntimeError, match="negative value"):
        torch.segment_reduce(d, "sum", lengths=torch.tensor([1, 2, -3, 7], device="tpu"))
    with pytest.raises(RuntimeError, match="sum to data.size"):
        torch.segment_reduce(d, "sum", lengths=torch.tensor([1, 2], device="tpu"))
    with pytest.raises(RuntimeError, match="reduce argument must be"):
        torch.segment_reduce(d, "foo", lengths=torch.tensor([7], device="tpu"))
    with pytest.raises(RuntimeError, match="last dimension of lengths"):
        torch.segment_reduce(torch.ones(2, 6, device="tpu"), "sum", lengths=torch.tensor([6], device="tpu"), axis=1)


# ------------------------------------------------------------ igamma, igammac

@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=lambda f: f.__name__)
def test_igamma(fn):
    a, x = make((300,), low=1e-3, high=9), make((300,), seed=1, low=1e-3, high=9)
    check(fn, a, x)
    check(fn, a.double(), x.double())
    check(fn, make((4, 1), low=0.1, high=5), make((3,), seed=2, low=0.1, high=5))  # broadcasting
    # Every region of ATen's algorithm, including large a near x (Temme's region
    # on CPU), and the boundary values (a or x zero, negative, infinite, NaN).
    grid_a = torch.tensor([0.01, 0.5, 1, 2, 10, 30, 100, 250, 1000.0])
    grid_x = torch.tensor([1e-4, 0.3, 0.6, 1.05, 1.2, 5, 25, 90, 110, 260, 1100, 3000.0])
    sa = torch.tensor([0.0, 1, -1, math.inf, math.nan, 2, 0, math.inf, 3])
    sx = torch.tensor([1.0, 0, 1, 2, 1, math.inf, 0, math.inf, -2])
    check(fn, torch.cat([grid_a.repeat_interleave(12), sa]), torch.cat([grid_x.repeat(9), sx]), atol=1e-5, rtol=1e-4)
    # out= and in-place; integers are rejected as on CPU.
    out = torch.empty(0, device="tpu")
    fn(a.to("tpu"), x.to("tpu"), out=out)
    assert_close(out.cpu(), fn(a, x))
    t = a.to("tpu")
    getattr(t, fn.__name__ + "_")(x.to("tpu"))
    assert_close(t.cpu(), fn(a, x))
    with pytest.raises(NotImplementedError):
        fn(torch.ones(2, dtype=torch.int64, device="tpu"), torch.ones(2, dtype=torch.int64, device="tpu"))
    # The gradient with respect to x (ATen's formula, a composite).
    check_grads(lambda x: fn(a.to(x.device), x), x)



# ------------------------------------------------------------ hash_tensor

def test_hash_tensor():
    def hashed(x, **kw):
        expected = torch.hash_tensor(x, **kw)
        got = torch.hash_tensor(x.to("tpu"), **kw)
        assert got.dtype == torch.uint64 and got.shape == expected.shape
        assert torch.equal(got.cpu().view(torch.int64), expected.view(torch.int64))

    hashed(torch.tensor([1.5, -2.0, 3.25]))
    hashed(make((5, 7)))
    hashed(make((5, 7)), dim=1)
    hashed(make((2, 3, 5)), dim=(0, 2), keepdim=True)
    hashed(torch.tensor(2.5))
    hashed(torch.tensor([-0.0, math.nan]))
    hashed(torch.tensor([2**63 - 1, -2**63]))
    hashed(torch.tensor([True, False, True]))
    hashed(make((9,), torch.int8))
    hashed(make((6,), torch.bfloat16))
    hashed(torch.zeros(0, 3), dim=1)
    with pytest.raises(RuntimeError, match="Unknown hash_tensor mode"):
        torch.hash_tensor(torch.ones(3, device="tpu"), mode=1)
    with pytest.raises(IndexError, match="non-zero size"):
        torch.hash_tensor(torch.zeros(0, 3, device="tpu"), dim=0)


# ------------------------------------------------------------ ctc_loss

@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_ctc_loss(reduction):
    t, n, c = 12, 4, 6
    log_probs = make((t, n, c), seed=5).log_softmax(2)
    targets = make((n, 5), torch.int64, seed=6, low=1, high=c)
    targets[0, 1] = targets[0, 0]  # a repeated label: no skip between them
    input_lengths, target_lengths = [12, 10, 7, 12], [5, 3, 0, 4]
    concat = torch.cat([targets[b, :target_lengths[b]] for b in range(n)])
    for zero_infinity, (tg, il, tl) in [(False, (targets, input_lengths, target_lengths)),
                                        (True, (concat, torch.tensor(input_lengths), torch.tensor(target_lengths)))]:
        fn = lambda lp: F.ctc_loss(lp, to_tpu(tg) if lp.device.type == "tpu" else tg,  # noqa: E731
                                   to_tpu(il) if lp.device.type == "tpu" else il,
                                   to_tpu(tl) if lp.device.type == "tpu" else tl,
                                   reduction=reduction, zero_infinity=zero_infinity)
        check(fn, log_probs)
        check_grads(fn, log_probs, atol=1e-5, rtol=1e-4)


def test_ctc_loss_infeasible_and_errors():
    # A target longer than its input: infinite loss (0 with zero_infinity), NaN-free gradients.
    log_probs = make((3, 2, 5), seed=7).log_softmax(2)
    targets = torch.tensor([[1, 2, 3, 4], [1, 1, 2, 2]])
    for zero_infinity in (False, True):
        fn = lambda lp: F.ctc_loss(lp, to_tpu(targets) if lp.device.type == "tpu" else targets,  # noqa: E731
                                   [3, 3], [4, 2], reduction="sum", zero_infinity=zero_infinity)
        check(fn, log_probs)
        check_grads(fn, log_probs)
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(log_probs.to("tpu"), targets.to("tpu"), [3, 3], [4, 2], blank=7)
    with pytest.raises(RuntimeError, match="input_lengths must be of size batch_size"):
        torch.ops.aten._ctc_loss(log_probs.to("tpu"), targets.to("tpu"), [3], [4, 2])
