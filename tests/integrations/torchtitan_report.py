"""TorchTitan on tpu, as a report (not in CI: torchtitan 0.3.0 pins datasets<4.8, which
TRL's pin excludes, and needs triton's 286 MB wheel to import):

    python tests/integrations/torchtitan_report.py   # reports/torchtitan.json

Installs torchtitan 0.3.0 and what it imports into .venv/torchtitan-packages (once),
makes a character tokenizer and a small text dataset, and runs TorchTitan's own
trainer (torchrun, llama3 debugmodel with its default flex attention, seq 64, 3 steps,
float32) on tpu: 1 rank eager, 1 rank with its compile option (backend "inductor", its
default, which hands graphs on tpu to backend "tpu"; TorchTitan refuses any backend but
inductor and aot_eager for a flex-attention model, in distributed/compile.py),
2 ranks with FSDP2 over tpu_dist. Any CPU fallback fails the run. It prints TorchTitan's
step lines (loss, grad norm, memory, tokens/s, MFU) and checks that the compiled run's
losses equal the eager run's and that both FSDP ranks log the same losses.

What this torch (2.13.0) lacks for torchtitan 0.3.0, which wants a nightly: it calls
torch.distributed.set_timeout after the first step (torchtitan/distributed/utils.py,
set_pg_timeouts); the runs here define it as a no-op. Its default SPMD backend
("spmd_types") needs a newer fully_shard; the FSDP run uses "partial_dtensor".
TorchTitan picks an accelerator device type unconditionally (tools/utils.py:
device_type = _get_available_device_type() or "cuda"), so there is no CPU/gloo run to
compare against; the FSDP2 arithmetic itself is tested against CPU in tests/test_distributed.py.
"""
import json
import os
import random
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = os.path.join(ROOT, ".venv", "torchtitan-packages")
WORK = os.path.join(ROOT, "reports", "torchtitan")
REQUIREMENTS = ["torchtitan==0.3.0", "torchdata==0.11.0", "torch_checkpointing==0.1.1", "tyro==1.0.17",
                "einops==0.8.2", "spmd_types==0.2.3", "docstring-parser==0.18.0", "typeguard==4.6.1",
                "shtab==1.13.0", "triton==3.9.0", "tensorboard==2.21.0", "tensorboard-data-server==0.7.2",
                "absl-py==2.5.1", "protobuf==7.36.2", "markdown==3.11.3", "werkzeug==3.1.9", "grpcio==1.85.3"]
MAIN = """
import runpy, torch.distributed
if not hasattr(torch.distributed, "set_timeout"):  # torch 2.13 has none; torchtitan 0.3.0 calls it
    torch.distributed.set_timeout = lambda timeout, group=None: None
runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
"""
STEP = re.compile(r"step:\s*(\d+)\s+\S*loss:\s*([\d.]+)\s+\S*grad_norm:\s*([\d.]+)\s+\S*memory:\s*([\d.]+)GiB"
                  r".*?tps:\s*([\d,]+)\s+\S*tflops:\s*([\d.]+)\s+\S*mfu:\s*([\d.]+)%")


def install():
    if os.path.isdir(os.path.join(PACKAGES, "torchtitan")):
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", PACKAGES, *REQUIREMENTS],
                   check=True)


def assets():
    import tokenizers
    os.makedirs(os.path.join(WORK, "tokenizer"), exist_ok=True)
    os.makedirs(os.path.join(WORK, "data"), exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz .,"
    vocab = {"<|begin_of_text|>": 0, "<|end_of_text|>": 1, **{c: i + 2 for i, c in enumerate(letters)}}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token=" "))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Split("", behavior="isolated")  # a token per character
    tokenizer.save(os.path.join(WORK, "tokenizer", "tokenizer.json"))
    with open(os.path.join(WORK, "tokenizer", "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "add_bos_token": True}, f)
    rng = random.Random(0)
    with open(os.path.join(WORK, "data", "train.json"), "w") as f:
        for _ in range(64):
            words = ("".join(rng.choice("abcdefgh") for _ in range(5)) for _ in range(40))
            f.write(json.dumps({"text": " ".join(words)}) + "\n")
    with open(os.path.join(WORK, "titan_main.py"), "w") as f:
        f.write(MAIN)


def run(name, ranks, *options):
    folder = os.path.join(WORK, name)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               os.path.join(WORK, "titan_main.py"), "--module", "llama3", "--config", "llama3_debugmodel",
               "--hf-assets-path", os.path.join(WORK, "tokenizer"), "--dataloader.dataset", "c4_test",
               "--dataloader.dataset-path", os.path.join(WORK, "data"), "--training.seq-len", "64",
               "--training.steps", "3", "--training.dtype", "float32", "--training.mixed-precision-param",
               "float32", "--checkpoint.no-enable", "--validator.no-enable", "--dump-folder", folder,
               *options, "activation-checkpoint:none"]
    env = dict(os.environ, PYTHONPATH=PACKAGES, TORCH_TPU_FALLBACK="error", TORCH_TPU_CPU_DEVICES=str(max(ranks, 2)))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    lines = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if STEP.search(line)]
    steps = []
    for line in lines:
        step, loss, grad_norm, memory, tps, tflops, mfu = STEP.search(line).groups()
        steps.append({"step": int(step), "loss": float(loss), "grad_norm": float(grad_norm),
                      "memory_gib": float(memory), "tps": int(tps.replace(",", "")), "tflops": float(tflops),
                      "mfu_percent": float(mfu)})
    result = {"ranks": ranks, "options": list(options), "returncode": done.returncode, "steps": steps}
    if done.returncode != 0:
        result["error"] = done.stderr[-3000:]
    print(name, json.dumps(result, indent=1)[:3000], flush=True)
    return result


def main():
    install()
    assets()
    results = {"eager": run("eager", 1, "--training.local-batch-size", "2"),
               "compiled": run("compiled", 1, "--training.local-batch-size", "2", "--compile.enable",
                               "--compile.backend", "inductor"),
               "fsdp2": run("fsdp2", 2, "--training.local-batch-size", "1", "--parallelism.spmd-backend",
                            "partial_dtensor", "--debug.seed", "0")}
    eager, compiled, fsdp = (results[k]["steps"] for k in ("eager", "compiled", "fsdp2"))
    checks = {
        "every run trained 3 steps": all(r["returncode"] == 0 and len({s["step"] for s in r["steps"]}) == 3
                                         for r in results.values()),
        "compiled losses equal eager's": len(eager) == len(compiled) == 3 and all(
            abs(a["loss"] - b["loss"]) <= 1e-3 * abs(a["loss"]) for a, b in zip(eager, compiled)),
        "both FSDP ranks log the same losses": len(fsdp) == 6 and all(
            fsdp[2 * i]["loss"] == fsdp[2 * i + 1]["loss"] for i in range(3)),
    }
    results["checks"] = checks
    with open(os.path.join(ROOT, "reports", "torchtitan.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(checks, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
