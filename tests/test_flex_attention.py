"""PyTorch's flex attention on tpu (its device check refused tpu): eager and under
torch.compile, a block mask and a score mod, forward and backward against attention
written out on the CPU."""
import math

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import torch_tpu  # noqa: F401


def _causal(b, h, q, k):
    return q >= k


def _relative_bias(score, b, h, q, k):
    return score + (q - k) * 0.1 - h * 0.05


def _reference(q, k, v, causal, biased):
    """Attention written out, on the CPU, with autograd."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    positions = torch.arange(q.size(-2))
    if biased:
        heads = torch.arange(q.size(1)).view(-1, 1, 1)
        scores = scores + (positions.view(-1, 1) - positions.view(1, -1)) * 0.1 - heads * 0.05
    if causal:
        scores = scores.masked_fill(positions.view(-1, 1) < positions.view(1, -1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("causal, biased", [(True, False), (False, True), (True, True)])
def test_flex_attention_matches_attention_written_out(compiled, causal, biased):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    tpu = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    mask = create_block_mask(_causal, 2, 4, 16, 16, device="tpu") if causal else None
    attend = torch.compile(flex_attention, backend="tpu") if compiled else flex_attention
    out = attend(*tpu, score_mod=_relative_bias if biased else None, block_mask=mask)
    expected = _reference(*cpu, causal, biased)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(expected)
    out.backward(grad.to("tpu"))
    expected.backward(grad)
    for a, b in zip(tpu, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)


def test_other_devices_are_still_checked():
    meta = torch.randn(1, 1, 16, 8, device="meta")
    with pytest.raises(ValueError, match="only supported on"):
        flex_attention(meta, meta, meta)
