"""Fused (DeferAndFuse) eager mode and buffer donation."""
import copy
import json
import os
import re
import threading

import pytest
import torch

import torch_tpu
from torch_tpu import testing as workloads

from support import check, run_python


@pytest.fixture
def fused():
    with torch_tpu.eager_mode("fused"):
        yield


def counters():
    torch.tpu.synchronize()
    return torch_tpu.metrics()


def delta(before, after, key):
    return after[key] - before[key]


def test_mode_names():
    with torch_tpu.eager_mode("defer_and_fuse"):
        assert torch_tpu.get_eager_mode() == "fused"
    assert torch_tpu.get_eager_mode() == "strict"
    with pytest.raises(ValueError, match="available modes: strict, debug, fused"):
        torch_tpu.set_eager_mode("lazy")


def test_ops_are_deferred_until_data_is_read(fused):
    x = torch.randn(64, 64)
    before = counters()
    t = x.to("tpu")
    for _ in range(10):
        t = torch.tanh(t * 1.5 + 0.25)
    mid = torch_tpu.metrics()
    assert delta(before, mid, "executions") == 0  # nothing ran yet
    result = t.cpu()
    after = torch_tpu.metrics()
    assert delta(before, after, "executions") == 1
    assert delta(before, after, "fused_graphs") == 1
    assert after["fused_cuts"].get("data_read", 0) - before["fused_cuts"].get("data_read", 0) == 1
    expected = x
    for _ in range(10):
        expected = torch.tanh(expected * 1.5 + 0.25)
    torch.testing.assert_close(result, expected)


_FOREACH_SCALAR_CODE = (
    "import torch, torch_tpu\n"
    "torch_tpu.set_eager_mode('fused')\n"
    "ts = [torch.full((3 + i,), float(i)).to('tpu') for i in range(20)]\n"
    "ms = [torch.full((3 + i,), 1.0).to('tpu') for i in range(20)]\n"
    "torch._foreach_mul_(ts, 0.25)\n"
    "torch._foreach_lerp_(ts, ms, 0.25)\n"
    "torch._foreach_addcmul_(ts, ms, ms, 0.25)\n"
    "got = [t.cpu() for t in ts]\n"
    "for i, t in enumerate(got):\n"
    "    torch.testing.assert_close(t, torch.full((3 + i,), i * 0.25 + (1.0 - i * 0.25) * 0.25 + 0.25))\n"
)


