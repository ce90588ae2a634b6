"""_foreach_* ops: results vs CPU, one launch (or one fused append) per call,
optimizers with foreach=True and clip_grad_norm_ vs CPU, error paths."""
import pytest
import torch
from torch.testing import assert_close

import torch_tpu
from support import make, to_tpu

SHAPES = [(3, 4), (5,), (), (2, 3, 2), (0, 3), (7,), (1, 1), (4, 2), (6,)]


def tensors(dtype=torch.float32, seed=0, low=-3, high=3, shapes=SHAPES):
    return [make(s, dtype, seed=seed + i, low=low, high=high) for i, s in enumerate(shapes)]


def positive(dtype=torch.float32, seed=0, shapes=SHAPES):
    return tensors(dtype, seed, low=0.5, high=3, shapes=shapes)


def same_as_cpu(fn, *cpu_args, inplace=False, rtol=None, atol=None):
    """fn on CPU and on tpu copies: results (or the updated first list) match."""
    tpu_args = [to_tpu(a) for a in cpu_args]
    expected, got = fn(*cpu_args), fn(*tpu_args)
    if inplace:
        expected, got = cpu_args[0], tpu_args[0]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.device.type == "tpu" and g.dtype == e.dtype, (g.device, g.dtype, e.dtype)
        assert_close(g.cpu(), e, rtol=rtol, atol=atol, equal_nan=True)


def lists(n):
    return [tensors(seed=10 * k) for k in range(n)]


# name -> (args maker, extra positional/keyword args) for the binary family
BINARY = ["add", "sub", "mul", "div", "clamp_min", "clamp_max", "maximum", "minimum", "pow"]


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("inplace", [False, True])
def test_binary_scalar_list_scalarlist(name, inplace):
    op = getattr(torch, f"_foreach_{name}{'_' if inplace else ''}")
    base = positive if name == "pow" else tensors
    n = len(SHAPES)
    scalars = [0.5 + 0.25 * i for i in range(n)]
    same_as_cpu(lambda a: op(a, 1.5), base(), inplace=inplace)
    same_as_cpu(lambda a: op(a, scalars), base(), inplace=inplace)
    same_as_cpu(lambda a, b: op(a, b), base(), tensors(seed=50), inplace=inplace)
    if name in ("add", "sub"):
        same_as_cpu(lambda a, b: op(a, b, alpha=-0.3), base(), tensors(seed=50), inplace=inplace)


@pytest.mark.parametrize("name", ["add", "mul", "div"])
@pytest.mark.parametrize("inplace", [False, True])
def test_binary_tensor_scalar(name, inplace):
    op = getattr(torch, f"_foreach_{name}{'_' if inplace else ''}")
    kw = {"alpha": 2} if name == "add" else {}
    # A CPU 0-dim tensor (Adam's step counts) and a tpu one.
    same_as_cpu(lambda a: op(a, torch.tensor(0.75), **kw), tensors(), inplace=inplace)
    cpu = tensors()
    expected = op(cpu, torch.tensor(1.25), **kw)
    got_list = to_tpu(tensors())
    got = op(got_list, torch.tensor(1.25, device="tpu"), **kw)
    for g, e in zip(got_list if inplace else got, cpu if inplace else expected):
        assert_close(g.cpu(), e)


def test_pow_scalar_and_tensor():
    same_as_cpu(lambda a: torch._foreach_pow(2.0, a), tensors())
    same_as_cpu(lambda a: torch._foreach_pow(3, a), tensors(torch.int64, low=0, high=4))


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("inplace", [False, True])
def test_pointwise(name, inplace):
    op = getattr(torch, f"_foreach_{name}{'_' if inplace else ''}")
    n = len(SHAPES)
    args = lambda: (tensors(), tensors(seed=20), positive(seed=40))  # noqa: E731
    same_as_cpu(lambda a, b, c: op(a, b, c), *args(), inplace=inplace)
    same_as_cpu(lambda a, b, c: op(a, b, c, value=-0.7), *args(), inplace=inplace)
    scalars = [0.1 * (i + 1) for i in range(n)]
    same_as_cpu(lambda a, b, c: op(a, b, c, scalars), *args(), inplace=inplace)
    same_as_cpu(lambda a, b, c: op(a, b, c, torch.tensor(scalars)), *args(), inplace=inplace)


