"""Fault injection: a launch the plugin refuses surfaces as a Python exception at the op
(strict) or at the read that ran the fused graph, and no tensor silently takes a wrong
value: those the failed graph was to compute raise when used, the others keep theirs."""
import pytest
import torch
import torch_tpu
from support import run_python


@pytest.fixture
def fail_next_launch():
    yield lambda: torch_tpu._C._inject_launch_failures(1, "injected launch failure")
    torch_tpu._C._inject_launch_failures(0, "")


def test_strict_failure_names_the_op_and_leaves_operands_intact(fail_next_launch):
    with torch_tpu.eager_mode("strict"):
        a = torch.arange(4.0, device="tpu")
        b = torch.ones(4, device="tpu")
        fail_next_launch()
        with pytest.raises(RuntimeError, match=r"add_\(\[4\] float32, \[4\] float32\) failed: injected launch failure"):
            b.add_(a)
        torch.testing.assert_close(b.cpu(), torch.ones(4))  # the failed op wrote nothing
        torch.testing.assert_close((a + b).cpu(), torch.arange(4.0) + 1)


def test_fused_failure_leaves_no_silently_wrong_tensor(fail_next_launch):
    with torch_tpu.eager_mode("fused"):
        a = torch.arange(4.0, device="tpu") * 2
        b = torch.ones(4, device="tpu")
        b.cpu()  # a and b have values on the device
        b.add_(a)  # in place, pending
        c = a * 3  # new, pending
        fail_next_launch()
        with pytest.raises(RuntimeError, match=r"fused graph of 4 ops \(add_, mul, add, sum\).*injected launch failure"):
            (a + 1).sum().item()
        torch.testing.assert_close(a.cpu(), torch.arange(4.0) * 2)  # computed before the failed graph
        for lost in (b, c):  # neither b's old value nor zeros: an error naming the failed graph
            with pytest.raises(RuntimeError, match="this tensor has no value: a fused graph of 4 ops"):
                lost.cpu()
            with pytest.raises(RuntimeError, match="this tensor has no value"):
                (lost + 1).cpu()
        with pytest.raises(RuntimeError, match="this tensor has no value"):
            b[0] = 5.0  # a partial write needs the rest of the value
        b.fill_(2.0)  # a whole new value
        c.copy_(torch.full((4,), 7.0))
        torch.testing.assert_close((b + c).cpu(), torch.full((4,), 9.0))


def test_a_lost_tensor_raises_in_strict_mode_too(fail_next_launch):
    with torch_tpu.eager_mode("fused"):
        x = torch.ones(3, device="tpu") * 4
        fail_next_launch()
        with pytest.raises(RuntimeError, match="injected launch failure"):
            x.sum().item()
    with torch_tpu.eager_mode("strict"):
        with pytest.raises(RuntimeError, match="this tensor has no value"):
            (x * 2).cpu()
        x.zero_()
        torch.testing.assert_close(x.cpu(), torch.zeros(3))


# ------------------------------------------------------------ fork after the device started