def test_a_foreach_scalar_is_one_argument_of_the_program(tmp_path):
    # 20 tensors scaled by one number, lerped with one weight, then addcmul'ed with
    # one value: each foreach op's number is one program parameter, not one per
    # tensor (AdamW's update reads its few hyperparameters once per parameter
    # tensor). The three numbers are equal and still three parameters: sharing is
    # by identity, never by value.
    dump = tmp_path / "programs"
    out = run_python(_FOREACH_SCALAR_CODE, timeout=120, TORCH_TPU_DUMP_PROGRAMS=str(dump),
                     TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr[-2000:]
    signatures = [re.search(r"func.func public @main\((.*?)\) ->", p.read_text(), re.S).group(1)
                  for p in dump.iterdir()]
    fused = [s for s in signatures if s.count("%arg") >= 20]
    assert len(fused) == 1, signatures
    assert fused[0].count("tensor<f32>") == 3, fused[0]


def test_equal_scalar_values_compile_no_new_program(fused):
    # Which scalars happen to be equal must not change a program's structure: a
    # learning rate that meets another hyperparameter's value would recompile.
    a, b = torch.ones(4, device="tpu"), torch.ones(4, device="tpu")
    ps = [torch.ones(3, device="tpu") for _ in range(4)]

    def step(s1, s2, weights):
        torch._foreach_mul_(ps, weights)  # a scalar list: one value per tensor
        return (a * s1 + b * s2).sum().item(), ps[0].sum().item()

    step(0.3, 0.7, [0.5, 0.6, 0.7, 0.8])  # also materialises a, b and ps
    distinct = step(0.25, 0.75, [0.9, 1.1, 1.2, 1.3])
    before = torch_tpu.metrics()["compiles"]
    equal = step(0.5, 0.5, [1.0, 1.0, 1.0, 1.0])
    assert torch_tpu.metrics()["compiles"] == before
    assert distinct[0] == pytest.approx(4.0) and equal[0] == pytest.approx(4.0)
    assert equal[1] == pytest.approx(3 * 0.5 * 0.9)


def test_dead_intermediates_take_no_device_memory():
    def chain(mode):
        with torch_tpu.eager_mode(mode):
            x = torch.ones(256, 1024, device="tpu")  # 1 MiB
            torch.tpu.synchronize()
            torch.tpu.reset_peak_memory_stats()
            base = torch.tpu.memory_allocated()
            y = x
            for _ in range(6):
                y = y * 1.01 + 1  # every step makes two 1 MiB intermediates
            total = y.sum()
            del y
            value = total.item()
            return torch.tpu.max_memory_allocated() - base, value

    strict_peak, strict_value = chain("strict")
    fused_peak, fused_value = chain("fused")
    assert fused_value == pytest.approx(strict_value, rel=1e-5)
    assert strict_peak >= 2 * 1024 * 1024
    assert fused_peak < 64 * 1024  # only the scalar result and scalar parameters


def test_results_match_cpu_with_views_and_in_place_updates(fused):
    def f(x, y):
        x = x.clone()
        x[1:3].mul_(y[0])
        x.t()[0].add_(1.0)
        v = x.view(-1)[2:10]
        v.sub_(0.5)
        z = torch.cat([x, y], 0).relu()
        return torch.cat([z.sum(0), x.reshape(-1)])

    check(f, torch.randn(4, 5), torch.randn(2, 5))


def test_reading_an_old_value_after_an_in_place_update(fused):
    x = torch.arange(8.0, device="tpu")
    total = x.sum()
    x.add_(100)
    assert total.item() == 28.0
    assert x[0].item() == 100.0


def test_training_matches_cpu_and_compiles_once(fused):
    torch.manual_seed(0)
    config = workloads.GPTConfig(vocab=64, d_model=32, layers=1, heads=2, seq=16, batch=2)
    cpu_model = workloads.GPT(config)
    tpu_model = workloads.GPT(config)
    tpu_model.load_state_dict(cpu_model.state_dict())
    tpu_model.to("tpu")
    # SGD: Adam would magnify rounding noise in near-zero gradients (the key bias).
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
    tpu_opt = torch.optim.SGD(tpu_model.parameters(), lr=0.1, momentum=0.9)
    compiles = []
    for step in range(5):
        for group in cpu_opt.param_groups + tpu_opt.param_groups:
            group["lr"] = 0.1 / (step + 1)  # a schedule must not recompile
        tokens, targets = workloads.gpt_batch(config, seed=step)
        before = torch_tpu.metrics()["compiles"]
        losses = []
        for model, opt, device in ((cpu_model, cpu_opt, "cpu"), (tpu_model, tpu_opt, "tpu")):
            opt.zero_grad()
            _, loss = model(tokens.to(device), targets.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        compiles.append(torch_tpu.metrics()["compiles"] - before)
        assert losses[1] == pytest.approx(losses[0], rel=1e-4, abs=1e-5)
    assert compiles[3:] == [0, 0], compiles
    for p_cpu, p_tpu in zip(cpu_model.parameters(), tpu_model.parameters()):
        torch.testing.assert_close(p_tpu.cpu(), p_cpu, rtol=1e-4, atol=1e-5)


def test_cut_reasons(fused, allow_fallback):
    before = counters()["fused_cuts"]
    a = torch.randn(4, 4, device="tpu") + 1
    torch.tpu.synchronize()
    b = a * 2
    torch.linalg.ldl_factor(b)  # no lowering: runs on the CPU, reading b cuts the graph
    c = b - 1
    torch_tpu.set_eager_mode("strict")  # switching mode runs what is pending
    torch_tpu.set_eager_mode("fused")
    c.sum().item()
    after = torch_tpu.metrics()["fused_cuts"]
    grown = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert grown.get("sync", 0) >= 1
    assert grown.get("fallback", 0) >= 1
    assert grown.get("mode_switch", 0) == 1


def test_size_limit_cuts_long_graphs():
    code = (
        "import torch, torch_tpu\n"
        "torch_tpu.set_eager_mode('fused')\n"
        "x = torch.zeros(3, device='tpu')\n"
        "for _ in range(12):\n"
        "    x = x + 1\n"
        "assert x.cpu().tolist() == [12.0, 12.0, 12.0]\n"
        "cuts = torch_tpu.metrics()['fused_cuts']\n"
        "print(cuts.get('size_limit', 0), cuts.get('data_read', 0))\n"
    )
    out = run_python(code, TORCH_TPU_FUSED_MAX_OPS="5")
    assert out.returncode == 0, out.stderr
    size_cuts, read_cuts = map(int, out.stdout.split()[-2:])
    assert size_cuts == 2  # 13 ops (the zeros' fill and 12 adds): cut at 5 and 10
    assert read_cuts == 1


def test_data_dependent_shapes_and_random_ops(fused):
    torch.manual_seed(3)
    x = torch.randn(100, device="tpu")
    mask = x > 0
    picked = x[mask]
    assert picked.shape[0] == int(mask.sum().item())
    torch.manual_seed(11)
    fused_draw = torch.rand(5, device="tpu").cpu()
    with torch_tpu.eager_mode("strict"):
        torch.manual_seed(11)
        strict_draw = torch.rand(5, device="tpu").cpu()
    torch.testing.assert_close(fused_draw, strict_draw)


def test_errors_in_an_op_leave_the_pending_graph_usable(fused):
    a = torch.ones(3, device="tpu") * 2
    with pytest.raises(RuntimeError, match="size"):
        torch.ones(4, device="tpu") + torch.ones(5, device="tpu")
    assert a.cpu().tolist() == [2.0, 2.0, 2.0]


def test_optimizer_step_launches_the_pending_graph(fused):
    # Each iteration then starts on an empty graph: the same segments (and
    # cached programs) every step, and the update runs while the host goes on.
    model = torch.nn.Linear(8, 4).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = torch_tpu.metrics()["fused_cuts"].get("optimizer_step", 0)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(2, 8, device="tpu")).square().sum().backward()
        opt.step()
    assert torch_tpu.metrics()["fused_cuts"].get("optimizer_step", 0) - before == 3


def thread_switch_cuts():
    return torch_tpu.metrics()["fused_cuts"].get("thread_switch", 0)


@pytest.mark.skipif(os.environ.get("TORCH_TPU_FUSED_MERGE_BACKWARD", "0") not in ("", "0"),
                    reason="backward joins the forward's graph (TORCH_TPU_FUSED_MERGE_BACKWARD)")
def test_backward_starts_a_graph_of_its_own(fused):
    # Backward runs on autograd's device thread: the forward graph is launched
    # when it starts, and the backward graph when the main thread goes on.
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model = copy.deepcopy(cpu_model).to("tpu")
    x = torch.randn(4, 8)
    before = thread_switch_cuts()
    loss = model(x.to("tpu")).square().sum()
    loss.backward()
    assert thread_switch_cuts() - before == 1
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    assert thread_switch_cuts() - before == 2
    cpu_model(x).square().sum().backward()
    with torch.no_grad():
        for p in cpu_model.parameters():
            p.mul_(0.5)
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad)
        torch.testing.assert_close(p.detach().cpu(), q.detach())


