"""The main demo: one small MLP trained on torch.device("tpu") beside the same
model on CPU. Prints both loss curves, step times and what the backend did."""
import copy
import time

import torch
from torch import nn

import torch_tpu


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def train(model, device, steps):
    torch.manual_seed(1)
    x = torch.randn(256, 64, device=device)
    labels = torch.randn(256, 10, device=device)
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad()
        loss = ((model(x) - labels) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())  # reads the loss: waits for the step
        times.append(time.perf_counter() - start)
    return losses, times


def main():
    steps = 20
    info = torch_tpu.plugin_info()
    print("tpu device: %s (%d device(s), PJRT API %s)" % (torch.tpu.get_device_name(), torch.tpu.device_count(),
                                                          info["api_version"]))
    model = make_model()
    cpu_losses, cpu_times = train(copy.deepcopy(model), "cpu", steps)
    torch_tpu.reset_metrics()
    tpu_losses, tpu_times = train(copy.deepcopy(model), "tpu", steps)
    print("\nstep   cpu loss    tpu loss")
    for i in range(0, steps, max(1, steps // 10)):
        print("%4d  %10.6f  %10.6f" % (i, cpu_losses[i], tpu_losses[i]))
    print("%4d  %10.6f  %10.6f" % (steps - 1, cpu_losses[-1], tpu_losses[-1]))
    max_diff = max(abs(a - b) for a, b in zip(cpu_losses, tpu_losses))
    print("\nmax |cpu - tpu| loss difference: %.2e" % max_diff)
    steady = slice(2, None)
    print("step time  cpu eager: %.2f ms   tpu strict: %.2f ms (first step, compiling: %.0f ms)" % (
        1000 * sum(cpu_times[steady]) / len(cpu_times[steady]),
        1000 * sum(tpu_times[steady]) / len(tpu_times[steady]), 1000 * tpu_times[0]))
    print()
    print(torch_tpu.metrics_report())


if __name__ == "__main__":
    main()