FORK_CHILD = """
import gc, os, sys, torch, torch_tpu
torch_tpu.set_eager_mode(sys.argv[1])
x = torch.ones(3, device="tpu") * 2
pending = x + 1  # fused mode: still in the pending graph at the fork
print("parent", x.cpu().tolist(), flush=True)
pid = os.fork()
if pid == 0:
    assert torch.tpu._is_in_bad_fork()
    torch.manual_seed(0)  # seeds every device it may: skips tpu here, as CUDA's is skipped
    del x, pending
    gc.collect()  # the parent's tensors die here without touching the device
    try:
        print("child ran", (torch.ones(3, device="tpu") + 1).cpu().tolist(), flush=True)
    except RuntimeError as e:
        print("child raised:", str(e).splitlines()[0], flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert not torch.tpu._is_in_bad_fork()
print("child status", status, "parent again", (x + 1).cpu().tolist(), pending.cpu().tolist(), flush=True)
"""


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_fork_after_the_device_started_raises_in_the_child_and_never_hangs(mode):
    out = run_python(FORK_CHILD, mode, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "parent [2.0, 2.0, 2.0]"
    assert lines[1].startswith("child raised:") and "cannot use tpu in a forked subprocess" in lines[1]
    assert "'spawn' start method" in lines[1]
    assert lines[2] == "child status 0 parent again [3.0, 3.0, 3.0] [3.0, 3.0, 3.0]"


DATALOADER_WORKERS = """
import sys, torch, torch_tpu
torch_tpu.set_eager_mode(sys.argv[1])
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
model = torch.nn.Linear(4, 1)
cpu_model = torch.nn.Linear(4, 1)
cpu_model.load_state_dict(model.state_dict())
model.to("tpu")  # the device starts before the workers fork
losses = []
for m, device in ((model, "tpu"), (cpu_model, "cpu")):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=2, pin_memory=device == "tpu")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(m(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append((device, loss.item()))
tpu = [l for d, l in losses if d == "tpu"]
cpu = [l for d, l in losses if d == "cpu"]
torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=1e-5, atol=1e-6)
print(len(tpu), "batches")
"""


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_dataloader_workers_fork_after_the_device_started(mode):
    out = run_python(DATALOADER_WORKERS, mode, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "4 batches"


# ------------------------------------------------------------ Ctrl-C in a long wait

INTERRUPTED_WAIT = """
import os, signal, subprocess, sys, time, torch, torch_tpu
mode, steps, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# Ctrl-C raises KeyboardInterrupt, as in a terminal: a process started in the background
# (CI launched with `&`) inherits SIGINT ignored, and Python then leaves it ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
torch_tpu.set_eager_mode(mode)
x = torch.randn(size, size, generator=torch.Generator().manual_seed(0))
t = x.to("tpu")

def work(v, n):
    for i in range(n):
        v = torch.sin(v @ v.t() * 1e-3) + i * 1e-4
    return v

y = work(t, steps)  # fused: one long compile at the read; strict: long device work queued
# Ctrl-C from outside, as a terminal sends it.
subprocess.Popen(["sh", "-c", "sleep 0.2; kill -INT %d" % os.getpid()])
start = time.time()
try:
    y.cpu()
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
print("waited %.2f s" % (time.time() - start), file=sys.stderr)
# The process stays usable: the interrupted value is whole, new work runs.
torch.testing.assert_close(y.cpu(), work(x, steps), rtol=1e-3, atol=1e-4)
torch.testing.assert_close(work(t, 2).cpu(), work(x, 2), rtol=1e-4, atol=1e-5)
print("usable", flush=True)
"""


@pytest.mark.parametrize("mode, steps, size", [("fused", 3000, 32), ("strict", 8, 2048)],
                         ids=["during_a_long_compile", "during_a_blocking_read"])
def test_keyboard_interrupt_in_a_long_wait_leaves_the_process_usable(mode, steps, size):
    out = run_python(INTERRUPTED_WAIT, mode, str(steps), str(size), TORCH_TPU_CACHE_DIR="off", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["interrupted", "usable"], out.stderr[-1000:]


def test_a_remembered_strict_op_that_fails_names_itself(fail_next_launch):
    # Repeated, the op is launched from the program the memo kept (no build): its
    # failure still names the op and its operands, and writes nothing.
    with torch_tpu.eager_mode("strict"):
        a = torch.arange(4.0, device="tpu")
        b = torch.ones(4, device="tpu")
        for _ in range(3):
            b.add_(a)
        expected = torch.ones(4) + 3 * torch.arange(4.0)
        fail_next_launch()
        with pytest.raises(RuntimeError, match=r"add_\(\[4\] float32, \[4\] float32\) failed: injected launch failure"):
            b.add_(a)
        torch.testing.assert_close(b.cpu(), expected)
        b.add_(a)
        torch.testing.assert_close(b.cpu(), expected + torch.arange(4.0))
