"""TRL: a GRPO loop (sampling completions with generate, scoring them, a policy-gradient
step) runs on tpu in one process with no fallback, and its training is CPU's: the
rollouts the tpu run sampled, replayed into the same trainer on CPU, give the same
losses, gradient norms and weights. (Sampling itself draws from tpu's generator, whose
stream is not CPU's, as CUDA's is not.) Tokenizer and prompts are made here."""
import copy

import pytest
import torch

import torch_tpu

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")

LETTERS = "abcdefgh "


def _tokenizer():
    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(LETTERS)}}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<pad>"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Split("", behavior="isolated")  # one token per character
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>", eos_token="<eos>")
    tokenizer.padding_side = "left"
    return tokenizer


def _policy():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(LETTERS) + 2, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return transformers.LlamaForCausalLM(config)


def _length_reward(completions, **kwargs):
    return [len(c) / 6.0 for c in completions]


def _train(policy, tmp_path, device, rollouts=None):
    """Three GRPO steps; on tpu records each step's rollout batch, on CPU replays them.
    SGD: AdamW's first step turns a rounding-level gradient into an lr-sized change. bf16
    off: TRL's default turns autocast on for an accelerator (tpu) and off for use_cpu."""
    accelerate.state.AcceleratorState._reset_state(True)
    args = trl.GRPOConfig(output_dir=str(tmp_path / device), per_device_train_batch_size=4, num_generations=4,
                          max_completion_length=6, optim="sgd", learning_rate=0.1, max_steps=3, logging_steps=1, report_to=[],
                          seed=0, use_cpu=device == "cpu", bf16=False, save_strategy="no", disable_tqdm=True,
                          dataloader_pin_memory=False)
    prompts = datasets.Dataset.from_dict({"prompt": ["abc", "bcd", "cde", "def"] * 4})
    trainer = trl.GRPOTrainer(model=copy.deepcopy(policy), reward_funcs=_length_reward, args=args,
                              train_dataset=prompts, processing_class=_tokenizer())
    prepare = trainer._prepare_inputs
    if rollouts is None:
        rollouts = []

        def record(batch):
            inputs = prepare(batch)
            rollouts.append({k: v.cpu() if torch.is_tensor(v) else v for k, v in inputs.items()})
            return inputs
        trainer._prepare_inputs = record
    else:
        replay = iter(rollouts)
        trainer._prepare_inputs = lambda batch: next(replay)
    trainer.train()
    accelerate.state.AcceleratorState._reset_state(True)
    log = [h for h in trainer.state.log_history if "loss" in h]
    weights = {k: v.detach().cpu() for k, v in trainer.model.named_parameters()}
    return log, weights, rollouts, str(next(trainer.model.parameters()).device)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_grpo_samples_and_trains_on_tpu_as_on_cpu(mode, tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELERATE_TORCH_DEVICE", raising=False)
    policy = _policy()
    with torch_tpu.eager_mode(mode):
        log, weights, rollouts, device = _train(policy, tmp_path, "tpu")
    assert device == "tpu:0"
    assert len(rollouts) == 3
    for batch in rollouts:
        completions = batch["completion_ids"]
        assert completions.shape[0] == 4 and completions.max() < len(LETTERS) + 2
    # The rewards differ within a group somewhere, so some step has a gradient.
    assert any(step["grad_norm"] > 0 for step in log)
    cpu_log, cpu_weights, _, cpu_device = _train(policy, tmp_path, "cpu", rollouts)
    assert cpu_device == "cpu"
    for step, cpu_step in zip(log, cpu_log, strict=True):
        assert step["loss"] == pytest.approx(cpu_step["loss"], rel=1e-4, abs=1e-5)
        assert step["grad_norm"] == pytest.approx(cpu_step["grad_norm"], rel=1e-4, abs=1e-5)
    for name, value in cpu_weights.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-5, msg=name)
