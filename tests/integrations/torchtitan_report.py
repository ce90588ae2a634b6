"""TorchTitan on tpu against the same runs on CPU with gloo, as a report (not in CI:
torchtitan 0.3.0 pins datasets<4.8, which TRL's pin excludes, and needs triton's 286 MB
wheel to import):

    python tests/integrations/torchtitan_report.py   # reports/torchtitan.json

Installs torchtitan 0.3.0 and what it imports into .venv/torchtitan-packages (once),
makes a character tokenizer and a small text dataset, and runs TorchTitan's own
trainer (torchrun, llama3 debugmodel with its default flex attention, seq 64, 3 steps,
float32) on tpu: 1 rank eager, 1 rank with its compile option (backend "inductor", its
default, which hands graphs on tpu to backend "tpu"; TorchTitan refuses any backend but
inductor and aot_eager for a flex-attention model, in distributed/compile.py),
2 ranks with FSDP2 over tpu_dist. Any CPU fallback fails the run. The references are
the same trainer on CPU: 1 rank, and 2 ranks with FSDP2 over gloo. It prints TorchTitan's
step lines (loss, grad norm, memory, tokens/s, MFU) and checks every tpu run's losses
against its CPU reference.

Bridges (in the launcher below, the same for tpu and CPU runs):
- Initial weights. tpu's random streams are not CPU's, so the launcher draws every random
  initialisation (nn.init's normal_, trunc_normal_, uniform_) on the CPU from a generator
  seeded by call order, whole, and copies it (an FSDP2 parameter: its shard) into the
  parameter: every run starts from the same weights, sharded or not.
- A CPU run. TorchTitan picks an accelerator device type unconditionally (tools/utils.py:
  device_type = _get_available_device_type() or "cuda"); with TITAN_DEVICE=cpu the
  launcher sets device_type to "cpu" (gloo follows from torch's device-backend map) and
  device_module to a small host stand-in (device count, properties, memory stats). Flex
  attention refuses backward on CPU; the CPU runs use its dense implementation (the math the
  tpu runs compile) through backend "aot_eager". Gloo has no PREMUL_SUM, which FSDP2 asks
  for under TorchTitan's gradient divide factor of 1; the CPU runs reduce that sum as SUM.
- What this torch (2.13.0) lacks for torchtitan 0.3.0, which wants a nightly: it calls
  torch.distributed.set_timeout after the first step (torchtitan/distributed/utils.py,
  set_pg_timeouts); the launcher defines it as a no-op. Its default SPMD backend
  ("spmd_types") needs a newer fully_shard; the FSDP runs use "partial_dtensor".
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
MAIN = r"""
import itertools, os, runpy, types
import torch, torch.distributed, torch.nn.init
if not hasattr(torch.distributed, "set_timeout"):  # torch 2.13 has none; torchtitan 0.3.0 calls it
    torch.distributed.set_timeout = lambda timeout, group=None: None

# Every random initialisation drawn whole on the CPU, in call order, and copied in.
_calls = itertools.count(1)
def _drawn_on_cpu(init):
    def draw(tensor, *args, **kwargs):
        # Meta tensors (the model is built on meta) hold no values; a call that brings its
        # generator is torch's own re-dispatch of one already drawn here.
        if tensor.is_meta or "generator" in kwargs:
            return init(tensor, *args, **kwargs)
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        generator = torch.Generator().manual_seed(next(_calls))
        whole = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
        init(whole, *args, generator=generator, **kwargs)
        with torch.no_grad():
            if isinstance(tensor, DTensor):
                shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh,
                                                                      tensor.placements)
                whole = whole[tuple(slice(o, o + n) for o, n in zip(offset, shape))]
                tensor.to_local().copy_(whole)
            else:
                tensor.copy_(whole)
        return tensor
    return draw
for name in ("normal_", "trunc_normal_", "uniform_"):
    setattr(torch.nn.init, name, _drawn_on_cpu(getattr(torch.nn.init, name)))