def test_ops_from_another_thread_start_a_new_graph(fused):
    x = torch.arange(6.0, device="tpu")
    y = x * 2  # pending, recorded by this thread
    results = {}

    def worker():
        results["z"] = y + 1  # reads the pending value from another thread

    before = thread_switch_cuts()
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert thread_switch_cuts() - before == 1
    w = results["z"] * 3  # back on this thread: the worker's graph is cut
    assert thread_switch_cuts() - before == 2
    torch.testing.assert_close(w.cpu(), (torch.arange(6.0) * 2 + 1) * 3)


MERGE_BACKWARD_RUN = """
import json, threading, torch, torch_tpu
from torch_tpu import testing as workloads
torch_tpu.set_eager_mode("fused")
torch.manual_seed(0)
config = workloads.GPT_TINY
cpu_model = workloads.GPT(config)
tpu_model = workloads.GPT(config)
tpu_model.load_state_dict(cpu_model.state_dict())
tpu_model.to("tpu")
cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
tpu_opt = torch.optim.SGD(tpu_model.parameters(), lr=0.1)
record = {"cpu_losses": [], "tpu_losses": [], "executions": [], "thread_switch_cuts": []}
for step in range(4):
    tokens, targets = workloads.gpt_batch(config, seed=step)
    record["cpu_losses"].append(workloads.train_step(cpu_model, cpu_opt, tokens, targets).item())
    torch.tpu.synchronize()
    if step == 3:
        torch.tpu.reset_peak_memory_stats()
        base = torch.tpu.memory_allocated()
    before = torch_tpu.metrics()
    _, loss = tpu_model(tokens.to("tpu"), targets.to("tpu"))
    loss.backward()
    tpu_opt.step()
    tpu_opt.zero_grad()
    record["tpu_losses"].append(loss.item())
    after = torch_tpu.metrics()
    record["executions"].append(after["executions"] - before["executions"])
    record["thread_switch_cuts"].append(after["fused_cuts"].get("thread_switch", 0) -
                                        before["fused_cuts"].get("thread_switch", 0))
record["peak_bytes"] = torch.tpu.max_memory_allocated() - base
record["max_param_error"] = max((p.detach().cpu() - q.detach()).abs().max().item()
                                for p, q in zip(tpu_model.parameters(), cpu_model.parameters()))
# A thread of the user's own still starts a graph of its own.
y = torch.arange(6.0, device="tpu") * 2
before = torch_tpu.metrics()["fused_cuts"].get("thread_switch", 0)
worker = threading.Thread(target=lambda: record.setdefault("z", (y + 1).cpu().tolist()))
worker.start()
worker.join()
record["user_thread_cuts"] = torch_tpu.metrics()["fused_cuts"].get("thread_switch", 0) - before
print(json.dumps(record))
"""


