"""Fault injection: a launch the plugin refuses surfaces as a Python exception at the op
(strict) or at the read that ran the fused graph, and no tensor silently takes a wrong
value: those the failed graph was to compute raise when used, the others keep theirs."""
import pytest
import torch
import torch_tpu


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
