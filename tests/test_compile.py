"""torch.compile(backend="tpu"): sealed programs, training steps, guards, graph breaks."""
import copy

import pytest
import torch
import torch._dynamo.testing
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from support import TinyCausalLM, cpu_only_scale, kv_cache_decode, run_python
from torch_tpu import _C, _compile
from torch_tpu import testing as workloads


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_backends_are_registered():
    assert "tpu" in torch._dynamo.list_backends()
    assert torch._dynamo.lookup_backend("tpu") is _compile.tpu_backend
    assert torch._dynamo.lookup_backend("openxla") is _compile.tpu_backend  # torch_xla is not installed


def test_the_default_backend_compiles_a_graph_on_tpu_with_the_tpu_backend():
    """torch.compile(model) as written for CUDA: inductor's own "tpu" device is a Pallas
    generator for another project (it raised ModuleNotFoundError: torch_tpu._internal)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    tpu_model = copy.deepcopy(model).to("tpu")
    x = torch.randn(3, 8)
    before = _compile.stats()
    out = torch.compile(tpu_model)(x.to("tpu"))
    out.sum().backward()
    made = lambda: torch.ones(2, 3, device="tpu") * 2  # no input: the tensor it makes is on tpu
    torch.testing.assert_close(torch.compile(made)().cpu(), torch.full((2, 3), 2.0))
    after = _compile.stats()
    assert after["default_backend_graphs"] - before["default_backend_graphs"] == 2
    assert after["compiled_graphs"] > before["compiled_graphs"]
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out.cpu(), expected)
    for p, q in zip(tpu_model.parameters(), model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad)
    # A graph on the CPU still goes to inductor.
    torch.testing.assert_close(torch.compile(model)(x), expected)
    assert _compile.stats()["default_backend_graphs"] == after["default_backend_graphs"]


_WITHOUT_ENTRY_POINTS = """
import importlib.metadata, sys
real = importlib.metadata.entry_points
# As in a source checkout on PYTHONPATH: no installed entry points name the backends.
importlib.metadata.entry_points = lambda **kw: real(group="no such group") if kw else real()
import torch
if sys.argv[1] == "dynamo-first":
    import torch._dynamo
    torch._dynamo.list_backends()
