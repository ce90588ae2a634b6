"""torch.compile(backend="tpu", dynamic=True): sizes padded to buckets, masked, sliced back."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from support import TinyCausalLM, kv_cache_decode
from torch_tpu import _bucket_policy, _compile
from torch_tpu import testing as workloads


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    previous = torch_tpu.get_dynamic_buckets()
    yield
    torch_tpu.set_dynamic_buckets(previous)
    torch._dynamo.reset()


def _counts():
    torch.tpu.synchronize()
    s = _compile.stats()
    return torch_tpu.metrics()["compiles"], s["captures"], s["padded_calls"]


def test_bucket_policy():
    p = _bucket_policy._Policy(None)
    assert [p.bucket(n) for n in (2, 16, 17, 33, 4096, 5000)] == [16, 16, 32, 64, 4096, 5000]
    p = _bucket_policy._Policy("pow2:8:64")
    assert [p.bucket(n) for n in (3, 9, 64, 65)] == [8, 16, 64, 65]
    p = _bucket_policy._Policy("24, 48,96")
    assert [p.bucket(n) for n in (1, 25, 96, 97)] == [24, 48, 96, 97]
    for off in ("off", "", "0"):
        assert not _bucket_policy._Policy(off).enabled
    torch_tpu.set_dynamic_buckets([32, 8])
    assert torch_tpu.get_dynamic_buckets() == "8,32"
    torch_tpu.set_dynamic_buckets(None)
    assert torch_tpu.get_dynamic_buckets() == "off"
    torch_tpu.set_dynamic_buckets("pow2")
    assert torch_tpu.get_dynamic_buckets() == "pow2:16:4096"
    with pytest.raises(ValueError):
        torch_tpu.set_dynamic_buckets("pow2:64:8")


def _gpt(seq=128):
    torch.manual_seed(0)
    config = workloads.GPTConfig(vocab=64, d_model=32, layers=1, heads=2, seq=seq, batch=2)
    cpu_model = workloads.GPT(config)
    return cpu_model, copy.deepcopy(cpu_model).to("tpu")


def _tokens(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, (batch, length), generator=g), torch.randint(0, 64, (batch, length), generator=g)


def test_gpt_training_one_program_per_bucket():
    cpu_model, tpu_model = _gpt()
    step = torch.compile(lambda idx, targets: tpu_model(idx, targets)[1], backend="tpu", dynamic=True)
    deltas = []
    for i, length in enumerate((17, 20, 29, 32, 40)):
        idx, targets = _tokens(2, length, i)
        cpu_model.zero_grad()
        expected = cpu_model(idx, targets)[1]
        expected.backward()
        tpu_model.zero_grad()
        before = _counts()
        loss = step(idx.to("tpu"), targets.to("tpu"))
        loss.backward()
        after = _counts()
        deltas.append(tuple(a - b for a, b in zip(after, before)))
        torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
        for (name, p_cpu), p_tpu in zip(cpu_model.named_parameters(), tpu_model.parameters()):
            torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5, msg=name)
    # forward and backward: sealed once for bucket 32, replayed for 20, 29 and 32, sealed once for 64
    assert [d[1] for d in deltas] == [2, 0, 0, 0, 2], deltas
    assert [d[0] for d in deltas[1:4]] == [0, 0, 0], deltas
    assert all(d[2] == 2 for d in deltas), deltas


def test_inference_with_variable_batch_and_length():
    cpu_model, tpu_model = _gpt()
    compiled = torch.compile(tpu_model, backend="tpu", dynamic=True)
    captures = []
    with torch.no_grad():
        for i, (batch, length) in enumerate(((2, 17), (3, 20), (5, 31), (16, 32), (3, 33))):
            idx, _ = _tokens(batch, length, i)
            before = _counts()
            logits = compiled(idx.to("tpu"))
            after = _counts()
            captures.append(after[1] - before[1])
            assert logits.shape == (batch, length, 64)
            torch.testing.assert_close(logits.cpu(), cpu_model(idx), rtol=1e-4, atol=1e-5)
    assert captures == [1, 0, 0, 0, 1], captures


def _compare(fn, inputs, dynamic=True, grads=False, atol=1e-5, padded=True):
    """fn on tpu (compiled) against CPU for each input tuple; padded: every call ran padded."""
    compiled = torch.compile(fn, backend="tpu", dynamic=dynamic)
    calls = _compile.stats()["padded_calls"]
    for args in inputs:
        cpu_args = [a.clone().requires_grad_(grads and a.is_floating_point()) for a in args]
        tpu_args = [a.to("tpu").requires_grad_(grads and a.is_floating_point()) for a in args]
        expected, got = fn(*cpu_args), compiled(*tpu_args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        for e, g in zip(expected, got):
            assert g.shape == e.shape and g.dtype == e.dtype
            torch.testing.assert_close(g.detach().cpu(), e.detach(), rtol=1e-4, atol=atol, equal_nan=True)
        if grads:
            sum(o.float().sum() for o in expected if o.is_floating_point()).backward()
            sum(o.float().sum() for o in got if o.is_floating_point()).backward()
            for c, t in zip(cpu_args, tpu_args):
                if c.grad is not None:
                    torch.testing.assert_close(t.grad.cpu(), c.grad, rtol=1e-4, atol=atol)
    if padded:
        assert _compile.stats()["padded_calls"] - calls == len(inputs) * (2 if grads else 1), _compile.stats()["unpadded_graphs"]


def _batch(lengths, d=6, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, n, d, generator=g).to(dtype),) for n in lengths]


def test_reductions_over_the_padded_dim():
    def f(x):
        return (x.sum(1), x.mean(1), x.var(1), x.std(1, keepdim=True), x.amax(1), x.amin(1), x.argmax(1),
                x.max(1).values, torch.logsumexp(x, 1), F.softmax(x, 1), F.log_softmax(x, 1), x.cumsum(1),
                x.prod(1), (x > 0).any(1), (x > -5).all(1), x.sum(), x.mean()) + torch.var_mean(x, 1)

    before = _counts()
    _compare(f, _batch((17, 23, 30)))
    after = _counts()
    assert after[1] - before[1] == 1 and after[2] - before[2] == 3


def test_gradients_through_masked_ops():
    def f(x, w):
        h = torch.tanh(x @ w)                      # (b, t, d)
        att = F.softmax(h @ h.transpose(1, 2), -1)  # contracts d, normalises over t
        y = att @ h                                 # contracts the padded t
        return F.layer_norm(y, (6,)).mean(1), (h.var(1) + h.amax(1)).sum()

    g = torch.Generator().manual_seed(1)
    w = torch.randn(6, 6, generator=g)
    _compare(f, [(x, w) for (x,) in _batch((18, 27))], grads=True)


def test_indexing_cat_and_views():
    def f(x, y):
        last = x[:, -1]                     # from the real end, not the padded one
        grown = torch.cat([x, y], 1)        # y lands right after x's valid rows
        flat = grown.reshape(-1, 6)         # batch and length merged into one dim
        gram = flat.t() @ flat              # contracts the merged dim
        into = torch.zeros_like(x[:, :4]).scatter_add(1, (x.abs() * 10).long() % 4, x)  # padded index dim
        return last, grown * 2, gram, flat.sum(0), x[:, 2:].sum(1), into, torch.mv(x[0].t(), x[1, :, 0])

    g = torch.Generator().manual_seed(2)
    inputs = [(x, torch.randn(3, 2, 6, generator=g)) for (x,) in _batch((17, 21))]
    _compare(f, inputs)


def test_mark_dynamic_and_bfloat16():
    def f(x):
        return F.softmax(x.float(), -1).to(x.dtype), x.sum(-1), x.mean(-1)

    compiled = torch.compile(f, backend="tpu")
    before = _counts()
    for length in (19, 25):
        x = torch.randn(2, length, generator=torch.Generator().manual_seed(length)).to(torch.bfloat16)
        t = x.to("tpu")
        torch._dynamo.mark_dynamic(t, 1)
        for e, o in zip(f(x), compiled(t)):
            torch.testing.assert_close(o.cpu(), e, rtol=2e-2, atol=2e-2)
    after = _counts()
    assert after[1] - before[1] == 1 and after[2] - before[2] == 2


def test_input_mutation_writes_back_only_real_positions():
    def f(x):
        x.mul_(2)
        return x.sum(1)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for length in (17, 20):
        x = torch.randn(2, length, generator=torch.Generator().manual_seed(length))
        t = x.to("tpu")
        expected = f(x)
        torch.testing.assert_close(compiled(t).cpu(), expected)
        torch.testing.assert_close(t.cpu(), x)


def test_unsupported_op_runs_with_exact_shapes():
    def f(x):
        return torch.sort(x, 1).values * 2 + x.sum(1, keepdim=True)

    unpadded = dict(_compile.stats()["unpadded_graphs"])
    before = _counts()
    _compare(f, _batch((17, 20), d=3), padded=False)
    after = _counts()
    assert after[2] == before[2]               # nothing padded
    assert after[1] - before[1] == 2           # one program per length, as without buckets
    reasons = _compile.stats()["unpadded_graphs"]
    assert reasons.get("aten.sort.default", 0) == unpadded.get("aten.sort.default", 0) + 1, reasons


def test_forward_is_exact_when_its_backward_cannot_be_padded():
    # cumsum pads; its backward flips along the padded dim, which does not: neither is padded.
    before = _counts()
    _compare(lambda x: x.cumsum(1) * 2, _batch((17, 20)), grads=True, padded=False)
    after = _counts()
    assert after[2] == before[2]
    reasons = _compile.stats()["unpadded_graphs"]
    assert any(r.startswith("backward: ") and "flip" in r for r in reasons), reasons


def test_sizes_the_graph_cannot_take_run_exact():
    # A 24-row buffer sliced to the length: bucket 32 would not fit, so 20 runs exact.
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.randn(24, 4, generator=torch.Generator().manual_seed(0)))

        def forward(self, x):
            return x * self.table[: x.shape[1]].sum(1) + self.table[2:].sum()

    module = Scale()
    exact, padded = _compile.stats()["exact_dynamic_calls"], _compile.stats()["padded_calls"]
    compiled = torch.compile(copy.deepcopy(module).to("tpu"), backend="tpu", dynamic=True)
    for n in (12, 20):
        x = torch.randn(2, n)
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), module(x))
    assert _compile.stats()["exact_dynamic_calls"] == exact + 1
    assert _compile.stats()["padded_calls"] == padded + 1


def test_buckets_off_restores_per_length_programs():
    torch_tpu.set_dynamic_buckets("off")
    before = _counts()
    _compare(lambda x: x.softmax(1), _batch((17, 20)), padded=False)
    after = _counts()
    assert after[1] - before[1] == 2 and after[2] == before[2]


def test_kv_cache_decoding_is_padded():
    torch.manual_seed(0)
    cpu_model = TinyCausalLM()
    compiled = torch.compile(copy.deepcopy(cpu_model).to("tpu"), backend="tpu", dynamic=True)
    captures = kv_cache_decode(cpu_model, compiled, 20, measure=lambda: _counts()[1])
    # lengths 0 and 1 are specialised by Dynamo; 2..16 share bucket 16 and 17..32 bucket 32.
    # Entering a bucket seals once for a host-padded cache, once for the grown one.
    assert sum(captures[2:]) <= 4, captures
    assert sum(captures[4:16]) == 0, captures


def test_remembered_expression_values_match_sympy():
    # eval_expr remembers each expression's symbols and its value at given values:
    # every answer must be sympy's own, for any mix of expressions and values.
    import sympy
    from torch_tpu import _buckets
    s, t = sympy.symbols("s0 s1", integer=True, positive=True)
    exprs = [s, 2 * s + 1, s * t, sympy.floor(s / 3) + t, sympy.Integer(7)]
    for _ in range(2):  # the second round answers from memory
        for a in (1, 5, 64):
            for b in (2, 9):
                values = {s: a, t: b}
                for e in exprs:
                    assert _buckets.eval_expr(e, values) == int(e.subs({s: a, t: b}))
