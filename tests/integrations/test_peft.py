"""PEFT: a LoRA fine-tune of a tiny GPT-2 on tpu matches the same fine-tune on CPU
(losses, and the weights after merging the adapters), in strict and fused mode,
with no CPU fallback."""
import copy

import pytest
import torch

import torch_tpu

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")


def _fine_tune(base, device):
    torch.manual_seed(1)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"], lora_dropout=0.0,
                             fan_in_fan_out=True)  # GPT-2's Conv1D stores weights transposed
    model = peft.get_peft_model(copy.deepcopy(base), config).to(device)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for step in range(4):
        ids = ((torch.arange(16) * 3 + step) % 64).view(2, 8).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    merged = model.merge_and_unload()
    return torch.tensor(losses), {k: v.detach().cpu() for k, v in merged.state_dict().items()}, trainable


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_lora_fine_tune_matches_cpu(mode):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    base = transformers.GPT2LMHeadModel(config)
    cpu_losses, cpu_weights, trainable = _fine_tune(base, "cpu")
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode(mode):
        losses, weights, tpu_trainable = _fine_tune(base, "tpu")
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert tpu_trainable == trainable and trainable and all("lora_" in name for name in trainable)
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-4, atol=1e-4)
    changed = 0
    for name, value in cpu_weights.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-5, msg=name)
        changed += not torch.equal(value, base.state_dict()[name])
    assert changed > 0  # the merged adapters moved the attention weights
