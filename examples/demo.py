"""The main demo: a small GPT (pre-LN, causal softmax attention, tanh-GELU MLP,
AdamW) trained on torch.device("tpu") beside the same model on CPU. Prints both
loss curves, step times and what the backend did."""
import copy
import time

import torch

import torch_tpu
from torch_tpu import testing as ref


def train(model, device, cfg, steps):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses, times, compiles = [], [], []
    for step in range(steps):
        x, y = (t.to(device) for t in ref.gpt_batch(cfg, step))
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)[1]
        loss.backward()
        opt.step()
        losses.append(loss.item())  # reading the loss waits for the step
        times.append(time.perf_counter() - start)
        if device != "cpu":
            compiles.append(torch_tpu.metrics()["compiles"])
    return losses, times, compiles


def main():
    steps = 20
    cfg = ref.GPT_TINY
    info = torch_tpu.plugin_info()
    print("tpu device: %s, %d device(s), PJRT API %s" % (torch.tpu.get_device_name(), torch.tpu.device_count(),
                                                        info["api_version"]))
    print("model: GPT vocab %d, d_model %d, %d layers, %d heads, sequence %d, batch %d" % (
        cfg.vocab, cfg.d_model, cfg.layers, cfg.heads, cfg.seq, cfg.batch))
    torch.manual_seed(0)
    model = ref.GPT(cfg)
    cpu_losses, cpu_times, _ = train(copy.deepcopy(model), "cpu", cfg, steps)
    torch_tpu.reset_metrics()
    tpu_losses, tpu_times, compiles = train(copy.deepcopy(model), "tpu", cfg, steps)
    print("\nstep   cpu loss    tpu loss")
    for i in list(range(0, steps, 4)) + [steps - 1]:
        print("%4d  %10.5f  %10.5f" % (i, cpu_losses[i], tpu_losses[i]))
    print("\nmax |cpu - tpu| loss difference: %.2e" % max(abs(a - b) for a, b in zip(cpu_losses, tpu_losses)))
    steady = slice(3, None)
    mean = lambda xs: 1000 * sum(xs) / len(xs)
    print("step time  cpu eager: %.1f ms   tpu strict: %.1f ms   (tpu first step, compiling: %.0f ms)" % (
        mean(cpu_times[steady]), mean(tpu_times[steady]), 1000 * tpu_times[0]))
    m = torch_tpu.metrics()
    per_step = [compiles[0]] + [b - a for a, b in zip(compiles, compiles[1:])]
    print("programs compiled per step: %s; %d executions per step, %d fallbacks" % (
        ", ".join(map(str, per_step[:4])) + (", then %d" % sum(per_step[4:]) if steps > 4 else ""),
        m["executions"] // steps, m["fallbacks"]))
    print()
    print(torch_tpu.metrics_report())


if __name__ == "__main__":
    main()
