"""torch_tpu.distributed: collectives over the devices of one process as one
replicated XLA program each, checked against gloo's results for the same
collective (gloo runs with one thread per rank in this process)."""
import datetime
import threading

import pytest
import torch
import torch.distributed as dist

import torch_tpu
import torch_tpu.distributed as tdist
from support import run_python

N = 2  # the test process's devices (tests/conftest: XLA:CPU's default of two on two cores)
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.uint8]


def gloo(per_rank, n=N):
    """Runs per_rank(group, rank) on n gloo ranks (threads of this process); their results by rank."""
    store = dist.HashStore()
    results, errors = [None] * n, []

    def run(rank):
        try:
            group = dist.ProcessGroupGloo(store, rank, n, datetime.timedelta(seconds=60))
            results[rank] = per_rank(group, rank)
        except Exception as e:  # surfaced below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return results


def inputs(dtype, shape=(4, 3), n=N):
    g = torch.Generator().manual_seed(7)
    if dtype.is_floating_point:
        return [torch.randn(shape, generator=g).to(dtype) for _ in range(n)]
    return [torch.randint(0, 9 if dtype != torch.uint8 else 4, shape, generator=g).to(dtype) for _ in range(n)]


def on_devices(cpu_tensors):
    return [t.to("tpu:%d" % i) for i, t in enumerate(cpu_tensors)]


def gloo_op(name):
    return getattr(dist.ReduceOp, name)


def gloo_reduce_scatter(xs, op):
    def per_rank(g, r):
        out = torch.empty((xs[r].shape[0] // N,) + xs[r].shape[1:], dtype=xs[r].dtype)
        opts = dist.ReduceScatterOptions()
        opts.reduceOp = gloo_op(op)
        g._reduce_scatter_base(out, xs[r].clone(), opts).wait()
        return out

    return gloo(per_rank)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_all_reduce_matches_gloo(op, dtype):
    if op.startswith("B") and dtype.is_floating_point:
        pytest.skip("bitwise reduce ops take integers")
    if op == "PRODUCT" and dtype == torch.uint8:
        pytest.skip("overflow: wraps differently by accumulation order")
    xs = inputs(dtype)
    if op == "AVG":  # gloo has no AVG: its SUM, then divided as NCCL divides (integers truncate)
        summed = gloo(lambda g, r: g.allreduce([xs[r].clone()]).get_future().wait()[0])
        expected = [s / N if dtype.is_floating_point else torch.div(s, N, rounding_mode="trunc") for s in summed]
        expected = [e.to(dtype) for e in expected]
    else:
        opts = dist.AllreduceOptions()
        opts.reduceOp = gloo_op(op)
        expected = gloo(lambda g, r: g.allreduce([xs[r].clone()], opts).get_future().wait()[0])
    ts = on_devices(xs)
    tdist.all_reduce(ts, op=gloo_op(op))
    for t, e in zip(ts, expected):
        torch.testing.assert_close(t.cpu(), e, rtol=0.02 if dtype == torch.bfloat16 else None,
                                   atol=0.02 if dtype == torch.bfloat16 else None)


@pytest.mark.parametrize("op,reference", [("SUM", torch.any), ("MAX", torch.any), ("MIN", torch.all),
                                          ("PRODUCT", torch.all)])
def test_bool_all_reduce_is_logical(op, reference):
    xs = [torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])]
    ts = on_devices(xs)
    tdist.all_reduce(ts, op=gloo_op(op))
    for t in ts:
        torch.testing.assert_close(t.cpu(), reference(torch.stack(xs), dim=0))