@pytest.mark.parametrize("inplace", [False, True])
def test_lerp(inplace):
    op = torch._foreach_lerp_ if inplace else torch._foreach_lerp
    n = len(SHAPES)
    same_as_cpu(lambda a, b: op(a, b, 0.3), tensors(), tensors(seed=30), inplace=inplace)
    same_as_cpu(lambda a, b: op(a, b, [0.1 * i for i in range(n)]), tensors(), tensors(seed=30), inplace=inplace)
    same_as_cpu(lambda a, b, w: op(a, b, w), tensors(), tensors(seed=30), tensors(seed=60, low=0, high=1),
                inplace=inplace)


@pytest.mark.parametrize("inplace", [False, True])
def test_lerp_scalar_weight_by_dtype(inplace):
    # The weight is one wrapped number for the whole list, whatever the lists' dtypes
    # (half types compute in float, as on CPU).
    op = torch._foreach_lerp_ if inplace else torch._foreach_lerp
    mixed = lambda seed: [make((3,), torch.float32, seed=seed), make((2, 2), torch.float64, seed=seed + 1)]  # noqa: E731
    same_as_cpu(lambda a, b: op(a, b, 0.3), tensors(torch.float64), tensors(torch.float64, seed=30), inplace=inplace)
    same_as_cpu(lambda a, b: op(a, b, 0.3), tensors(torch.bfloat16), tensors(torch.bfloat16, seed=30),
                inplace=inplace)
    same_as_cpu(lambda a, b: op(a, b, 0.3), mixed(0), mixed(30), inplace=inplace)
    same_as_cpu(lambda a, b: op(a, b, 7), tensors(), tensors(seed=30), inplace=inplace)  # an int weight


UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
         "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign",
         "sin", "sinh", "sqrt", "tan", "tanh", "trunc"]
DOMAIN_01 = {"acos", "asin"}
POSITIVE = {"log", "log10", "log2", "sqrt", "rsqrt", "lgamma", "reciprocal", "log1p"}


@pytest.mark.parametrize("name", UNARY)
def test_unary(name):
    def args(dtype=torch.float32):
        if name in DOMAIN_01:
            return tensors(dtype, low=-0.9, high=0.9)
        return positive(dtype) if name in POSITIVE else tensors(dtype)

    fn = getattr(torch, f"_foreach_{name}")
    fn_ = getattr(torch, f"_foreach_{name}_")
    same_as_cpu(fn, args(), rtol=1e-5, atol=1e-5)
    same_as_cpu(fn_, args(), inplace=True, rtol=1e-5, atol=1e-5)
    same_as_cpu(fn, args(torch.bfloat16), rtol=2e-2, atol=2e-2)


def test_unary_nan_and_int_promotion():
    nan = [torch.tensor([float("nan"), -1.0, 4.0]), torch.tensor(float("nan"))]
    same_as_cpu(torch._foreach_sqrt, nan)
    same_as_cpu(torch._foreach_abs, nan)
    same_as_cpu(lambda a: torch._foreach_maximum(a, 0.0), nan)
    same_as_cpu(lambda a, b: torch._foreach_minimum(a, b), nan, [torch.ones(3), torch.tensor(2.0)])
    # integer lists: sqrt promotes to float, neg/abs keep the dtype
    ints = tensors(torch.int32, low=0, high=9)
    same_as_cpu(torch._foreach_sqrt, ints)
    same_as_cpu(torch._foreach_neg, ints)
    same_as_cpu(torch._foreach_abs, ints)


