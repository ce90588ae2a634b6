"""Remembered op graphs (csrc/aten/op_memo.h): an elementwise op whose operands
are alike to an earlier call's (dtypes, shapes, strides, offsets, aliasing,
storages' contents) reuses the graph that call built. Each test repeats ops so
that the later calls run from the memo, and compares every call with CPU."""
import pytest
import torch
import torch_tpu
from torch.testing import assert_close

from support import make, run_python

MODES = ["strict", "fused", "debug"]


def hits():
    return torch_tpu.metrics().get("op_memo_hits", 0)


@pytest.fixture(params=MODES)
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def test_repeated_ops_use_the_memo_and_match_cpu(mode):
    x, y = make((4, 5), seed=1), make((4, 5), seed=2)
    a, b = x.to("tpu"), y.to("tpu")
    before = hits()
    for i in range(4):
        assert_close(((a * b + i) / (b.abs() + 1) - a.sin()).cpu(), (x * y + i) / (y.abs() + 1) - x.sin())
        assert_close((a < b).cpu(), x < y)
        assert_close(torch.lerp(a, b, 0.25 * i).cpu(), torch.lerp(x, y, 0.25 * i))
        assert_close(torch.addcdiv(a, a, b.abs() + 1, value=i).cpu(), torch.addcdiv(x, x, y.abs() + 1, value=i))
    assert hits() > before


def test_aliased_views_and_offsets(mode):
    x = make((6, 5), seed=3)
    a = x.to("tpu")
    for i in range(3):
        # the same storage twice, in place
        a.add_(a)
        x.add_(x)
        a.mul_(0.5)
        x.mul_(0.5)
        # disjoint views of one storage at several offsets (runtime offsets)
        for k in range(3):
            a[k + 2].sub_(a[k])
            x[k + 2].sub_(x[k])
        # a transposed view, written in place, and a strided one read
        a.t().mul_(1.5)
        x.t().mul_(1.5)
        assert_close((a[:, ::2] * 2 + a[1:3, 1:4].sum()).cpu(), x[:, ::2] * 2 + x[1:3, 1:4].sum())
        assert_close(a.cpu(), x)


def test_cpu_scalars_are_runtime_values(mode):
    x = make((3, 3), seed=4)
    a = x.to("tpu")
    for value in [1.5, -2.0, 0.25, 7.0]:
        assert_close((a * value).cpu(), x * value)
        assert_close((a + torch.tensor(value)).cpu(), x + torch.tensor(value))
        assert_close(a.add(a, alpha=value).cpu(), x.add(x, alpha=value))


def test_storage_rewritten_in_another_dtype(mode):
    # A storage whose content changes dtype (through a view) between two alike calls.
    x = torch.arange(8, dtype=torch.float32)
    a = x.to("tpu")
    for i in range(3):
        a.mul_(2)
        x.mul_(2)
        a.view(torch.int32).add_(1)
        x.view(torch.int32).add_(1)
        assert_close(a.cpu(), x)


def test_foreach_lists_with_repeated_tensors(mode):
    xs = [make((3, 4), seed=s) for s in range(3)]
    ts = [x.to("tpu") for x in xs]
    for i in range(3):
        # the same tensor twice in one list: its second update reads the first's result
        torch._foreach_mul_([ts[0], ts[1], ts[0]], 1.5)
        torch._foreach_mul_([xs[0], xs[1], xs[0]], 1.5)
        torch._foreach_add_(ts, [0.5, -1.0, 2.0])
        torch._foreach_add_(xs, [0.5, -1.0, 2.0])
        torch._foreach_addcmul_(ts, ts, ts, value=0.01)
        torch._foreach_addcmul_(xs, xs, xs, value=0.01)
        torch._foreach_lerp_(ts, [t.flip(0) for t in ts], 0.3)
        torch._foreach_lerp_(xs, [x.flip(0) for x in xs], 0.3)
        for t, x in zip(ts, xs):
            assert_close(t.cpu(), x)


