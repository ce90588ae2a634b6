"""Data-parallel training written as for CUDA, after the two identifier swaps:
`torch.device("cuda", local_rank)` -> `torch.device("tpu", local_rank)` and
`dist.init_process_group("nccl")` -> `dist.init_process_group()`.

    .venv/bin/python -m torch.distributed.run --nproc-per-node 2 examples/ddp_train.py

Each rank trains the reference GPT on its own batches; DDP averages the
gradients (collectives of tpu_dist), so every rank ends with the same weights,
which the script checks.
"""
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_tpu import testing as ref


def main(steps=10):
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
    torch.tpu.set_device(device)

    torch.manual_seed(0)
    model = DDP(ref.GPT(ref.GPT_TINY).to(device), device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(steps):
        x, y = (t.to(device) for t in ref.gpt_batch(ref.GPT_TINY, seed=step * world + rank))
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)[1]
        loss.backward()
        opt.step()
        loss = loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print("step %2d  mean loss %.4f  %.1f ms" % (step, loss.item(), 1000 * (time.perf_counter() - start)))

    # the same weights on every rank
    checksum = torch.stack([p.detach().sum() for p in model.parameters()]).cpu()
    everyone = [None] * world
    dist.all_gather_object(everyone, checksum)
    assert all(torch.equal(c, everyone[0]) for c in everyone), "ranks diverged"
    if rank == 0:
        print("%d ranks, identical weights after %d steps" % (world, steps))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