def test_dtypes_and_promotion():
    # bfloat16 lists compute in float32 and round once, as ATen does
    same_as_cpu(lambda a, b: torch._foreach_add(a, b, alpha=0.3), tensors(torch.bfloat16), tensors(torch.bfloat16, 5))
    same_as_cpu(lambda a: torch._foreach_mul(a, 0.1), tensors(torch.bfloat16))
    same_as_cpu(lambda a, b, c: torch._foreach_addcdiv(a, b, c, value=0.01), tensors(torch.bfloat16),
                tensors(torch.bfloat16, 7), positive(torch.bfloat16, 9))
    # int list and float scalar: float results for the functional variants
    ints = tensors(torch.int64)
    same_as_cpu(lambda a: torch._foreach_add(a, 1.5), ints)
    same_as_cpu(lambda a: torch._foreach_mul(a, [0.5] * len(SHAPES)), ints)
    same_as_cpu(lambda a: torch._foreach_div(a, 2), ints)
    same_as_cpu(lambda a: torch._foreach_add_(a, 2), ints, inplace=True)
    same_as_cpu(lambda a, b: torch._foreach_add(a, b), ints, tensors())  # int + float lists
    # mixed dtypes within one list
    mixed = [make((3,), torch.float32), make((2, 2), torch.bfloat16), make((4,), torch.int32), make((), torch.float64)]
    same_as_cpu(lambda a: torch._foreach_mul(a, 3), mixed)
    same_as_cpu(lambda a: torch._foreach_add_(a, 2), [t.clone() for t in mixed], inplace=True)
    # in-place int list with a float scalar raises as on CPU
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="can't be cast"):
            torch._foreach_add_(tensors(torch.int64, shapes=[(3,)] * 2) if device == "cpu"
                                else to_tpu(tensors(torch.int64, shapes=[(3,)] * 2)), 1.5)


def test_views_and_shared_storage():
    def run(device):
        base = torch.arange(40, dtype=torch.float32, device=device).reshape(5, 8) / 7
        # slices and a transposed view of one storage, and one element twice
        views = [base[0], base[1:3, ::2], base.t()[2:4], base[4]]
        torch._foreach_mul_(views, 2.0)
        torch._foreach_add_([base[0], base[0]], [base[4], base[0]])
        outs = torch._foreach_exp([base[::2, 1], base.t()])
        return base, outs

    (b_cpu, o_cpu), (b_tpu, o_tpu) = run("cpu"), run("tpu")
    assert_close(b_tpu.cpu(), b_cpu)
    for g, e in zip(o_tpu, o_cpu):
        assert_close(g.cpu(), e)


def test_broadcasting_list_elements():
    same_as_cpu(lambda a, b: torch._foreach_add(a, b), [make((3, 4)), make((2, 1))], [make((4,)), make((1, 5))])
    same_as_cpu(lambda a, b: torch._foreach_mul_(a, b), [make((3, 4)), make((2, 5))], [make((4,)), make((1, 5))],
                inplace=True)


@pytest.mark.parametrize("ord", [1, 2, 3.5, float("inf"), 0, -1.5, float("-inf")])
def test_norm(ord):
    finite = ord in (1, 2, 3.5, 0)  # orders with an identity accept empty tensors
    elements = lambda: [t for t in tensors() if t.numel() or finite]  # noqa: E731
    same_as_cpu(lambda a: torch._foreach_norm(a, ord), elements(), rtol=1e-5, atol=1e-5)
    same_as_cpu(lambda a: torch._foreach_norm(a, ord, dtype=torch.float64), elements(), rtol=1e-6, atol=1e-6)
    same_as_cpu(lambda a: torch._foreach_norm(a, ord), tensors(torch.bfloat16, shapes=SHAPES[:4]), rtol=2e-2, atol=2e-2)


def test_norm_errors():
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="_foreach_norm cannot compute the infinity norm on an empty"):
            torch._foreach_norm([torch.zeros(0, device=device)], float("inf"))
        with pytest.raises(RuntimeError, match="cannot compute the -1 norm on an empty"):
            torch._foreach_norm([torch.ones(2, device=device), torch.zeros(0, device=device)], -1)
        with pytest.raises(RuntimeError, match="floating point"):
            torch._foreach_norm([torch.ones(3, dtype=torch.int64, device=device)])