@pytest.mark.parametrize("op", ["BAND", "BXOR"])
def test_bitwise_reduce_scatter_matches_gloo(op):
    xs = inputs(torch.int32)
    expected = gloo_reduce_scatter(xs, op)
    ts = on_devices(xs)
    outs = [torch.empty((4 // N, 3), dtype=torch.int32, device=t.device) for t in ts]
    tdist.reduce_scatter(outs, ts, op=gloo_op(op))
    for o, e in zip(outs, expected):
        torch.testing.assert_close(o.cpu(), e)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_all_gather_matches_gloo(dtype):
    xs = inputs(dtype)

    def per_rank(g, r):
        out = torch.empty((N * 4, 3), dtype=dtype)
        g._allgather_base(out, xs[r].clone()).wait()
        return out

    expected = gloo(per_rank)
    ts = on_devices(xs)
    outs = [torch.empty((N * 4, 3), dtype=dtype, device=t.device) for t in ts]
    tdist.all_gather(outs, ts)
    for o, e in zip(outs, expected):
        torch.testing.assert_close(o.cpu(), e)


@pytest.mark.parametrize("op", ["SUM", "MAX"])
def test_reduce_scatter_matches_gloo(op):
    xs = inputs(torch.float32)
    expected = gloo_reduce_scatter(xs, op)
    ts = on_devices(xs)
    outs = [torch.empty((4 // N, 3), device=t.device) for t in ts]
    tdist.reduce_scatter(outs, ts, op=gloo_op(op))
    for o, e in zip(outs, expected):
        torch.testing.assert_close(o.cpu(), e)


def test_all_to_all_matches_gloo():
    xs = inputs(torch.float32)

    def per_rank(g, r):
        out = torch.empty((4, 3))
        g.alltoall_base(out, xs[r].clone(), [], [], dist.AllToAllOptions()).wait()
        return out

    expected = gloo(per_rank)
    ts = on_devices(xs)
    outs = [torch.empty_like(t) for t in ts]
    tdist.all_to_all(outs, ts)
    for o, e in zip(outs, expected):
        torch.testing.assert_close(o.cpu(), e)


@pytest.mark.parametrize("src", [0, 1])
def test_broadcast_matches_gloo_exactly(src):
    xs = inputs(torch.float32)
    xs[src][0, 0] = -0.0  # a sum-based broadcast would lose the sign
    xs[src][0, 1] = float("nan")

    def per_rank(g, r):
        t = xs[r].clone()
        opts = dist.BroadcastOptions()
        opts.rootRank = src
        g.broadcast([t], opts).wait()
        return t

    expected = gloo(per_rank)
    ts = on_devices(xs)
    tdist.broadcast(ts, src=src)
    for t, e in zip(ts, expected):
        torch.testing.assert_close(t.cpu(), e, equal_nan=True)
        assert torch.signbit(t.cpu()[0, 0]) == torch.signbit(e[0, 0])


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.int64, torch.bfloat16, torch.float64,
                                   torch.complex64], ids=str)
def test_broadcast_is_exact_for_every_dtype(dtype):
    g = torch.Generator().manual_seed(3)
    xs = [(torch.randn(3, 5, generator=g) * 100).to(dtype) for _ in range(N)]
    ts = on_devices(xs)
    tdist.broadcast(ts, src=1)
    for t in ts:
        assert torch.equal(t.cpu(), xs[1])


def test_permute_is_gloos_send_recv_ring():
    xs = inputs(torch.float32)

    def per_rank(g, r):
        out = torch.empty_like(xs[r])
        send = g.send([xs[r].clone()], (r + 1) % N, 0)
        g.recv([out], (r - 1) % N, 0).wait()
        send.wait()
        return out

    expected = gloo(per_rank)
    ts = on_devices(xs)
    outs = [torch.empty_like(t) for t in ts]
    tdist.permute(outs, ts, [(i, (i + 1) % N) for i in range(N)])
    for o, e in zip(outs, expected):
        torch.testing.assert_close(o.cpu(), e)
    # A device no pair targets gets zeros.
    tdist.permute(outs, ts, [(0, 1)])
    torch.testing.assert_close(outs[0].cpu(), torch.zeros(4, 3))
    torch.testing.assert_close(outs[1].cpu(), xs[0])


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_views_pending_work_and_later_ops(mode):
    """Inputs that are views and values still pending in fused mode are read as
    they are; outputs written through views; ops after the collective see it."""
    with torch_tpu.eager_mode(mode):
        bases = [torch.arange(24, dtype=torch.float32, device="tpu:%d" % i).reshape(4, 6) * (i + 1) for i in range(N)]
        views = [(b * 2)[:, ::2] for b in bases]  # pending in fused mode; strided
        outs = [torch.zeros(8, 3, device=b.device).t().contiguous().t() for b in bases]
        tdist.all_reduce(views)
        tdist.all_gather([o[:8] for o in outs], views)
        after = [v.sum() + 1 for v in views]
        cpu_views = [(torch.arange(24.).reshape(4, 6) * (i + 1) * 2)[:, ::2] for i in range(N)]
        total = sum(cpu_views)
        for v, o, a in zip(views, outs, after):
            torch.testing.assert_close(v.cpu(), total)
            torch.testing.assert_close(o.cpu(), torch.cat([total, total]))
            torch.testing.assert_close(a.cpu(), total.sum() + 1)


def test_pending_readers_keep_the_value_from_before_the_collective():
    with torch_tpu.eager_mode("fused"):
        xs = [torch.ones(4, device="tpu:%d" % i) * (i + 1) for i in range(N)]
        ys = [x * 10 for x in xs]  # pending: reads x as it is before the all_reduce
        tdist.all_reduce(xs)
        zs = [x + y for x, y in zip(xs, ys)]
        for i, (y, z) in enumerate(zip(ys, zs)):
            torch.testing.assert_close(y.cpu(), torch.full((4,), 10.0 * (i + 1)))
            torch.testing.assert_close(z.cpu(), torch.full((4,), 3.0 + 10.0 * (i + 1)))


def test_programs_are_cached_and_counted():
    ts = on_devices(inputs(torch.float32))
    tdist.all_reduce(ts)
    torch_tpu.reset_metrics()
    for _ in range(3):
        tdist.all_reduce(ts)
    m = torch_tpu.metrics()
    assert m["collectives_device_transport"] == 3
    assert m["compiles"] == 0


def test_bad_calls_raise_before_anything_runs():
    a, b = torch.ones(4, device="tpu:0"), torch.ones(4, device="tpu:1")
    with pytest.raises(ValueError, match="two tensors on tpu:0"):
        tdist.all_reduce([a, torch.ones(4, device="tpu:0")])
    with pytest.raises(ValueError, match="must be on a tpu device"):
        tdist.all_reduce([a, torch.ones(4)])
    with pytest.raises(ValueError, match="shape"):
        tdist.all_reduce([a, torch.ones(5, device="tpu:1")])
    with pytest.raises(RuntimeError, match="dtype"):
        tdist.all_reduce([a, torch.ones(4, device="tpu:1", dtype=torch.int32)])
    with pytest.raises(ValueError, match="divide"):
        tdist.reduce_scatter([torch.empty(1, device="tpu:0"), torch.empty(1, device="tpu:1")],
                             [torch.ones(3, device="tpu:0"), torch.ones(3, device="tpu:1")])
    with pytest.raises(ValueError, match="expected"):
        tdist.all_gather([torch.empty(4, device="tpu:0"), torch.empty(4, device="tpu:1")], [a, b])
    with pytest.raises(RuntimeError, match="bitwise"):
        tdist.all_reduce([a, b], op=dist.ReduceOp.BXOR)
    with pytest.raises(ValueError, match="not supported"):
        tdist.all_reduce([a, b], op=dist.ReduceOp.PREMUL_SUM)
    with pytest.raises(ValueError, match="src 2"):
        tdist.broadcast([a, b], src=2)
    with pytest.raises(ValueError, match="once"):
        tdist.permute([a, b], [a, b], [(0, 1), (1, 1)])
    # Nothing the caller had was touched.
    torch.testing.assert_close(a.cpu(), torch.ones(4))
    torch.testing.assert_close(b.cpu(), torch.ones(4))


def test_four_devices_and_a_subset():
    """Four devices, and a collective over two of them (its own program, its own device assignment)."""
    out = run_python("""
import torch, torch_tpu.distributed as tdist
xs = [torch.full((2,), float(i + 1), device="tpu:%d" % i) for i in range(4)]
tdist.all_reduce(xs)
print([x.cpu().tolist() for x in xs])
ys = [torch.full((2,), float(i + 1), device="tpu:%d" % i) for i in (3, 1)]
tdist.all_reduce(ys, op=torch.distributed.ReduceOp.MAX)
g = [torch.empty(4, device=y.device) for y in ys]
tdist.all_gather(g, [torch.tensor([1., 2.], device="tpu:3"), torch.tensor([3., 4.], device="tpu:1")])
print([y.cpu().tolist() for y in ys], [x.cpu().tolist() for x in g])
""", TORCH_TPU_CPU_DEVICES="4")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == str([[10.0, 10.0]] * 4)
    assert lines[-1] == str([[4.0, 4.0], [4.0, 4.0]]) + " " + str([[1.0, 2.0, 3.0, 4.0]] * 2)


def test_a_replicated_program_loads_from_the_disk_cache(tmp_path):
    code = """
import torch, torch_tpu, torch_tpu.distributed as tdist
xs = [torch.full((3,), float(i + 1), device="tpu:%d" % i) for i in range(2)]
tdist.all_reduce(xs)
m = torch_tpu.metrics()
print([x.cpu().tolist() for x in xs], m["compiles"], m["disk_cache_hits"])
"""
    runs = [run_python(code, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_CPU_DEVICES="2") for _ in range(2)]
    for out in runs:
        assert out.returncode == 0, out.stderr[-2000:]
    first, second = (out.stdout.split("\n")[-2] for out in runs)
    assert first.startswith("[[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]]") and not first.endswith(" 0 0"), first
    # the second process compiles nothing: its replicated programs come from disk, device assignment included
    assert second.startswith("[[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]] 0 "), second
    assert not second.endswith(" 0"), second