def test_errors_are_raised_on_every_call(mode):
    a = torch.ones(3, dtype=torch.bool, device="tpu")
    b = torch.ones(3, device="tpu")
    for _ in range(3):
        b.add_(1)  # an alike call that is remembered between the failing ones
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
            a - a
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            b + torch.ones(3)
    assert_close(b.cpu(), torch.full((3,), 4.0))


def test_memo_off_builds_every_op():
    code = (
        "import torch, torch_tpu\n"
        "a = torch.ones(4, device='tpu')\n"
        "for i in range(5): a = a * 2 + 1\n"
        "m = torch_tpu.metrics()\n"
        "print(m.get('op_memo_hits', 0), m.get('op_memo_recipes', 0), a.cpu().tolist())\n")
    on = run_python(code)
    off = run_python(code, TORCH_TPU_OP_MEMO="0")
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    on_hits, on_recipes, on_values = on.stdout.split(maxsplit=2)
    off_hits, off_recipes, off_values = off.stdout.split(maxsplit=2)
    assert float(on_hits) > 0 and float(on_recipes) > 0
    assert float(off_hits) == 0 and float(off_recipes) == 0
    assert on_values == off_values == str([63.0] * 4) + "\n"


def test_foreach_batches_are_remembered_whole(mode):
    # Lists longer than 16 (the memo indexes them), two dtypes, and each family of in-place list op.
    xs = [make((3, 2 + s % 3), seed=s) for s in range(20)]
    xs += [make((4,), seed=s).to(torch.bfloat16) for s in range(20, 22)]
    gs = [make(x.shape, seed=100 + s).to(x.dtype) for s, x in enumerate(xs)]
    ts, hs = [x.to("tpu") for x in xs], [g.to("tpu") for g in gs]
    on_tpu = torch.tensor(0.5, device="tpu")
    for i in range(4):
        before = hits()
        torch._foreach_mul_(ts, 0.9)
        torch._foreach_mul_(xs, 0.9)
        after = hits()
        if i >= 2:  # the key's third call on: one hit for the whole list
            assert after - before == 1
        weights = [0.1 + 0.05 * k for k in range(len(xs))]  # across lerp's 0.5 switch
        torch._foreach_lerp_(ts, hs, 0.2 if i % 2 else 0.7)
        torch._foreach_lerp_(xs, gs, 0.2 if i % 2 else 0.7)
        torch._foreach_lerp_(ts, hs, weights)
        torch._foreach_lerp_(xs, gs, weights)
        torch._foreach_addcdiv_(ts, hs, [h.abs() + 1 for h in hs], [0.01 * (k + i) for k in range(len(xs))])
        torch._foreach_addcdiv_(xs, gs, [g.abs() + 1 for g in gs], [0.01 * (k + i) for k in range(len(xs))])
        torch._foreach_add_(ts, hs, alpha=1 if i % 2 else 2)
        torch._foreach_add_(xs, gs, alpha=1 if i % 2 else 2)
        torch._foreach_mul_(ts, on_tpu)
        torch._foreach_mul_(xs, on_tpu.cpu())
        torch._foreach_mul_(ts, torch.tensor(1.5))
        torch._foreach_mul_(xs, torch.tensor(1.5))
        torch._foreach_abs_(ts)
        torch._foreach_abs_(xs)
        torch._foreach_sqrt_(ts)
        torch._foreach_sqrt_(xs)
        for t, x in zip(ts, xs):
            assert_close(t.cpu(), x)


def test_a_remembered_batch_bumps_versions(mode):
    ts = [torch.ones(3, device="tpu") for _ in range(4)]
    for _ in range(4):
        versions = [t._version for t in ts]
        torch._foreach_mul_(ts, 2.0)
        assert all(t._version > v for t, v in zip(ts, versions))
    assert_close(ts[0].cpu(), torch.full((3,), 16.0))


def test_a_failing_batch_fails_every_time(mode):
    ints = [torch.ones(3, dtype=torch.int64, device="tpu") for _ in range(3)]
    for _ in range(4):
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            torch._foreach_mul_(ints, 1.5)
        torch._foreach_mul_(ints, 2)
    assert_close(ints[0].cpu(), torch.full((3,), 16, dtype=torch.int64))