def test_max():
    same_as_cpu(torch._foreach_max, [t for t in tensors() if t.numel()])
    same_as_cpu(torch._foreach_max, [torch.tensor([1, 5, 2]), torch.tensor([[float("nan"), 1.0]]),
                                     make((3, 2), torch.bfloat16)])
    for device in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="_foreach_max cannot compute the maximum of an empty tensor"):
            torch._foreach_max([torch.ones(2, device=device), torch.zeros(0, device=device)])


def test_backward_through_functional_foreach():
    def run(device):
        a = [t.to(device).requires_grad_() for t in positive(shapes=SHAPES[:4])]
        b = [t.to(device).requires_grad_() for t in tensors(seed=5, shapes=SHAPES[:4])]
        r = torch._foreach_addcmul(torch._foreach_exp(torch._foreach_mul(a, b)), a, b, value=0.5)
        r = torch._foreach_div(torch._foreach_sqrt(a), torch._foreach_add(r, 3.0))
        sum(t.sum() for t in r).backward()
        return [t.grad.cpu() for t in a + b]

    for g, e in zip(run("tpu"), run("cpu")):
        assert_close(g, e, rtol=1e-5, atol=1e-5)


def test_zero_copy_clone():
    same_as_cpu(torch._foreach_zero_, tensors(), inplace=True)
    same_as_cpu(lambda a, b: torch._foreach_copy_(a, b), tensors(), tensors(seed=3), inplace=True)
    # dtype conversion and broadcasting in copy_
    same_as_cpu(lambda a, b: torch._foreach_copy_(a, b), [make((3, 2)), make((4,), torch.int32)],
                [make((2,), torch.bfloat16), make((4,))], inplace=True)
    # copy_ from CPU tensors takes the per-tensor path
    dst = to_tpu(tensors())
    src = tensors(seed=8)
    torch._foreach_copy_(dst, src)
    for d, s in zip(dst, src):
        assert_close(d.cpu(), s)
    if hasattr(torch, "_foreach_clone"):  # torch >= 2.12
        same_as_cpu(lambda a: torch._foreach_clone(a), tensors())


# ------------------------------------------------------------ one launch per call

def test_one_execution_per_call_strict():
    a, b, c = (to_tpu([make((4, 3), seed=s + i) for i in range(10)]) for s in (0, 20, 40))
    torch_tpu.sync()
    calls = [
        lambda: torch._foreach_add_(a, b, alpha=0.1),
        lambda: torch._foreach_mul_(a, 0.9),
        lambda: torch._foreach_addcdiv_(a, b, torch._foreach_add(c, 5.0), value=-0.01),  # two calls
        lambda: torch._foreach_lerp_(a, b, 0.1),
        lambda: torch._foreach_sqrt(c),
        lambda: torch._foreach_norm(a),
        lambda: torch._foreach_zero_(c),
        lambda: torch._foreach_copy_(c, b),
        lambda: torch._foreach_add_(a, torch.tensor(1.0)),
    ]
    expected = [1, 1, 2, 1, 1, 1, 1, 1, 1]
    with torch_tpu.eager_mode("strict"):
        for call, n in zip(calls, expected):
            before = torch_tpu.metrics()["executions"]
            call()
            assert torch_tpu.metrics()["executions"] - before == n


def test_fused_mode_one_append_per_call():
    def run(device, mode):
        a = [make((4, 3), seed=i).to(device) for i in range(10)]
        b = [make((4, 3), seed=30 + i).to(device) for i in range(10)]
        with torch_tpu.eager_mode(mode):
            before = torch_tpu.metrics().get("fused_graph_ops", 0)
            torch._foreach_mul_(a, 0.5)
            torch._foreach_add_(a, b, alpha=2)
            r = torch._foreach_sqrt(torch._foreach_abs(a))
            torch_tpu.sync()
            ops = torch_tpu.metrics().get("fused_graph_ops", 0) - before
        return a + list(r), ops

    expected, _ = run("cpu", "strict")
    got, ops = run("tpu", "fused")
    assert ops == 4
    for g, e in zip(got, expected):
        assert_close(g.cpu(), e)


