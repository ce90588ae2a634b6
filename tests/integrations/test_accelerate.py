"""Accelerate and Hugging Face's Trainer pick tpu with no argument (the
torch_tpu.integrations.accelerate patch), and a CPU choice still wins; Trainer
accumulates, clips, evaluates, saves and resumes (float32 and bf16 autocast) as on CPU, and under
torchrun or `accelerate launch` it is DDP over tpu_dist, matching one process on the
combined batch."""
import os
import subprocess
import sys
import tempfile

import pytest
import torch

accelerate = pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")


@pytest.fixture
def fresh_state(monkeypatch):
    """Accelerate keeps one process-wide state; each test starts from none."""
    monkeypatch.delenv("ACCELERATE_TORCH_DEVICE", raising=False)
    accelerate.state.AcceleratorState._reset_state(True)
    yield monkeypatch
    accelerate.state.AcceleratorState._reset_state(True)


def test_the_integration_loads_only_with_the_library():
    code = "import sys, torch, torch_tpu; print('accelerate' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False"]


def test_accelerator_uses_tpu_and_a_cpu_choice_still_wins(fresh_state):
    assert accelerate.Accelerator().device == torch.device("tpu", 0)
    accelerate.state.AcceleratorState._reset_state(True)
    assert accelerate.Accelerator(cpu=True).device == torch.device("cpu")
    accelerate.state.AcceleratorState._reset_state(True)
    fresh_state.setenv("ACCELERATE_TORCH_DEVICE", "cpu")
    assert accelerate.Accelerator().device == torch.device("cpu")


from trainer_worker import Tokens as _Tokens  # noqa: E402  (the dataset the multi-process run uses too)


def _train(use_cpu):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # no random streams to compare
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=3, per_device_train_batch_size=4,
                                          logging_steps=1, report_to=[], use_cpu=use_cpu, seed=0,
                                          dataloader_pin_memory=False)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens())
    trainer.train()
    device = next(model.parameters()).device
    return [h["loss"] for h in trainer.state.log_history if "loss" in h], device


def test_trainer_trains_on_tpu_as_on_cpu(fresh_state):
    cpu_losses, cpu_device = _train(use_cpu=True)
    accelerate.state.AcceleratorState._reset_state(True)
    tpu_losses, tpu_device = _train(use_cpu=False)
    assert cpu_device.type == "cpu" and tpu_device == torch.device("tpu", 0)
    assert len(tpu_losses) == len(cpu_losses) == 3
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-4)


def _full_run(use_cpu, bf16, output_dir, resume=None):
    """4 optimizer steps of 2 accumulated micro-batches, gradients clipped, evaluated
    and checkpointed every 2 steps; resumed from `resume` when given."""
    accelerate.state.AcceleratorState._reset_state(True)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(
        output_dir=output_dir, max_steps=4, per_device_train_batch_size=2, gradient_accumulation_steps=2,
        max_grad_norm=0.5, bf16=bf16, eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=4,
        save_strategy="steps", save_steps=2, logging_steps=1, report_to=[], use_cpu=use_cpu, seed=0,
        dataloader_pin_memory=False, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens(), eval_dataset=_Tokens())
    head_dtypes = set()  # bf16 under autocast: the matmul ran in the lower precision
    model.lm_head.register_forward_hook(lambda module, args, out: head_dtypes.add(out.dtype))
    trainer.train(resume_from_checkpoint=resume)
    logs = trainer.state.log_history
    history = {key: torch.tensor([h[key] for h in logs if key in h]) for key in ("loss", "grad_norm", "eval_loss")}
    model.head_dtypes = head_dtypes
    return history, {name: p.detach().float().cpu() for name, p in model.named_parameters()}, model


@pytest.mark.parametrize("mode,bf16", [("strict", False), ("fused", False), ("strict", True)],
                         ids=["strict", "fused", "strict-bf16"])
def test_trainer_accumulates_clips_evaluates_saves_and_resumes_as_on_cpu(fresh_state, mode, bf16, tmp_path):
    import torch_tpu
    tolerance = dict(rtol=2e-3, atol=2e-3) if bf16 else dict(rtol=1e-4, atol=1e-4)
    cpu_history, cpu_weights, _ = _full_run(True, bf16, str(tmp_path / "cpu"))
    with torch_tpu.eager_mode(mode):
        history, weights, model = _full_run(False, bf16, str(tmp_path / "tpu"))
        assert next(model.parameters()).device == torch.device("tpu", 0)
        assert model.head_dtypes == {torch.bfloat16 if bf16 else torch.float32}
        assert sorted(os.listdir(tmp_path / "tpu")) == ["checkpoint-2", "checkpoint-4"]
        resumed_history, resumed_weights, _ = _full_run(False, bf16, str(tmp_path / "tpu"),
                                                        resume=str(tmp_path / "tpu" / "checkpoint-2"))
    assert [len(history[k]) for k in ("loss", "grad_norm", "eval_loss")] == [4, 4, 2]
    for key in history:
        torch.testing.assert_close(history[key], cpu_history[key], **tolerance)
        torch.testing.assert_close(resumed_history[key], history[key], **tolerance)
    for name in weights:
        torch.testing.assert_close(weights[name], cpu_weights[name], **tolerance)
        torch.testing.assert_close(resumed_weights[name], weights[name], **tolerance)


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate launch"])
def test_launched_trainer_is_ddp_over_tpu_dist_and_matches_one_process_on_the_combined_batch(tmp_path, launcher):
    """Under torchrun each rank trained alone as process 0 of 1 before the integration;
    `accelerate launch` started one process. Here `accelerate launch` is given no
    process count: it starts one per tpu device (two XLA:CPU devices here)."""
    import json
    worker = os.path.join(os.path.dirname(__file__), "trainer_worker.py")
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE")}
    env["HF_HOME"] = str(tmp_path / "hf")  # no accelerate config file of the user's
    env["TORCH_TPU_CPU_DEVICES"] = "2"
    launch = {"torchrun": [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"],
              "accelerate launch": [os.path.join(os.path.dirname(sys.executable), "accelerate"), "launch"]}
    runs = {"ddp": launch[launcher] + [worker, str(tmp_path / "ddp"), "2"],
            "single": [sys.executable, worker, str(tmp_path / "single"), "4"]}
    for name, cmd in runs.items():
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, (name, out.stderr[-3000:])
    ranks = [json.load(open(tmp_path / f"ddp.{rank}.json")) for rank in (0, 1)]
    single = json.load(open(tmp_path / "single.0.json"))
    assert [(r["rank"], r["processes"], r["device"]) for r in ranks] == [(0, 2, "tpu:0"), (1, 2, "tpu:1")]
    assert ranks[0]["backend"] == "cpu:gloo,tpu:tpu_dist"
    for r in ranks:
        assert len(r["losses"]) == 3
        torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(single["losses"]), rtol=1e-5, atol=1e-5)
        for name, values in single["weights"].items():
            torch.testing.assert_close(torch.tensor(r["weights"][name]), torch.tensor(values), rtol=1e-5, atol=1e-6)