if os.environ.get("TITAN_DEVICE") == "cpu":
    import torchtitan.tools.utils as titan_utils
    properties = types.SimpleNamespace(name="cpu", total_memory=64 << 30)
    titan_utils.device_type = "cpu"
    titan_utils.device_module = types.SimpleNamespace(
        device_count=lambda: 1, set_device=lambda device: None, current_device=lambda: 0,
        get_device_name=lambda device=None: "cpu", get_device_properties=lambda device=None: properties,
        memory_stats=lambda device=None: {}, reset_peak_memory_stats=lambda device=None: None,
        empty_cache=lambda: None, synchronize=lambda device=None: None)
    # Gloo has no PREMUL_SUM, which FSDP2 asks for under TorchTitan's gradient divide factor
    # of 1: the same sum, reduced as SUM (FSDP2's force_sum_reduction_for_comms).
    import torchtitan.distributed.fsdp as titan_fsdp
    undivided = titan_fsdp.disable_fsdp_gradient_division
    def summed(model):
        undivided(model)
        for module in model.modules():
            if isinstance(module, titan_fsdp.FSDPModule):
                module.set_force_sum_reduction_for_comms(True)
    titan_fsdp.disable_fsdp_gradient_division = summed
    # Flex attention refuses backward on CPU (its kernels are forward-only there); its dense
    # implementation, the math the tpu runs compile, trains: aot_eager runs it.
    import torch.nn.attention.flex_attention as flex
    from torchtitan.models.common.attention import FlexAttention
    validate = flex._validate_device
    flex._validate_device = lambda q, k, v: None if q.device.type == "cpu" else validate(q, k, v)
    FlexAttention._compiled_flex_attn = torch.compile(flex.flex_attention, backend="aot_eager")
runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
"""
STEP = re.compile(r"step:\s*(\d+)\s+\S*loss:\s*([\d.]+)\s+\S*grad_norm:\s*([\d.]+)\s+\S*memory:\s*(-?[\d.]+)GiB"
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


def run(name, ranks, *options, device="tpu"):
    folder = os.path.join(WORK, name)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               os.path.join(WORK, "titan_main.py"), "--module", "llama3", "--config", "llama3_debugmodel",
               "--hf-assets-path", os.path.join(WORK, "tokenizer"), "--dataloader.dataset", "c4_test",
               "--dataloader.dataset-path", os.path.join(WORK, "data"), "--training.seq-len", "64",
               "--training.steps", "3", "--training.dtype", "float32", "--training.mixed-precision-param",
               "float32", "--checkpoint.no-enable", "--validator.no-enable", "--dump-folder", folder,
               *options, "activation-checkpoint:none"]
    env = dict(os.environ, PYTHONPATH=PACKAGES, TITAN_DEVICE=device)
    if device == "tpu":
        env.update(TORCH_TPU_FALLBACK="error", TORCH_TPU_CPU_DEVICES=str(max(ranks, 2)))
    else:  # torch_tpu not loaded at all
        env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    lines = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if STEP.search(line)]
    steps = []
    for line in lines:
        step, loss, grad_norm, memory, tps, tflops, mfu = STEP.search(line).groups()
        steps.append({"step": int(step), "loss": float(loss), "grad_norm": float(grad_norm),
                      "memory_gib": float(memory), "tps": int(tps.replace(",", "")), "tflops": float(tflops),
                      "mfu_percent": float(mfu)})
    result = {"device": device, "ranks": ranks, "options": list(options), "returncode": done.returncode,
              "steps": steps}
    if done.returncode != 0:
        result["error"] = done.stderr[-3000:]
    print(name, json.dumps(result, indent=1)[:3000], flush=True)
    return result


def losses(result, rank=0):
    """The losses one rank logged, by step (both FSDP ranks log every step)."""
    return [s["loss"] for s in result["steps"]][rank::result["ranks"]]


def close(a, b, rtol=1e-4):
    return len(a) == len(b) == 3 and all(abs(x - y) <= rtol * abs(y) for x, y in zip(a, b))


def main():
    install()
    assets()
    one, two = ("--training.local-batch-size", "2"), ("--training.local-batch-size", "1", "--parallelism.spmd-backend",
                                                       "partial_dtensor", "--debug.seed", "0")
    results = {"eager": run("eager", 1, *one),
               "compiled": run("compiled", 1, *one, "--compile.enable", "--compile.backend", "inductor"),
               "fsdp2": run("fsdp2", 2, *two),
               "cpu": run("cpu", 1, *one, device="cpu"),
               "cpu_fsdp2": run("cpu_fsdp2", 2, *two, device="cpu")}
    r = results
    checks = {
        "every run trained 3 steps": all(x["returncode"] == 0 and len({s["step"] for s in x["steps"]}) == 3
                                         for x in r.values()),
        "eager losses equal CPU's": close(losses(r["eager"]), losses(r["cpu"])),
        "compiled losses equal CPU's": close(losses(r["compiled"]), losses(r["cpu"])),
        "FSDP2 losses equal CPU gloo FSDP2's, on both ranks": all(
            close(losses(r["fsdp2"], k), losses(r["cpu_fsdp2"], k)) for k in (0, 1)),
    }
    results["checks"] = checks
    os.makedirs(os.path.join(ROOT, "reports"), exist_ok=True)
    with open(os.path.join(ROOT, "reports", "torchtitan.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(checks, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