def test_changing_scalars_do_not_recompile():
    a = to_tpu(tensors())
    b = to_tpu(tensors(seed=9))
    torch._foreach_add_(a, b, alpha=-0.01)
    torch._foreach_lerp_(a, b, 0.2)
    torch._foreach_addcdiv_(a, b, to_tpu(positive(seed=4)), value=-0.3)
    compiles = torch_tpu.metrics()["compiles"]
    for lr in (0.02, 0.003):
        torch._foreach_add_(a, b, alpha=-lr)
        torch._foreach_lerp_(a, b, lr)
        torch._foreach_addcdiv_(a, b, to_tpu(positive(seed=4)), value=-lr)
    assert torch_tpu.metrics()["compiles"] == compiles


# ------------------------------------------------------------ optimizers end to end

def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


OPTIMIZERS = {
    "adam": lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),
    "adam_wd": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1, foreach=True),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True, foreach=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, foreach=True),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, foreach=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, foreach=True),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_matches_cpu(name):
    x, y = make((5, 6), seed=1), make((5, 3), seed=2)
    results = []
    for device in ("cpu", "tpu"):
        model = mlp().to(device)
        opt = OPTIMIZERS[name](model.parameters())
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
            opt.step()
        results.append([p.detach().cpu() for p in model.parameters()])
    for g, e in zip(results[1], results[0]):
        assert_close(g, e, rtol=1e-5, atol=1e-5)


def test_clip_grad_norm_matches_cpu():
    norms, grads = [], []
    for device in ("cpu", "tpu"):
        model = mlp().to(device)
        model(make((5, 6), seed=3).to(device)).pow(2).sum().backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1, foreach=True).cpu())
        grads.append([p.grad.cpu() for p in model.parameters()])
    assert_close(norms[1], norms[0])
    for g, e in zip(grads[1], grads[0]):
        assert_close(g, e)


# ------------------------------------------------------------ errors

def test_errors():
    a = to_tpu(tensors(shapes=[(3,), (2,)]))
    with pytest.raises(RuntimeError, match="Tensor lists must have the same number of tensors, got 2 and 1"):
        torch._foreach_add(a, a[:1])
    with pytest.raises(RuntimeError, match="Tensor list must have same number of elements as scalar list"):
        torch._foreach_mul_(a, [1.0])
    # a CPU tensor in a tpu list: the per-tensor op's device error
    with pytest.raises(RuntimeError, match="same device"):
        torch._foreach_add_(a, [torch.ones(3), torch.ones(2)])
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch._foreach_add_(a, [torch.ones(2, 3, device="tpu"), torch.ones(2, device="tpu")])
    with pytest.raises(RuntimeError, match="0 dim"):
        torch._foreach_mul_(a, torch.ones(2))
    # a failed call leaves nothing half-built behind: the next op works
    torch._foreach_add_(a, 1)
    assert_close(a[0].cpu(), tensors(shapes=[(3,)])[0] + 1)


@pytest.mark.skipif(torch_tpu.tpu.device_count() < 2, reason="needs two tpu devices")
def test_other_and_mixed_devices():
    cpu = tensors(shapes=[(3,), (2, 2)])
    # all on tpu:1: the one-program path on that device
    on1 = [t.to("tpu:1") for t in cpu]
    torch._foreach_mul_(on1, 3.0)
    # spread over tpu:0 and tpu:1: ATen's per-tensor kernels, same results
    mixed = [cpu[0].to("tpu:0"), cpu[1].to("tpu:1")]
    out = torch._foreach_add(mixed, 1.0)
    for t1, tm, o, c in zip(on1, mixed, out, cpu):
        assert t1.device.index == 1 and o.device == tm.device
        assert_close(t1.cpu(), c * 3)
        assert_close(o.cpu(), c + 1)