def test_foreach_over_views_of_one_storage(mode):
    # Rows of one matrix: one storage, read and written at several runtime offsets by one batch.
    x = make((5, 4), seed=7)
    a = x.to("tpu")
    for i in range(4):
        torch._foreach_mul_(list(a.unbind(0)), 1.5)
        torch._foreach_mul_(list(x.unbind(0)), 1.5)
        torch._foreach_add_(list(a[1:].unbind(0)), list(a[:-1].unbind(0)), alpha=1)
        torch._foreach_add_(list(x[1:].unbind(0)), list(x[:-1].unbind(0)), alpha=1)
        assert_close(a.cpu(), x)


def test_products_norms_and_softmax_are_remembered(mode):
    a, b, c = make((4, 3), seed=8), make((3, 5), seed=9), make((4, 5), seed=10)
    w, bias = make((5,), seed=11), make((5,), seed=12)
    ta, tb, tc, tw, tbias = (t.to("tpu") for t in (a, b, c, w, bias))
    before = hits()
    for i in range(3):
        for alpha, beta in [(1, 1), (2.5, 1), (1, 0), (0.5, -1.5)]:
            assert_close(torch.addmm(tc, ta, tb, alpha=alpha, beta=beta).cpu(),
                         torch.addmm(c, a, b, alpha=alpha, beta=beta))
        assert_close((ta @ tb).cpu(), a @ b)
        assert_close((tb.t() @ ta.t()).cpu(), b.t() @ a.t())  # transposed operands: other strides
        assert_close(torch.bmm(ta.expand(2, 4, 3), tb.expand(2, 3, 5)).cpu(), torch.bmm(a.expand(2, 4, 3), b.expand(2, 3, 5)))
        for dim in (0, 1):
            assert_close(torch.softmax(tc, dim).cpu(), torch.softmax(c, dim))
            assert_close(torch.log_softmax(tc, dim).cpu(), torch.log_softmax(c, dim))
        for eps in (1e-5, 0.5):
            assert_close(torch.nn.functional.layer_norm(tc, (5,), tw, tbias, eps).cpu(),
                         torch.nn.functional.layer_norm(c, (5,), w, bias, eps))
            assert_close(torch.nn.functional.layer_norm(tc, (4, 5), eps=eps).cpu(),
                         torch.nn.functional.layer_norm(c, (4, 5), eps=eps))
    assert hits() > before


def test_remembered_backward_of_products_norms_and_softmax(mode):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4),
                                torch.nn.LogSoftmax(-1))
    on_tpu = torch.nn.Sequential(*[m for m in __import__("copy").deepcopy(model)]).to("tpu")
    for step in range(3):
        x = make((5, 6), seed=20 + step)
        model.zero_grad()
        on_tpu.zero_grad()
        model(x).sum().backward()
        on_tpu(x.to("tpu")).sum().backward()
        for p, q in zip(model.parameters(), on_tpu.parameters()):
            assert_close(q.grad.cpu(), p.grad)


def test_matmul_precision_is_part_of_the_key():
    # A remembered product must not keep the precision it was recorded with: each new
    # precision is a program of its own (a shape no other test uses, so none is cached yet).
    a, b = make((11, 17), seed=1).to("tpu"), make((17, 19), seed=2).to("tpu")

    def programs():
        m = torch_tpu.metrics()
        return m.get("compiles", 0) + m.get("disk_cache_hits", 0)

    previous = torch.get_float32_matmul_precision()
    try:
        with torch_tpu.eager_mode("strict"):
            torch.set_float32_matmul_precision("highest")
            for _ in range(3):
                (a @ b).cpu()
            for precision in ["medium", "high"]:
                torch.set_float32_matmul_precision(precision)
                before = programs()
                (a @ b).cpu()
                assert programs() == before + 1, precision
    finally:
        torch.set_float32_matmul_precision(previous)