def test_merged_backward_keeps_activations_inside_one_program():
    runs = {}
    for merge in ("0", "1"):
        out = run_python(MERGE_BACKWARD_RUN, TORCH_TPU_FUSED_MERGE_BACKWARD=merge)
        assert out.returncode == 0, out.stderr
        runs[merge] = json.loads(out.stdout.strip().splitlines()[-1])
    split, merged = runs["0"], runs["1"]
    for run in (split, merged):
        assert run["tpu_losses"] == pytest.approx(run["cpu_losses"], rel=1e-4, abs=1e-5)
        assert run["max_param_error"] < 1e-4
        assert run["z"] == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
        assert run["user_thread_cuts"] == 1
    # Split: forward, backward (cut when autograd's thread starts, and again when
    # the main thread goes on) and the optimizer; merged: no cut into backward.
    assert split["thread_switch_cuts"][1:] == [2, 2, 2]
    assert merged["thread_switch_cuts"][1:] == [1, 1, 1]
    assert merged["executions"][-1] == split["executions"][-1] - 1
    # Activations saved for backward are never written out.
    assert merged["peak_bytes"] < 0.75 * split["peak_bytes"], (merged["peak_bytes"], split["peak_bytes"])


def test_in_place_update_donates_the_old_buffer():
    x = torch.zeros(256, 1024, device="tpu")  # 1 MiB
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    before = torch_tpu.metrics()["donated_buffers"]
    for _ in range(3):
        x.add_(1)
    torch.tpu.synchronize()
    assert torch_tpu.metrics()["donated_buffers"] - before >= 3
    assert torch.tpu.max_memory_allocated() - base < 64 * 1024  # never two copies of x
    assert x[0, 0].item() == 3.0


def test_in_place_update_keeps_a_buffer_that_a_pending_read_uses():
    x = torch.arange(1024.0, device="tpu")
    alias = x.view(32, 32)  # same storage: no second buffer holder
    total = alias.sum()
    x.mul_(2)
    assert total.item() == float(sum(range(1024)))
    assert alias[0, 1].item() == 2.0


_RANDOM_THEN_REDUCED_CODE = (
    "import torch, torch.nn.functional as F, torch_tpu\n"
    "torch_tpu.set_eager_mode('fused')\n"
    "torch.manual_seed(0)\n"
    "x = torch.randn(256, 512, device='tpu')\n"
    "lse = torch.logsumexp(torch.log_softmax(x, -1), -1)\n"
    "h = torch.randn(4, 64, 64, device='tpu')\n"
    "y = F.layer_norm(h + F.dropout(h, 0.1, training=True), (64,))\n"
    "print(lse.abs().max().item(), y.mean(-1).abs().max().item(), y.std(-1, unbiased=False).mean().item())\n"
)


def test_random_values_reduced_in_the_same_graph_compile(tmp_path):
    # randn or dropout feeding a softmax or a layer norm in one graph: XLA:CPU's
    # LLVM once spent exponential time on such a program (torch_tpu turns the
    # culprit off, _plugin.xla_flags). A fresh cache makes the programs compile here.
    out = run_python(_RANDOM_THEN_REDUCED_CODE, timeout=240, TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr[-2000:]
    lse, mean, std = (float(v) for v in out.stdout.split())
    assert lse < 1e-5 and mean < 1e-5 and abs(std - 1) < 1e-3



def test_growing_cache_graphs_are_rebuilt_in_kept_graphs(fused):
    # Decoding with a growing cache cuts another graph at every length, each after the
    # graph of the length before. From the second pass on, every length's graph is
    # rebuilt in the one kept from the first pass (nothing built or hashed), with results
    # as CPU's; 40 lengths are more than a training step's few graphs.
    torch.manual_seed(3)
    lengths = 40
    q, new = torch.randn(1, 8), torch.randn(lengths, 1, 8)

    def attend(device, cache, token):
        cache = torch.cat([cache, token.to(device)])
        scores = torch.softmax(q.to(device) @ cache.T / 8 ** 0.5, dim=-1)
        return cache, scores @ cache

    expected = []
    cache = torch.zeros(0, 8)
    for t in range(lengths):
        cache, out = attend("cpu", cache, new[t])
        expected.append(out)
    for rerun in range(3):
        before = counters()
        cache = torch.zeros(0, 8, device="tpu")
        for t in range(lengths):
            cache, out = attend("tpu", cache, new[t])
            torch.testing.assert_close(out.cpu(), expected[t])  # the read cuts the graph
        after = counters()
        if rerun == 2:
            assert delta(before, after, "fused_graphs_kept") >= lengths - 1
            assert delta(before, after, "compiles") == 0