import torch_tpu, torch._dynamo
assert torch._dynamo.lookup_backend("tpu") is torch_tpu._compile.tpu_backend
assert torch._dynamo.lookup_backend("openxla") is torch_tpu._compile.tpu_backend
assert "tpu" in torch._dynamo.list_backends()
print(torch.compile(lambda x: x * 2, backend="tpu")(torch.ones(2, device="tpu")).cpu().tolist())
"""


def _last_line_without_autoload(code, *args):
    """Runs `code` in a fresh interpreter where `import torch` does not load torch_tpu."""
    done = run_python(code, *args, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("order", ["torch_tpu-first", "dynamo-first"])
def test_backends_are_registered_without_the_package_entry_points(order):
    assert _last_line_without_autoload(_WITHOUT_ENTRY_POINTS, order) == "[2.0, 2.0]"


def test_the_entry_point_loads_the_backend_when_torch_tpu_was_not_imported():
    # Without autoload (as on a GPU machine), dynamo's lookup of the entry point is what
    # imports torch_tpu; its own registration must then leave the name to dynamo.
    code = (
        "import sys, torch\n"
        "from torch._dynamo.backends.registry import lookup_backend\n"
        "assert 'torch_tpu' not in sys.modules\n"
        "backend = lookup_backend('tpu')\n"
        "import torch_tpu\n"
        "assert backend is torch_tpu._compile.tpu_backend\n"
        "print(torch.compile(lambda x: x + 1, backend='tpu')(torch.ones(2, device='tpu')).cpu().tolist())\n"
    )
    assert _last_line_without_autoload(code) == "[2.0, 2.0]"


def test_inference_replays_one_program_without_dispatch():
    model = workloads.mlp(d_in=16, d_out=4)
    x = torch.randn(8, 16)
    expected = model(x)
    tpu_model = copy.deepcopy(model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), expected.detach())
        x2 = x.to("tpu") * 2
        torch.tpu.synchronize()
        before = torch_tpu.metrics()
        replays = _compile.stats()["replays"]
        y = compiled(x2)
        torch.tpu.synchronize()
        after = torch_tpu.metrics()
    assert _compile.stats()["replays"] == replays + 1
    assert after["compiles"] == before["compiles"]
    assert after["executions"] - before["executions"] == 1  # the sealed program, nothing per op
    torch.testing.assert_close(y.cpu(), model(x * 2).detach())


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_whole_training_step_matches_cpu(optimizer):
    captures = _compile.stats()["captures"]
    torch.manual_seed(0)
    cpu_model = workloads.mlp(d_in=16, d_out=4)
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    if optimizer == "sgd":
        cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.05, momentum=0.9)
        tpu_opt = torch.optim.SGD(tpu_model.parameters(), lr=0.05, momentum=0.9)
    else:  # Adam's step counts, on tpu (capturable, as dynamo makes it over CUDA)
        cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=0.01)
        tpu_opt = torch.optim.AdamW(tpu_model.parameters(), lr=0.01)

    def make_step(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    cpu_step = make_step(cpu_model, cpu_opt)
    tpu_step = torch.compile(make_step(tpu_model, tpu_opt), backend="tpu")
    for i in range(4):
        g = torch.Generator().manual_seed(i)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        expected = cpu_step(x, y)
        x, y = x.to("tpu"), y.to("tpu")
        before = torch_tpu.metrics()
        got = tpu_step(x, y)
        after = torch_tpu.metrics()
        torch.testing.assert_close(got.cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
        if optimizer == "adamw" and i == 3:
            # Step counts and bias corrections are computed on tpu: the step never
            # waits for a download, and uploads at most its two inputs.
            assert after["device_to_host_transfers"] == before["device_to_host_transfers"]
            assert after["host_to_device_transfers"] - before["host_to_device_transfers"] <= 2
    for p_cpu, p_tpu in zip(cpu_model.parameters(), tpu_model.parameters()):
        torch.testing.assert_close(p_tpu.cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5)
    if optimizer == "adamw":
        assert all(int(s["step"]) == 4 for s in tpu_opt.state.values())
    assert _compile.stats()["captures"] - captures <= 8  # a handful of graphs, not one per step


def _count_then_correct(t, step):
    step.add_(1)
    return t / (1 - 0.9 ** step)


def _scale_count_then_correct(t, step):
    y = t * step  # reads the count before the increment below
    step.add_(1)
    return y / (1 - 0.9 ** step)


def _scale_by_a_view_then_count(t, step):
    s = step.view(())  # a view of the count, read before the increment below
    y = t * s
    step.add_(1)
    return y


@pytest.mark.parametrize("fn, on_host", [(_count_then_correct, True), (_scale_count_then_correct, False),
                                         (_scale_by_a_view_then_count, False)])
def test_cpu_scalar_ops_run_on_the_host_before_the_program(fn, on_host):
    """Ops on CPU inputs alone run on the host first, unless the device part reads
    an input that they write, directly or through a view: it must see the old value."""
    compiled = torch.compile(fn, backend="tpu")
    t = torch.randn(5)
    cpu_step, tpu_step = torch.tensor(2.0), torch.tensor(2.0)
    for _ in range(3):
        expected = fn(t, cpu_step)
        torch.tpu.synchronize()
        before = torch_tpu.metrics()
        got = compiled(t.to("tpu"), tpu_step)
        downloads = torch_tpu.metrics()["device_to_host_transfers"] - before["device_to_host_transfers"]
        if on_host:  # the new count is made on the host: nothing waits to download it
            assert downloads == 0
        torch.testing.assert_close(got.cpu(), expected)
        assert tpu_step.device.type == "cpu" and tpu_step.item() == cpu_step.item()


def _stackable(a, b, c):
    counts = torch.ops.aten._foreach_add.Scalar([a, b, c], 1)
    # a list made of elements out of order: stacked from them
    powers = torch.ops.aten._foreach_pow.ScalarAndTensor(0.9, [counts[2], counts[0], counts[1]])
    corrections = torch.ops.aten._foreach_sub.Scalar(powers, 1)
    scaled = torch.ops.aten._foreach_mul.List(corrections, [a, b, c])
    roots = torch.ops.aten._foreach_sqrt.default(torch.ops.aten._foreach_neg.default(corrections))
    for count, new in zip((a, b, c), counts):
        count.copy_(new)
    return scaled[0], scaled[2], roots[1], counts[1]


def test_a_host_part_of_foreach_ops_runs_a_list_at_a_time():
    """StackedScalars: each list of 0-d CPU tensors is one 1-d tensor and each foreach
    op one call of its single-tensor op; results and written-back inputs are those of
    the graph run op by op."""
    from torch.fx.experimental.proxy_tensor import make_fx

    values = (3.0, 7.0, 1.0)
    gm = make_fx(_stackable)(*[torch.tensor(v) for v in values])
    plan = _compile.StackedScalars.plan(gm)
    assert plan is not None
    by_op, stacked = [torch.tensor(v) for v in values], [torch.tensor(v) for v in values]
    for _ in range(2):  # the second run reuses the plan's slots
        expected, got = gm(*by_op), plan.run(stacked)
        torch.testing.assert_close(list(got), list(expected))
        assert all(g.dim() == 0 for g in got)
        torch.testing.assert_close(stacked, by_op)  # the counts, written back


def test_a_host_part_that_cannot_be_stacked_runs_op_by_op():
    from torch.fx.experimental.proxy_tensor import make_fx

    def mixed(a, b):  # one list of two dtypes: its elements do not stack
        return tuple(torch.ops.aten._foreach_add.Scalar([a, b], 1))

    def elementwise(a, b):  # an op of single scalars
        return torch.ops.aten.pow.Scalar(0.9, a), b

    def reduction(a, b):  # a norm per element, not one over the stacked list
        return tuple(torch.ops.aten._foreach_norm.Scalar([a, b], 2))

    def promoted(a, b, c):  # a 0-d float64 promotes each 0-d element; it would not promote a 1-d list
        return tuple(torch.ops.aten._foreach_add.Tensor([a, b], c))

    one, two = torch.tensor(1.0), torch.tensor(2.0)
    double = torch.tensor(3.0, dtype=torch.float64)
    for fn, args in ((mixed, (one, double)), (elementwise, (one, two)), (reduction, (one, two)),
                     (promoted, (one, two, double))):
        gm = make_fx(fn)(*args)
        assert _compile.StackedScalars.plan(gm) is None, fn.__name__


def test_foreach_overloads_map_to_the_pointwise_op_with_the_same_arguments():
    aten = torch.ops.aten

    def target(op):
        node = torch.fx.Graph().create_node("call_function", op)
        return _compile._stacked_op(node)

    assert target(aten._foreach_pow.ScalarAndTensor) is aten.pow.Scalar       # (Scalar, Tensor[])
    assert target(aten._foreach_pow.Scalar) is aten.pow.Tensor_Scalar         # (Tensor[], Scalar)
    assert target(aten._foreach_pow.List) is aten.pow.Tensor_Tensor
    assert target(aten._foreach_add.Scalar) is aten.add.Scalar
    assert target(aten._foreach_mul.List) is aten.mul.Tensor
    assert target(aten._foreach_sqrt.default) is aten.sqrt.default
    assert target(aten._foreach_norm.Scalar) is None                          # a reduction
    assert target(aten._foreach_mul.ScalarList) is None                       # no single-tensor form
    assert target(aten._foreach_add_.Scalar) is None                          # in place


def _compiled_adamw_steps(monkeypatch, steps=3):
    """An MLP trained `steps` compiled AdamW steps on tpu beside the same run eagerly on
    CPU; returns the tpu model, its optimizer and the host parts split off on the way."""
    parts = []
    split = _compile.HostPrelude.split

    def record(gm):
        host, rest = split(gm)
        if host is not None:
            parts.append((host, rest))
        return host, rest

    monkeypatch.setattr(_compile.HostPrelude, "split", staticmethod(record))
    torch.manual_seed(0)
    reference = workloads.mlp(d_in=16, d_out=4)
    model = copy.deepcopy(reference).to("tpu")
    # Adam divides by the gradient's running scale: with the default eps an element whose
    # gradients are near zero (and differ in their last bits between XLA and CPU, by how
    # each CPU's kernels round) moves by a fraction of lr either way; a larger eps keeps
    # those elements still and the comparison about the optimizer, not rounding.
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, eps=1e-3)
    reference_opt = torch.optim.AdamW(reference.parameters(), lr=0.01, eps=1e-3)

    def step(model, opt, x):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    compiled = torch.compile(step, backend="tpu")
    for _ in range(steps):
        x = torch.randn(8, 16)
        compiled(model, opt, x.to("tpu"))
        step(reference, reference_opt, x)
    assert all(int(s["step"]) == steps for s in opt.state.values())
    for p, ref in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.cpu(), ref, rtol=1e-4, atol=1e-4)
    return model, opt, parts


def test_a_compiled_adamw_keeps_its_step_counts_on_tpu(monkeypatch):
    """As over CUDA, dynamo makes a fresh optimizer over tpu parameters capturable: its
    step counts live on tpu and the step needs no host part."""
    _, opt, parts = _compiled_adamw_steps(monkeypatch)
    assert not parts
    assert all(group["capturable"] for group in opt.param_groups)
    assert all(s["step"].device.type == "tpu" for s in opt.state.values())


def test_an_adamw_step_host_part_is_stacked(monkeypatch):
    """Step counts on the host (dynamo's own rule, which makes only CUDA and XPU optimizers
    capturable): the host part (bias corrections from the counts) runs a list at a time and
    hands each list to the device part as one tensor, not one 0-d tensor per parameter;
    parameters and step counts match the optimizer run eagerly on CPU."""
    from torch._dynamo.variables.optimizer import OptimizerVariable

    monkeypatch.setattr(OptimizerVariable, "_set_capturable", OptimizerVariable._set_capturable.__wrapped__)
    model, opt, parts = _compiled_adamw_steps(monkeypatch)
    assert not any(group["capturable"] for group in opt.param_groups)
    assert all(s["step"].device.type == "cpu" for s in opt.state.values())
    assert parts and all(host.stacked is not None for host, _ in parts)
    for _, device_part in parts:
        handed = [n.name for n in device_part.graph.nodes if n.op == "placeholder" and n.name.endswith("_from_host")]
        assert handed and all(name.endswith("_stack_from_host") for name in handed), handed
        assert len(handed) < len(list(model.parameters()))


def test_static_graphs_keep_the_backward_ops_tpu_lowers_itself():
    aten = torch.ops.aten
    static = _compile._decompositions([torch.randn(2, 3)])
    for op in (aten.native_layer_norm_backward.default, aten._softmax_backward_data.default,
               aten.gelu_backward.default, aten.embedding_dense_backward.default):
        assert op not in static, op
    # forward ops keep their decompositions; so does everything when sizes are symbolic
    assert aten.gelu_.default in static
    shape_env = torch.fx.experimental.symbolic_shapes.ShapeEnv()
    size = shape_env.create_unbacked_symint()
    dynamic = _compile._decompositions([size])
    assert aten.native_layer_norm_backward.default in dynamic


def test_static_graphs_with_undecomposed_backward_ops_are_not_counted_as_unpadded():
    before = _compile.stats()
    compiled = torch.compile(nn.LayerNorm(8).to("tpu"), backend="tpu")
    x = torch.randn(4, 8).to("tpu")
    for _ in range(2):
        compiled(x).sum().backward()
    after = _compile.stats()
    assert after["exact_dynamic_calls"] == before["exact_dynamic_calls"]
    assert after["unpadded_graphs"] == before["unpadded_graphs"]


def test_compiled_gpt_with_eager_optimizer_matches_cpu():
    torch.manual_seed(0)
    config = workloads.GPTConfig(vocab=64, d_model=32, layers=1, heads=2, seq=16, batch=2)
    cpu_model = workloads.GPT(config)
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    tpu_opt = torch.optim.SGD(tpu_model.parameters(), lr=0.1)
    compiles = []
    for step in range(3):
        tokens, targets = workloads.gpt_batch(config, seed=step)
        cpu_loss = workloads.train_step(cpu_model, cpu_opt, tokens, targets)
        before = torch_tpu.metrics()["compiles"]
        tpu_loss = workloads.train_step(compiled, tpu_opt, tokens.to("tpu"), targets.to("tpu"))
        compiles.append(torch_tpu.metrics()["compiles"] - before)
        torch.testing.assert_close(tpu_loss.cpu(), cpu_loss.detach(), rtol=1e-4, atol=1e-5)
    assert compiles[2] == 0, compiles  # same shapes: no recompilation
    for p_cpu, p_tpu in zip(cpu_model.parameters(), tpu_model.parameters()):
        torch.testing.assert_close(p_tpu.cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5)


def test_compiled_graphs_take_aotautograds_boxed_arguments():
    # Unboxed compiled graphs make AOTAutograd warn on every first call of a training step.
    import warnings

    torch._dynamo.reset()
    model = workloads.mlp(d_in=8, hidden=16, d_out=4).to("tpu")
    x = torch.randn(4, 8, device="tpu")

    def loss_fn(x):
        return model(x).square().mean()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = torch.compile(loss_fn, backend="tpu")(x)
        loss.backward()
    assert not [w for w in caught if "boxed" in str(w.message)], [str(w.message) for w in caught]
    torch.testing.assert_close(loss.detach().cpu(), loss_fn(x).detach().cpu())


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "op by op"])
def test_a_result_laid_out_otherwise_than_traced_is_copied_into_the_traced_layout(sealed):
    # A graph traced with contiguous fake tensors views mul's result; given a transposed input,
    # tpu's mul (as CPU's) follows the input's layout, which the view cannot take: the result
    # is copied into the traced layout, and counted as a lowering to fix.
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        y = torch.ops.aten.mul.Tensor(x, 2.0).view(-1) + 1
        return [y] if sealed else [y, torch.rand_like(x)]  # a graph that draws runs op by op

    graph = _compile.CompiledGraph(make_fx(f, tracing_mode="fake")(torch.randn(3, 4)))
    x = torch.randn(4, 3).t()
    before = _compile.stats()["layout_copies"].get("aten.mul.Tensor", 0)
    for _ in range(2):
        torch.testing.assert_close(graph(x.to("tpu"))[0].cpu(), x.reshape(-1) * 2 + 1)
    assert _compile.stats()["layout_copies"]["aten.mul.Tensor"] - before == (1 if sealed else 2)
    assert bool(graph.programs) == sealed


def test_guards_recompile_only_for_new_shapes():
    counter = torch._dynamo.testing.CompileCounterWithBackend("tpu")

    def f(x):
        return torch.tanh(x) * 2 + x.sum(0)

    compiled = torch.compile(f, backend=counter, dynamic=False)
    for shape in ((4, 3), (4, 3), (5, 3), (4, 3)):
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x))
    assert counter.frame_count == 2


def test_graph_breaks_run_between_compiled_pieces():
    def f(x):
        y = torch.relu(x) + 1
        if y.sum().item() > 0:  # data-dependent Python control flow: a graph break
            y = y * 2
        return y.exp()

    x = torch.randn(6)
    explanation = torch._dynamo.explain(f)(x.to("tpu"))
    assert explanation.graph_break_count >= 1
    compiled = torch.compile(f, backend="tpu")
    torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x))


def test_an_input_buffer_of_another_shape_than_at_capture_is_reshaped_once():
    # The same [4, 8] tensor may sit in a 2-D buffer (an upload, a program's
    # result) or a 1-D one (written as a flat tensor, then viewed): a sealed
    # program takes it either way, and in place updates land in either.
    def scale_and_bump(x, bias):
        bias.add_(1)
        return x * 2 + bias

    compiled = torch.compile(scale_and_bump, backend="tpu")
    values = [torch.randn(4, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    bias = torch.zeros(4, 8).to("tpu")
    inputs = [values[0].to("tpu"), values[1].view(-1).to("tpu").view(4, 8), values[2].to("tpu")]
    assert [_C._storage_buffer_shape(x) for x in inputs] == [[4, 8], [32], [4, 8]]
    flat_bias = torch.zeros(32).to("tpu").view(4, 8)
    for i, x in enumerate(inputs):
        b = flat_bias if i == 1 else bias
        expected_bias = b.cpu() + 1
        torch.testing.assert_close(compiled(x, b).cpu(), values[i] * 2 + expected_bias)
        torch.testing.assert_close(b.cpu(), expected_bias)
    assert _C._storage_buffer_shape(inputs[1]) == [4, 8]  # reshaped once, kept
    assert _C._storage_buffer_shape(flat_bias) == [4, 8]


def test_a_sealed_program_takes_empty_tensor_arguments():
    # An empty tensor has no storage (a mask that selects nothing, as a multimodal
    # model's audio tokens in a text-only batch): its replays take it like any argument.
    def f(x, empty, mask):
        return x * 2 + empty.sum(), x[mask], empty * 3

    compiled = torch.compile(f, backend="tpu")
    x, empty, mask = torch.randn(3, 4), torch.empty(0, 4), torch.zeros(3, dtype=torch.bool)
    for _ in range(3):  # capture, then replays
        got = compiled(x.to("tpu"), empty.to("tpu"), mask.to("tpu"))
        for g, e in zip(got, f(x, empty, mask)):
            torch.testing.assert_close(g.cpu(), e)


def test_asserts_in_a_compiled_graph_are_checked_at_every_call():
    # one_hot's graph asserts its classes are in range (torch._assert_async): the sealed
    # program returns each check's value and every call records it, raised at the next read
    def f(idx):
        return torch.nn.functional.one_hot(idx, num_classes=4) * 2

    compiled = torch.compile(f, backend="tpu")
    for seed in range(3):  # capture, then replays
        idx = torch.randint(0, 4, (8, 2), generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(idx.to("tpu")).cpu(), f(idx))
    out = compiled(torch.tensor([[0, 5]] * 8).to("tpu"))
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        out.cpu()
    torch.testing.assert_close(compiled(idx.to("tpu")).cpu(), f(idx))  # consumed: later calls run as before


def test_input_mutation_and_batchnorm_running_stats():
    def bump(x):
        x.add_(1)
        return x * 3

    x = torch.zeros(4, device="tpu")
    out = torch.compile(bump, backend="tpu")(x)
    assert x.cpu().tolist() == [1.0] * 4
    assert out.cpu().tolist() == [3.0] * 4

    torch.manual_seed(0)
    cpu_bn = nn.BatchNorm1d(5)
    tpu_bn = copy.deepcopy(cpu_bn).to("tpu")
    compiled = torch.compile(tpu_bn, backend="tpu")
    for i in range(3):
        x = torch.randn(8, 5, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), cpu_bn(x).detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(tpu_bn.running_mean.cpu(), cpu_bn.running_mean)
    torch.testing.assert_close(tpu_bn.running_var.cpu(), cpu_bn.running_var)


def test_dropout_is_reproducible_under_a_fixed_seed():
    def f(x):
        return F.dropout(x, p=0.5, training=True)

    compiled = torch.compile(f, backend="tpu")
    x = torch.ones(1000, device="tpu")
    torch.manual_seed(7)
    a = compiled(x).cpu()
    torch.manual_seed(7)
    b = compiled(x).cpu()
    c = compiled(x).cpu()
    torch.testing.assert_close(a, b)
    assert not torch.equal(b, c)  # the generator advances between calls
    assert set(a.unique().tolist()) <= {0.0, 2.0}
    assert 400 < int((a != 0).sum()) < 600


def test_kv_cache_growth_under_dynamic_shapes():
    torch.manual_seed(0)
    cpu_model = TinyCausalLM()
    counter = torch._dynamo.testing.CompileCounterWithBackend("tpu")
    compiled = torch.compile(copy.deepcopy(cpu_model).to("tpu"), backend=counter, dynamic=True)
    new_frames = kv_cache_decode(cpu_model, compiled, 8, measure=lambda: counter.frame_count)
    # Dynamo specialises cache lengths 0 and 1; from then on one symbolic graph serves every length.
    assert sum(new_frames[4:]) == 0, new_frames


def test_a_cpu_fallback_inside_a_compiled_graph(allow_fallback):
    # The fallback cuts the capture: the graph runs op by op in fused mode, correctly.
    def f(x):
        return cpu_only_scale(x * 2) + x.sum()

    compiled = torch.compile(f, backend="tpu")
    for i in range(2):
        x = torch.randn(3, 3, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x), rtol=1e-4, atol=1e-5)


def test_write_back_of_cpu_inputs_downloads_once_per_dtype():
    # Mutated CPU inputs (an optimizer's step counts) come back in one download
    # per dtype, each value into its own tensor, whatever its shape and strides.
    cpu = [torch.zeros(()), torch.zeros(()), torch.zeros(2, 3).t(), torch.zeros((), dtype=torch.int64),
           torch.zeros(4, dtype=torch.int64)]
    values = [torch.tensor(1.5), torch.tensor(-2.0), torch.arange(6.0).view(3, 2), torch.tensor(7),
              torch.arange(4) + 10]
    before = torch_tpu.metrics()["device_to_host_transfers"]
    _compile._copy_to_cpu(list(zip(cpu, [v.to("tpu") for v in values])))
    assert torch_tpu.metrics()["device_to_host_transfers"] - before == 2
    for got, want in zip(cpu, values):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_scalars_sharing_an_upload_stay_independent(mode):
    # _scalar_to_device backs equal scalars with one cached buffer; a write to one
    # must give it a buffer of its own.
    with torch_tpu.eager_mode(mode):
        for value in [torch.tensor(3.0), torch.tensor(7, dtype=torch.int64), torch.tensor(True),
                      torch.tensor(2.0, dtype=torch.float64).neg()._neg_view(), torch.tensor(1 + 2j).conj()]:
            a = _C._scalar_to_device(value, 0)
            uploads = torch_tpu.metrics()["host_to_device_transfers"]
            b = _C._scalar_to_device(value, 0)
            assert torch_tpu.metrics()["host_to_device_transfers"] == uploads  # b shares a's buffer
            assert a.device == torch.device("tpu", 0) and a.shape == () and a.dtype == value.dtype
            a.add_(1) if value.dtype != torch.bool else a.logical_not_()
            expected = value.clone()
            assert b.cpu().item() == expected.item()
            assert a.cpu().item() == (expected + 1 if value.dtype != torch.bool else ~expected).item()
    with pytest.raises(RuntimeError, match="0-dim CPU tensor"):
        _C._scalar_to_device(torch.zeros(2), 0)
    with pytest.raises(RuntimeError, match="0-dim CPU tensor"):
        _C._scalar_to_device(torch.zeros((), device="tpu"), 0)


def test_signature_tells_apart_what_a_sealed_program_depends_on():
    x = torch.zeros(4, 6, device="tpu")
    sig = _compile._signature
    assert sig([x, 3, 0.5, None]) == sig([torch.ones(4, 6, device="tpu"), 3, 0.5, None])  # contents do not count
    assert sig([x, torch.tensor(2.0)]) == sig([x, torch.tensor(5.0)])  # 0-d CPU tensors are inputs
    different = [[x.t()], [x[1:]], [x.view(6, 4)], [x.to(torch.bfloat16)], [torch.zeros(5, 6, device="tpu")[:4]],
                 [x, True], [x, 1], [x, 1.0], [x, 2], [x, torch.tensor(2)], [x, 0.0], [x, -0.0], [x, 2 ** 70]]
    signatures = [sig(args) for args in [[x], [x, False]] + different]
    assert len(set(signatures)) == len(signatures)
    assert sig([x, 2 ** 70]) == sig([x, 2 ** 70]) and sig([x, 3]) == sig([x, 3])
    assert sig([x, torch.zeros(3)]) is None and sig([x, object()]) is None


def test_replayed_cpu_scalars_take_each_calls_value():
    # A sealed program's 0-d CPU inputs are uploaded on every call (equal values share
    # a cached buffer): each replay must see its own call's values, whatever their dtype,
    # lazily negated or not.
    f = torch.compile(lambda t, s, k: t * s + k, backend="tpu")
    t = torch.randn(3)
    replays = _compile.stats()["replays"]
    for s, k in [(2.0, 1), (3.0, 1), (-1.5, 7), (2.0, 1), (3.0, 1)]:
        got = f(t.to("tpu"), torch.tensor(s), torch.tensor(k))
        torch.testing.assert_close(got.cpu(), t * s + k)
    for s in [2.0, 4.0]:
        negated = torch.tensor(s)._neg_view()
        torch.testing.assert_close(f(t.to("tpu"), negated, torch.tensor(0)).cpu(), -s * t)
    assert _compile.stats()["replays"] - replays >= 4
