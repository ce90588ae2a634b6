"""Index and shape ops against CPU PyTorch (TORCH_TPU_FALLBACK=error): cat/stack,
range factories, tril/triu, flip, roll, padding, repeat, gather/scatter family,
index_select/index_add/index_copy, advanced indexing and index_put_, boolean
masks, nonzero/masked_select, embedding; forward, backward, out= and in-place."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_tpu  # noqa: F401
from support import make, to_tpu

FLOAT_TYPES = [torch.float32, torch.bfloat16]
ALL_TYPES = [torch.float32, torch.bfloat16, torch.int64, torch.int32]


def idx(shape, high, seed=0, low=0):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed))


def check(fn, *cpu_args, rtol=None, atol=None):
    """Runs fn on CPU and on tpu copies of the tensor args; compares outputs."""
    expected = fn(*cpu_args)
    got = fn(*to_tpu(list(cpu_args)))
    assert got.device.type == "tpu"
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert_close(got.cpu(), expected, rtol=rtol, atol=atol, equal_nan=True)
    return got


def check_grads(fn, *cpu_args, rtol=None, atol=None):
    """Gradients of <fn(args), w> for a random w, on CPU and tpu, w.r.t. every float arg."""
    results = []
    for device in ("cpu", "tpu"):
        args = [a.detach().to(device).requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
                for a in cpu_args]
        y = fn(*args)
        w = make(tuple(y.shape), y.dtype, seed=7).to(device)
        (y * w).sum().backward()
        results.append([a.grad.cpu() for a in args if isinstance(a, torch.Tensor) and a.grad is not None])
    assert len(results[0]) == len(results[1]) > 0
    for g_cpu, g_tpu in zip(*results):
        assert_close(g_tpu, g_cpu, rtol=rtol, atol=atol)


def same_error(fn, *cpu_args):
    """fn raises on tpu exactly what it raises on CPU (type and message)."""
    with pytest.raises(Exception) as cpu_error:
        fn(*cpu_args)
    with pytest.raises(type(cpu_error.value)) as tpu_error:
        fn(*to_tpu(list(cpu_args)))
    assert str(tpu_error.value).split("\n")[0] == str(cpu_error.value).split("\n")[0]


def check_inplace(fn, self_cpu, *cpu_args):
    """fn mutates its first argument; compares the mutated tensors and the return value."""
    a, b = self_cpu.clone(), self_cpu.clone().to("tpu")
    r_cpu = fn(a, *cpu_args)
    r_tpu = fn(b, *to_tpu(list(cpu_args)))
    assert r_tpu is b or r_tpu.data_ptr() == b.data_ptr()
    assert_close(b.cpu(), a)
    assert_close(r_tpu.cpu(), r_cpu)


def check_out(fn, out_shape, dtype, *cpu_args):
    """fn(*args, out=out) into a wrongly sized out tensor (resized as ATen does)."""
    out_cpu = torch.empty(out_shape, dtype=dtype)
    out_tpu = torch.empty(out_shape, dtype=dtype, device="tpu")
    fn(*cpu_args, out=out_cpu)
    r = fn(*to_tpu(list(cpu_args)), out=out_tpu)
    assert r is out_tpu
    assert out_tpu.shape == out_cpu.shape
    assert_close(out_tpu.cpu(), out_cpu)


# ---------------------------------------------------------------- cat / stack


@pytest.mark.parametrize("dtype", ALL_TYPES + [torch.bool], ids=str)
def test_cat(dtype):
    a, b, c = make((2, 3), dtype, 0), make((4, 3), dtype, 1), make((1, 3), dtype, 2)
    check(lambda *t: torch.cat(t), a, b, c)
    check(lambda x, y: torch.cat([x, y], dim=1), make((2, 3), dtype), make((2, 5), dtype, 1))
    check(lambda x, y: torch.cat([x, y], dim=-1), make((2, 3, 1), dtype), make((2, 3, 2), dtype, 1))


def test_cat_promotion_and_empty():
    check(lambda x, y: torch.cat([x, y]), make((2, 3), torch.int32), make((1, 3), torch.float32))
    check(lambda x, y, z: torch.cat([x, y, z]), make((2,), torch.bool), make((3,), torch.int64), make((1,), torch.bfloat16))
    # Legacy empty tensors (shape [0]) are skipped, but still take part in type promotion.
    check(lambda x, y: torch.cat([x, y], dim=1), make((2, 3)), torch.empty(0, dtype=torch.float64))
    check(lambda x, y: torch.cat([x, y]), make((0, 3)), make((2, 3), seed=1))
    check(lambda x, y: torch.cat([x, y]), torch.empty(0), torch.empty(0))
    check(lambda x: torch.cat([x]), make((3, 2)))


def test_cat_out_and_errors():
    check_out(lambda x, y, out: torch.cat([x, y], out=out), (0,), torch.float32, make((2, 3)), make((2, 3), seed=1))
    a, b = make((2, 3)).to("tpu"), make((2, 4)).to("tpu")
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0"):
        torch.cat([a, b])
    with pytest.raises(RuntimeError, match="same device|devices"):
        torch.cat([a, make((2, 3))])
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.cat([a, a], dim=2)


def test_cat_stack_backward():
    check_grads(lambda x, y: torch.cat([x, y], 1), make((2, 3)), make((2, 2), seed=1))
    check_grads(lambda x, y: torch.stack([x, y], 1), make((2, 3)), make((2, 3), seed=1))


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack(dim):
    check(lambda x, y, z: torch.stack([x, y, z], dim), make((2, 3)), make((2, 3), seed=1), make((2, 3), seed=2))
    check(lambda x, y: torch.hstack([x, y]), make((2, 3)), make((2, 1), seed=1))
    check(lambda x, y: torch.vstack([x, y]), make((3,)), make((3,), seed=1))


# ---------------------------------------------------------------- range factories


ARANGES = [(5,), (2, 9), (0, 1, 0.1), (10, 0, -3), (-2.5, 3.5, 0.7), (0, 10, 3), (1, 1), (0, 1e6 + 3, 1)]


@pytest.mark.parametrize("args", ARANGES, ids=str)
@pytest.mark.parametrize("dtype", [None, torch.float32, torch.int64, torch.int32, torch.bfloat16, torch.float64], ids=str)
def test_arange(args, dtype):
    if dtype in (torch.int64, torch.int32) and any(isinstance(a, float) and a != int(a) for a in args[2:]):
        return  # a fractional step truncates to 0 for integer dtypes: an error on both, checked below
    expected = torch.arange(*args, dtype=dtype)
    got = torch.arange(*args, dtype=dtype, device="tpu")
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # CPU's vectorized kernel rounds each block's base to bfloat16 before
    # adding steps; tpu rounds start + step * i once: allow one bf16 ulp.
    exact = dtype != torch.bfloat16
    assert_close(got.cpu(), expected, rtol=0 if exact else 8e-3, atol=0)


def test_arange_out_and_errors():
    out = torch.empty(0, device="tpu", dtype=torch.int64)
    torch.arange(2, 12, 2, out=out)
    assert_close(out.cpu(), torch.arange(2, 12, 2))
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 5, 0, device="tpu")
    with pytest.raises(RuntimeError, match="upper bound and larger bound inconsistent"):
        torch.arange(5, 0, 1, device="tpu")
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 5, 0.5, dtype=torch.int64, device="tpu")


@pytest.mark.parametrize("args", [(0, 1, 5), (-3, 7, 11), (2, 2, 1), (0, 1, 0), (5, -5, 64), (0, 10, 4)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16], ids=str)
def test_linspace(args, dtype):
    expected = torch.linspace(*args, dtype=dtype)
    got = torch.linspace(*args, dtype=dtype, device="tpu")
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # CPU computes bfloat16 linspace in bfloat16 arithmetic, rounding at every
    # step (and per vector block); tpu rounds once from float32.
    tol = dict(rtol=2e-2, atol=4e-2) if dtype == torch.bfloat16 else {}
    assert_close(got.cpu(), expected, **tol)


# ---------------------------------------------------------------- tril / triu / flip / roll / pad / repeat


@pytest.mark.parametrize("fn", [torch.tril, torch.triu], ids=lambda f: f.__name__)
@pytest.mark.parametrize("diagonal", [0, 1, -2, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_tril_triu(fn, diagonal, dtype):
    check(lambda x: fn(x, diagonal), make((4, 6), dtype))
    check(lambda x: fn(x, diagonal), make((2, 5, 3), dtype))
    check_inplace(lambda x: getattr(x, fn.__name__ + "_")(diagonal), make((3, 5), dtype))
    check_out(lambda x, out: fn(x, diagonal, out=out), (0,), dtype, make((3, 3), dtype))


def test_tril_triu_backward_and_errors():
    check_grads(lambda x: torch.tril(x, -1), make((4, 4)))
    check_grads(lambda x: torch.triu(x, 1), make((3, 5)))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.tril(make((3,)).to("tpu"))


@pytest.mark.parametrize("dims", [(0,), (1,), (0, 2), (-1,), ()], ids=str)
def test_flip(dims):
    check(lambda x: torch.flip(x, dims), make((3, 4, 5)))
    check(lambda x: torch.flip(x, dims), make((3, 4, 5), torch.int32))
    check_grads(lambda x: torch.flip(x, dims), make((3, 4, 5)))


def test_flip_edge():
    check(lambda x: torch.flip(x, (0,)), torch.tensor(3.0))
    check(lambda x: torch.flip(x, (0,)), make((0, 3)))
    same_error(lambda t: torch.flip(t, (0, 0)), make((3, 4)))


@pytest.mark.parametrize("shifts,dims", [(1, 0), (-2, 1), ((1, 7), (0, 1)), (3, None), (-11, None), (5, -1), (0, 0)],
                         ids=str)
def test_roll(shifts, dims):
    x = make((3, 5))
    check(lambda t: torch.roll(t, shifts, dims), x)
    check(lambda t: torch.roll(t, shifts, dims), make((3, 5), torch.int64))
    check_grads(lambda t: torch.roll(t, shifts, dims), x)


def test_roll_errors():
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        torch.roll(make((3, 4)).to("tpu"), (1, 2), (0,))
    check(lambda t: torch.roll(t, 2, 0), make((0, 3)))


@pytest.mark.parametrize("pad", [(1, 2), (0, 0, 2, 1), (-1, 2), (1, -2, -1, 0), (2, 2, 1, 1, 1, 0), (-2, -1)], ids=str)
@pytest.mark.parametrize("value", [0, 1.5])
def test_constant_pad_nd(pad, value):
    check(lambda x: F.pad(x, pad, value=value), make((3, 4, 5)))
    check(lambda x: torch.constant_pad_nd(x, pad, value), make((3, 4, 5)))
    check(lambda x: torch.constant_pad_nd(x, pad, int(value)), make((3, 4, 5), torch.int64))
    check_grads(lambda x: F.pad(x, pad, value=value), make((3, 4, 5)))


def test_constant_pad_nd_errors():
    same_error(lambda t: torch.constant_pad_nd(t, (1, 2, 3)), make((3, 4)))
    same_error(lambda t: torch.constant_pad_nd(t, (-3, -2)), make((3, 4)))
    same_error(lambda t: torch.constant_pad_nd(t, (1, 1) * 3), make((3, 4)))
    check(lambda t: torch.constant_pad_nd(t, (1, 1)), make((2, 0)))


@pytest.mark.parametrize("repeats", [(2, 3), (1, 1), (2, 1, 2), (3, 0), (4, 2, 1, 1)], ids=str)
def test_repeat(repeats):
    check(lambda x: x.repeat(*repeats), make((2, 3)))
    check(lambda x: x.repeat(*repeats), make((2, 3), torch.bool))
    check_grads(lambda x: x.repeat(*repeats), make((2, 3)))


def test_repeat_errors():
    with pytest.raises(RuntimeError, match="can not be smaller than number of dimensions"):
        make((2, 3)).to("tpu").repeat(2)


# ---------------------------------------------------------------- gather / scatter


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dtype, dim):
    x = make((4, 5), dtype)
    size = x.shape[dim]
    index = idx((3, 2), size) if dim == 0 else idx((4, 3), size)
    check(lambda t, i: torch.gather(t, dim, i), x, index)
    check(lambda t, i: torch.gather(t, dim, i), x, index.to(torch.int64))
    check_out(lambda t, i, out: torch.gather(t, dim, i, out=out), (0,), dtype, x, index)


def test_gather_backward_and_edges():
    x = make((4, 5))
    index = idx((6, 5), 4)  # duplicates: the backward scatter_add must sum them
    check_grads(lambda t: torch.gather(t, 0, index.to(t.device)), x)
    check(lambda t, i: torch.gather(t, 0, i), torch.tensor(2.5), torch.tensor(0))
    check(lambda t, i: torch.gather(t, 1, i), make((3, 4)), torch.zeros(3, 0, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="Index tensor must have the same number of dimensions"):
        torch.gather(x.to("tpu"), 0, torch.zeros(3, dtype=torch.int64, device="tpu"))
    with pytest.raises(RuntimeError, match="gather"):
        torch.gather(x.to("tpu"), 0, torch.zeros(2, 2, dtype=torch.float32, device="tpu"))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("dtype", ALL_TYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(dtype, dim):
    x, src = make((4, 5), dtype), make((4, 5), dtype, 1)
    # Unique positions per column/row so that scatter (replace) is deterministic.
    index = torch.stack([torch.randperm(4)[:3] for _ in range(5)], 1) if dim == 0 else \
        torch.stack([torch.randperm(5)[:3] for _ in range(4)], 0)
    check(lambda t, i, s: torch.scatter(t, dim, i, s), x, index, src)
    check(lambda t, i: torch.scatter(t, dim, i, 2), x, index)
    check(lambda t, i, s: torch.scatter_add(t, dim, i, s), x, idx(index.shape, x.shape[dim]), src)
    check(lambda t, i, s: torch.scatter(t, dim, i, s, reduce="add"), x, idx(index.shape, x.shape[dim]), src)
    check(lambda t, i, s: torch.scatter(t, dim, i, s, reduce="multiply"), x, idx(index.shape, x.shape[dim]), src)
    check(lambda t, i: torch.scatter(t, dim, i, 3, reduce="add"), x, idx(index.shape, x.shape[dim]))
    check_inplace(lambda t, i, s: t.scatter_(dim, i, s), x, index, src)
    check_inplace(lambda t, i: t.scatter_(dim, i, 7), x, index)
    check_inplace(lambda t, i, s: t.scatter_add_(dim, i, s), x, idx(index.shape, x.shape[dim]), src)
    check_inplace(lambda t, i, s: t.scatter_(dim, i, s, reduce="multiply"), x, idx(index.shape, x.shape[dim]), src)
    check_out(lambda t, i, s, out: torch.scatter(t, dim, i, s, out=out), (0,), dtype, x, index, src)
    check_out(lambda t, i, s, out: torch.scatter_add(t, dim, i, s, out=out), (0,), dtype, x, index, src)


def test_scatter_backward_and_errors():
    x, src = make((4, 5)), make((6, 5), seed=1)
    index = idx((6, 5), 4)
    check_grads(lambda t, s: torch.scatter_add(t, 0, index.to(t.device), s), x, src)
    unique = torch.stack([torch.randperm(4)[:3] for _ in range(5)], 1)
    check_grads(lambda t, s: torch.scatter(t, 0, unique.to(t.device), s), x, src[:3])
    check_grads(lambda t: torch.scatter(t, 1, unique[:, :4].t().contiguous().to(t.device), 1.5), make((5, 4)))
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        torch.scatter(x.to("tpu"), 0, index.to("tpu"), src.to("tpu", torch.float64))
    with pytest.raises(RuntimeError, match="reduce argument must be either add or multiply"):
        torch.scatter(x.to("tpu"), 0, index.to("tpu"), src.to("tpu"), reduce="max")


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_scatter_reduce(reduce, include_self, dtype):
    x, src = make((4, 5), dtype, low=-4, high=5), make((6, 5), dtype, 1, low=-4, high=5)
    index = idx((6, 5), 4)
    fn = lambda t, i, s: torch.scatter_reduce(t, 0, i, s, reduce, include_self=include_self)  # noqa: E731
    check(fn, x, index, src)
    check(lambda t, i, s: torch.scatter_reduce(t, 1, i, s, reduce, include_self=include_self), x, idx((4, 3), 5),
          src[:4])
    check_inplace(lambda t, i, s: t.scatter_reduce_(0, i, s, reduce, include_self=include_self), x, index, src)
    check_out(lambda t, i, s, out: torch.scatter_reduce(t, 0, i, s, reduce, include_self=include_self, out=out),
              (0,), dtype, x, index, src)
    if dtype.is_floating_point and reduce in ("sum", "mean"):
        check_grads(fn, x, index, src)


def test_one_hot():
    check(lambda t: F.one_hot(t, 6), idx((3, 4), 6))


# ---------------------------------------------------------------- index_select / index_add / index_copy


@pytest.mark.parametrize("dtype", ALL_TYPES + [torch.bool], ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(dtype, dim):
    x = make((4, 5, 3), dtype)
    index = idx((7,), x.shape[dim])
    check(lambda t, i: torch.index_select(t, dim, i), x, index)
    check(lambda t, i: torch.index_select(t, dim, i), x, index.to(torch.int32))
    check_out(lambda t, i, out: torch.index_select(t, dim, i, out=out), (0,), dtype, x, index)


def test_index_select_backward_and_edges():
    check_grads(lambda t: torch.index_select(t, 1, idx((9,), 5).to(t.device)), make((4, 5)))
    check(lambda t, i: torch.index_select(t, 0, i), make((4, 5)), torch.tensor(2))
    check(lambda t, i: torch.index_select(t, 0, i), make((4, 5)), torch.zeros(0, dtype=torch.int64))
    check(lambda t, i: torch.index_select(t, 0, i), torch.tensor(1.5), torch.tensor([0]))
    same_error(lambda t, i: torch.index_select(t, 0, i), make((0, 5)), torch.tensor([0]))
    same_error(lambda t, i: torch.index_select(t, 0, i), make((0,)), torch.tensor([1]))  # IndexError, as CPU
    same_error(lambda t, i: torch.index_select(t, 0, i), make((4, 5)), torch.zeros(2, 2, dtype=torch.int64))
    same_error(lambda t, i: torch.index_select(t, 0, i), make((4, 5)), torch.zeros(2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
@pytest.mark.parametrize("dim", [0, 1])
def test_index_add_copy(dtype, dim):
    x = make((4, 5), dtype)
    n = 7 if dim == 0 else 6
    source = make((n, 5) if dim == 0 else (4, n), dtype, 1)
    index = idx((n,), x.shape[dim])
    check(lambda t, i, s: torch.index_add(t, dim, i, s), x, index, source)
    check(lambda t, i, s: torch.index_add(t, dim, i, s, alpha=3), x, index, source)
    check_inplace(lambda t, i, s: t.index_add_(dim, i, s, alpha=2), x, index, source)
    check_out(lambda t, i, s, out: torch.index_add(t, dim, i, s, out=out), (0,), dtype, x, index, source)
    perm = torch.randperm(x.shape[dim])[:3]
    src3 = make((3, 5) if dim == 0 else (4, 3), dtype, 2)
    check(lambda t, i, s: torch.index_copy(t, dim, i, s), x, perm, src3)
    check_inplace(lambda t, i, s: t.index_copy_(dim, i, s), x, perm, src3)


def test_index_add_backward_bf16():
    index = idx((7,), 4)
    check_grads(lambda t, s: torch.index_add(t, 0, index.to(t.device), s, alpha=0.5), make((4, 5)), make((7, 5), seed=1))
    check(lambda t, i, s: torch.index_add(t, 0, i, s), make((4, 5), torch.bfloat16), index,
          make((7, 5), torch.bfloat16, 1), rtol=2e-2, atol=5e-2)


# ---------------------------------------------------------------- advanced indexing


INDEXERS = {
    "one": lambda x, i, j: x[i],
    "one_neg": lambda x, i, j: x[i - 4],
    "two_adjacent": lambda x, i, j: x[i, j],
    "slice_then": lambda x, i, j: x[:, j],
    "split": lambda x, i, j: x[i, :, j[:, :1]] if x.dim() == 3 else x[i, :, j],
    "broadcast": lambda x, i, j: x[i[:, None], j[None, :2]],
    "none_and_ellipsis": lambda x, i, j: x[None, ..., j],
    "list": lambda x, i, j: x[[0, 2, 3]],
    "scalar_and_tensor": lambda x, i, j: x[1, j],
}


@pytest.mark.parametrize("name", list(INDEXERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_index(name, dtype):
    fn = INDEXERS[name]
    x = make((4, 5, 6), dtype)
    i, j = idx((3, 2), 4, 1), idx((3, 2), 5, 2)
    check(fn, x, i, j)


def test_index_backward():
    i, j = idx((3, 2), 4, 1), idx((3, 2), 5, 2)
    for name in ["one", "two_adjacent", "split", "broadcast", "slice_then"]:
        check_grads(lambda x: INDEXERS[name](x, i.to(x.device), j.to(x.device)), make((4, 5, 6)))


def test_index_errors_and_edges():
    x = make((4, 5)).to("tpu")
    with pytest.raises(IndexError, match="too many indices"):
        x[torch.tensor([0], device="tpu"), torch.tensor([0], device="tpu"), torch.tensor([0], device="tpu")]
    with pytest.raises(IndexError, match="shape mismatch"):
        x[torch.tensor([0, 1], device="tpu"), torch.tensor([0, 1, 2], device="tpu")]
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        x[torch.tensor([0.0], device="tpu")]
    check(lambda t, i: t[i], make((4, 5)), torch.zeros(0, dtype=torch.int64))
    check(lambda t, i: t[:, i], make((4, 5)), torch.tensor([[1, 2], [3, 4]]))
    # CPU index tensors work with tpu tensors, as with CUDA.
    assert_close(x[torch.tensor([3, 0])].cpu(), x.cpu()[torch.tensor([3, 0])])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_index_put(dtype):
    x = make((4, 5, 6), dtype)
    i = torch.tensor([3, 0, -1])
    j = torch.tensor([1, 4, 2])
    v = make((3, 6), dtype, 1)

    def put(t, i, j, v):
        t = t.clone()
        t[i, j] = v
        return t

    check(put, x, i, j, v)
    check(lambda t, i, v: t.index_put((i,), v[:1, None]), x, i, v)
    check(lambda t, j, v: t.index_put((slice(None), j) if False else (torch.arange(4)[:, None], j[None]), v[0, 0]), x, j, v)
    # accumulate with duplicates sums them
    dup = torch.tensor([1, 1, 2, 1])
    check(lambda t, i, v: t.index_put((i,), v, accumulate=True), x, dup, make((4, 5, 6), dtype, 2))

    def iadd(t, i, v):
        t = t.clone()
        t[:, i] += v
        return t

    check(iadd, x, torch.tensor([0, 3]), make((4, 2, 6), dtype, 3))
    check_inplace(lambda t, i, v: t.index_put_((i,), v, accumulate=True), x, dup, make((4, 5, 6), dtype, 2))


def test_index_put_backward_and_errors():
    i = torch.tensor([2, 0])
    check_grads(lambda t, v: t.index_put((i.to(t.device),), v), make((4, 3)), make((2, 3), seed=1))
    check_grads(lambda t, v: t.index_put((i.to(t.device),), v, accumulate=True), make((4, 3)), make((2, 3), seed=1))
    x = make((4, 3)).to("tpu")
    with pytest.raises(RuntimeError, match="shape mismatch: value tensor"):
        x[torch.tensor([0, 1], device="tpu")] = torch.ones(3, 3, device="tpu")
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
        x.index_put_((torch.tensor([0], device="tpu"),), torch.ones(3, dtype=torch.float64, device="tpu"))


# ---------------------------------------------------------------- boolean masks, nonzero, masked_select


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (), (0, 3)], ids=str)
def test_nonzero(dtype, shape):
    x = make(shape, dtype, low=-1, high=2) if dtype != torch.bool else make(shape, dtype)
    if dtype.is_floating_point:
        x = x.round()
    check(torch.nonzero, x)
    check(lambda t: torch.nonzero(t, as_tuple=True)[0] if t.dim() else torch.nonzero(t), x)
    check(torch.argwhere, x)


def test_nonzero_all_and_none():
    check(torch.nonzero, torch.zeros(3, 4))
    check(torch.nonzero, torch.ones(3, 4))
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    torch.nonzero(torch.tensor([0, 1, 1, 0, 1], device="tpu"), out=out)
    assert_close(out.cpu(), torch.tensor([[1], [2], [4]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool], ids=str)
def test_masked_select(dtype):
    x, m = make((4, 5), dtype), make((4, 5), torch.bool, 1)
    check(torch.masked_select, x, m)
    check(torch.masked_select, x, m[0])  # broadcast mask
    check(torch.masked_select, x[0], m)  # broadcast self
    check(torch.masked_select, x, torch.zeros(4, 5, dtype=torch.bool))
    check_out(lambda t, mm, out: torch.masked_select(t, mm, out=out), (0,), dtype, x, m)
    check_grads(torch.masked_select, make((4, 5)), m)


def test_masked_scatter():
    # The backward needs masked_fill_, native on the elementwise branch.
    x, m, s = make((4, 5)), make((4, 5), torch.bool, 1), make((20,), seed=2)
    check(lambda t, mm, ss: t.masked_scatter(mm, ss), x, m, s)
    check(lambda t, mm, ss: t.masked_scatter(mm, ss), x, m[1], s)
    check_grads(lambda t, ss: t.masked_scatter(m.to(t.device), ss), x, s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_boolean_mask_indexing(dtype):
    x = make((4, 5, 3), dtype)
    m2, m1 = make((4, 5), torch.bool, 1), make((5,), torch.bool, 2)
    check(lambda t, m: t[m], x, m2)
    check(lambda t, m: t[:, m], x, m1)
    check(lambda t, m: t[m, 1:], x, m2)
    check(lambda t, m: t[t > 0] if t.dtype != torch.bool else t[m], x, m2)

    def put_scalar(t, m):
        t = t.clone()
        t[m] = 7
        return t

    def put_tensor(t, m):
        t = t.clone()
        t[m] = torch.arange(int(m.sum()) * 3, device=t.device).reshape(-1, 3).to(t.dtype)
        return t

    def put_middle(t, m):
        t = t.clone()
        t[:, m] = -1
        return t

    def iadd(t, m):
        t = t.clone()
        t[m] += 5
        return t

    check(put_scalar, x, m2)
    check(put_tensor, x, m2)
    check(put_middle, x, m1)
    check(iadd, x, m2)
    check_grads(lambda t: t[m2.to(t.device)], make((4, 5, 3)))
    with pytest.raises(IndexError, match="The shape of the mask"):
        x.to("tpu")[torch.ones(3, dtype=torch.bool, device="tpu")]


# ---------------------------------------------------------------- embedding


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize("scale", [False, True])
def test_embedding(padding_idx, scale):
    weight = make((10, 4))
    indices = torch.tensor([[1, 2, 2, 9], [0, 2, 5, 1]])
    fn = lambda w, i: F.embedding(i, w, padding_idx=padding_idx, scale_grad_by_freq=scale)  # noqa: E731
    check(fn, weight, indices)
    check_grads(lambda w: fn(w, indices.to(w.device)), weight)


def test_embedding_module_and_bf16():
    emb = torch.nn.Embedding(12, 3)
    i = idx((5,), 12)
    check(lambda w, i: F.embedding(i, w), emb.weight.detach().to(torch.bfloat16), i)
    check_grads(lambda w: F.embedding(i.to(w.device).to(torch.int32), w), emb.weight.detach())


# ---------------------------------------------------------------- views and unchecked ranges


def test_writes_through_views():
    """In-place index ops on a view update the base tensor, as on CPU."""
    base_cpu = make((5, 6))
    base_tpu = base_cpu.to("tpu")
    i = torch.tensor([3, 0])
    for base, dev in ((base_cpu, "cpu"), (base_tpu, "tpu")):
        view = base.t()[1:]
        view[i.to(dev)] = torch.full((2, 5), 9.0, device=dev)
        view.index_add_(1, i.to(dev), torch.ones(5, 2, device=dev))
        view.scatter_(0, i.to(dev)[None].expand(2, 2), -1.0)
        base[:, 2].masked_scatter_(base[:, 2] > 0, torch.arange(5.0, device=dev))
    assert_close(base_tpu.cpu(), base_cpu)


def test_out_of_range_indices_are_unchecked():
    """Documented behaviour, not ATen's: reads clamp an out-of-range index into
    range and writes drop it (CPU raises an IndexError), because checking
    would cost a host sync per op."""
    x = torch.arange(12.0).reshape(4, 3)
    t = x.to("tpu")
    bad = torch.tensor([1, 7], device="tpu")
    assert_close(t.index_select(0, bad).cpu(), x[[1, 3]])
    assert_close(t[bad].cpu(), x[[1, 3]])
    assert_close(t[bad, bad - 7].cpu(), x[[1, 3], [0, 0]])
    assert_close(t.index_add(0, bad, torch.ones(2, 3, device="tpu")).cpu(), x.index_add(0, torch.tensor([1]),
                                                                                          torch.ones(1, 3)))


# Debug mode reads index values back and raises as CPU does, before anything is written.
_x = torch.arange(12.0).reshape(3, 4)
_bad = torch.tensor([0, 5])
_DEBUG_INDEX_CASES = {
    "gather": lambda x, d: x.gather(0, torch.tensor([[0, 5, 0, 0]], device=d)),
    "gather_negative": lambda x, d: x.gather(0, torch.tensor([[0, -1, 0, 0]], device=d)),
    "index_select": lambda x, d: x.index_select(0, _bad.to(d)),
    "index_select_negative": lambda x, d: x.index_select(0, torch.tensor([-1], device=d)),
    "embedding": lambda x, d: torch.nn.functional.embedding(_bad.to(d), x),
    "index": lambda x, d: x[_bad.to(d)],
    "index_second_dim": lambda x, d: x[:, torch.tensor([1, -5], device=d)],
    "index_two_tensors": lambda x, d: x[torch.tensor([0], device=d), torch.tensor([5], device=d)],
    "index_put_": lambda x, d: x.index_put_((_bad.to(d),), torch.tensor(1.0, device=d)),
    "index_put_accumulate": lambda x, d: x.index_put_((_bad.to(d),), torch.tensor(1.0, device=d), accumulate=True),
    "scatter_": lambda x, d: x.scatter_(0, torch.tensor([[0, 5, 0, 0]], device=d), 1.0),
    "scatter_add_": lambda x, d: x.scatter_add_(0, torch.tensor([[0, 5, 0, 0]], device=d), torch.ones(1, 4, device=d)),
    "scatter_reduce_": lambda x, d: x.scatter_reduce_(0, torch.tensor([[0, 5, 0, 0]], device=d),
                                                      torch.ones(1, 4, device=d), "amax"),
    "index_add_": lambda x, d: x.index_add_(0, _bad.to(d), torch.ones(2, 4, device=d)),
    "index_copy_": lambda x, d: x.index_copy_(0, _bad.to(d), torch.ones(2, 4, device=d)),
    "index_fill_": lambda x, d: x.index_fill_(0, torch.tensor([-4], device=d), 1.0),
    "index_reduce_": lambda x, d: x.index_reduce_(0, _bad.to(d), torch.ones(2, 4, device=d), "prod"),
    "take": lambda x, d: x.take(torch.tensor([12], device=d)),
    "take_negative": lambda x, d: x.take(torch.tensor([-13], device=d)),
    "put_": lambda x, d: x.put_(torch.tensor([12], device=d), torch.tensor([1.0], device=d)),
    "nll_loss": lambda x, d: torch.nn.functional.nll_loss(x, torch.tensor([0, 4, 1], device=d)),
    "cross_entropy_negative": lambda x, d: torch.nn.functional.cross_entropy(x, torch.tensor([0, -1, 1], device=d)),
}


@pytest.mark.parametrize("case", sorted(_DEBUG_INDEX_CASES))
def test_debug_mode_raises_for_out_of_range_indices_as_cpu_does(case):
    op = _DEBUG_INDEX_CASES[case]
    expected_x = _x.clone()
    with pytest.raises((IndexError, RuntimeError)) as cpu_error:
        op(expected_x, "cpu")
    t = _x.to("tpu")
    with torch_tpu.eager_mode("debug"), pytest.raises(cpu_error.type) as tpu_error:
        op(t, "tpu")
    cpu_message = str(cpu_error.value).splitlines()[0]
    assert str(tpu_error.value).startswith(cpu_message), (str(tpu_error.value), cpu_message)
    assert "torch_tpu debug mode" in str(tpu_error.value)
    assert_close(t.cpu(), _x)  # nothing written


def test_debug_mode_accepts_indices_in_range_and_ignored_targets():
    x = _x.to("tpu")
    with torch_tpu.eager_mode("debug"):
        assert_close(x[torch.tensor([-3, 2], device="tpu")].cpu(), _x[[-3, 2]])
        assert_close(x.take(torch.tensor([-12, 11], device="tpu")).cpu(), _x.take(torch.tensor([-12, 11])))
        assert_close(x.clone().index_fill_(0, torch.tensor([-1], device="tpu"), 0.0).cpu(),
                     _x.clone().index_fill_(0, torch.tensor([-1]), 0.0))
        target = torch.tensor([0, -100, 3])
        assert_close(torch.nn.functional.cross_entropy(x, target.to("tpu")).cpu(),
                     torch.nn.functional.cross_entropy(_x, target))
        assert_close(torch.nn.functional.nll_loss(x, torch.tensor([0, 7, 3], device="tpu"), ignore_index=7).cpu(),
                     torch.nn.functional.nll_loss(_x, torch.tensor([0, 7, 3]), ignore_index=7))


@pytest.mark.parametrize("pad", [[0, 0, 0, -1], [0, 0, 1, 1], [-1, -1], [0, 0, 0, 0, -1, 0]])
def test_constant_pad_of_a_transposed_tensor_is_laid_out_as_on_cpu(pad):
    # a narrowing pad keeps the input's dimension order on CPU (a widening one does not)
    x = torch.randn(2, 4, 8, 6).transpose(1, 2)
    expected, got = torch.constant_pad_nd(x, pad), torch.constant_pad_nd(x.to("tpu"), pad)
    assert got.stride() == expected.stride()
    assert torch.equal(got.cpu(), expected)