def test_sums_means_and_products_are_remembered(mode):
    x = make((3, 4, 5), seed=30)
    t = x.to("tpu")
    before = hits()
    for i in range(3):
        for dims in [None, (0,), (1, 2), (-1,)]:
            for keepdim in (False, True):
                if dims is None:
                    assert_close(t.sum().cpu(), x.sum())
                    assert_close(t.mean().cpu(), x.mean())
                    assert_close(t.prod().cpu(), x.prod())
                    continue
                assert_close(t.sum(dims, keepdim=keepdim).cpu(), x.sum(dims, keepdim=keepdim))
                assert_close(t.mean(dims, keepdim=keepdim).cpu(), x.mean(dims, keepdim=keepdim))
                assert_close(t.sum(dims, keepdim=keepdim, dtype=torch.float64).cpu(),
                             x.sum(dims, keepdim=keepdim, dtype=torch.float64))
        assert_close(t.prod(1, keepdim=True).cpu(), x.prod(1, keepdim=True))
        assert_close(t.to(torch.int32).sum(0).cpu(), x.to(torch.int32).sum(0))
    assert hits() > before


def test_copies_indexing_cat_and_losses_are_remembered(mode):
    x, y = make((4, 6), seed=40), make((6, 4), seed=41)
    index = torch.tensor([3, 0, 0, 2])
    target = torch.tensor([1, 5, 0, 3])
    weight = make((6,), seed=42).abs() + 0.1
    tx, ty, tindex, ttarget, tweight = (t.to("tpu") for t in (x, y, index, target, weight))
    before = hits()
    for i in range(3):
        # copy_ into a transposed view and from a conjugated / negated source
        cx, ct = x.clone(), tx.clone()
        cx.t().copy_(y * i)
        ct.t().copy_(ty * i)
        assert_close(ct.cpu(), cx)
        assert_close(torch.zeros_like(tx).copy_(tx.neg()).cpu(), torch.zeros_like(x).copy_(x.neg()))
        mask = x > 0.1 * i
        assert_close(tx.clone().masked_fill_(mask.to("tpu"), -i).cpu(), x.clone().masked_fill_(mask, -i))
        for dim in (0, 1):
            assert_close(tx.index_select(dim, tindex).cpu(), x.index_select(dim, index))
            assert_close(torch.gather(tx, dim, tindex.view(2, 2)).cpu(), torch.gather(x, dim, index.view(2, 2)))
            assert_close(torch.cat([tx, tx * i, ty.t()], dim).cpu(), torch.cat([x, x * i, y.t()], dim))
        for reduction in ("mean", "sum", "none"):
            for w, tw in ((None, None), (weight, tweight)):
                for ignore in (-100, 1):
                    expect = torch.nn.functional.nll_loss(x, target, w, reduction=reduction, ignore_index=ignore)
                    got = torch.nn.functional.nll_loss(tx, ttarget, tw, reduction=reduction, ignore_index=ignore)
                    assert_close(got.cpu(), expect)
    assert hits() > before


def test_remembered_embedding_and_loss_backward(mode):
    torch.manual_seed(1)
    emb = torch.nn.Embedding(7, 5, padding_idx=2)
    head = torch.nn.Linear(5, 7)
    on_tpu = [__import__("copy").deepcopy(m).to("tpu") for m in (emb, head)]
    for step in range(3):
        tokens = torch.tensor([[1, 2, 3, 2], [6, 0, 2, 5]]) if step % 2 else torch.tensor([[4, 4, 1, 0], [2, 3, 5, 6]])
        labels = (tokens + 1) % 7
        for m in (emb, head, *on_tpu):
            m.zero_grad()
        torch.nn.functional.cross_entropy(head(emb(tokens)).flatten(0, 1), labels.flatten()).backward()
        loss = torch.nn.functional.cross_entropy(on_tpu[1](on_tpu[0](tokens.to("tpu"))).flatten(0, 1),
                                                 labels.to("tpu").flatten())
        loss.backward()
        assert_close(on_tpu[0].weight.grad.cpu(), emb.weight.grad)
        assert_close(on_tpu[1].weight.grad.cpu(), head.weight.grad)


def test_fused_steps_from_the_memo_compile_nothing_new():
    # In fused mode a remembered op's nodes go straight to the pending graph: the
    # step's graph must be the one its ops built (same program, no new compile).
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    reference = __import__("copy").deepcopy(model)
    model = model.to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    x, y = make((5, 6), seed=50), torch.tensor([0, 2, 1, 1, 0])
    tx, ty = x.to("tpu"), y.to("tpu")

    def compiles():
        m = torch_tpu.metrics()
        return m.get("compiles", 0) + m.get("disk_cache_hits", 0)

    with torch_tpu.eager_mode("fused"):
        for step in range(6):
            if step == 3:  # the memo has recorded every op by now
                before, before_hits = compiles(), hits()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(tx), ty)
            loss.backward()
            opt.step()
            ref_opt.zero_grad()
            expect = torch.nn.functional.cross_entropy(reference(x), y)
            expect.backward()
            ref_opt.step()
            assert_close(loss.cpu(), expect)
        assert compiles() == before
        assert hits() > before_hits
    for p, q in zip(reference.parameters(), model.parameters()):
        assert_close(q.cpu(), p)



def test_strict_ops_from_the_memo_donate_and_compile_nothing_new():
    # Repeated in strict mode, an op is launched from the program the memo kept:
    # in-place updates still give their old buffer to the result (no transient
    # second copy) and nothing is compiled again.
    x = make((1024,), seed=60)
    with torch_tpu.eager_mode("strict"):
        t = x.to("tpu")
        for _ in range(3):
            t.mul_(1.01).add_(0.5)
        m = torch_tpu.metrics()
        compiles = m.get("compiles", 0) + m.get("disk_cache_hits", 0)
        before_hits = hits()
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        for _ in range(5):
            t.mul_(1.01).add_(0.5)
        torch.tpu.synchronize()
        assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
        m = torch_tpu.metrics()
        assert m.get("compiles", 0) + m.get("disk_cache_hits", 0) == compiles
        assert hits() >= before_hits + 10
    for _ in range(8):
        x.mul_(1.01).add_(0.5)
    assert_close(t.cpu(), x)


def test_powers_where_and_other_binary_ops_are_remembered(mode):
    x, y = make((3, 4), seed=70).abs() + 0.5, make((3, 4), seed=71)
    tx, ty = x.to("tpu"), y.to("tpu")
    before = hits()
    for e in [2, 0.5, 3.0, -1]:  # the exponent is a runtime value: one program for all
        assert_close(tx.pow(e).cpu(), x.pow(e))
        assert_close(torch.pow(e if e > 0 else 2.0, ty).cpu(), torch.pow(e if e > 0 else 2.0, y))
        assert_close(torch.remainder(ty * 3, e if e > 0 else 1.5).cpu(), torch.remainder(y * 3, e if e > 0 else 1.5))
        assert_close(torch.atan2(ty, tx * e).cpu(), torch.atan2(y, x * e))
        assert_close(torch.maximum(ty, tx - e).cpu(), torch.maximum(y, x - e))
        assert_close(torch.where(ty > e, tx, ty).cpu(), torch.where(y > e, x, y))
        w, tw = torch.empty(3, 4), torch.empty(3, 4, device="tpu")
        torch.where(y > e, x, y * 2, out=w)
        torch.where(ty > e, tx, ty * 2, out=tw)
        assert_close(tw.cpu(), w)
        z, tz = x.clone(), tx.clone()
        z.pow_(e)
        tz.pow_(e)
        assert_close(tz.cpu(), z)
    assert_close((tx.to(torch.int32) ** 2).cpu(), x.to(torch.int32) ** 2)
    assert hits() > before
    # Each of these alone, warmed up above, is remembered.
    cond = ty > 0
    for op in [lambda: tx.pow(1.5), lambda: torch.pow(2.0, ty), lambda: torch.where(cond, tx, ty),
               lambda: torch.remainder(ty, 0.75)]:
        op()
        before = hits()
        op()
        assert hits() == before + 1
