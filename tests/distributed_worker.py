"""One rank of the tpu_dist tests, launched by torchrun (tests/test_distributed.py).

`python -m torch.distributed.run --nproc-per-node N distributed_worker.py SCENARIO...`
runs the scenarios in order in one process group; each prints "rank R SCENARIO ok".
The group is created as CUDA code creates it after the identifier swap:
`dist.init_process_group()` with no backend, then the device of LOCAL_RANK.
Expected values are computed on CPU from every rank's inputs, which each rank
can rebuild since they derive from the rank number.
"""
import copy
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.testing import assert_close

import torch_tpu

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DEVICE = torch.device("tpu", int(os.environ["LOCAL_RANK"]))


def rank_input(r, shape=(3, 4), dtype=torch.float32):
    """The input rank r contributes: distinct per rank, exact in float32."""
    base = torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float64).reshape(shape)
    return (base * (r + 1) + r).to(dtype)


def all_inputs(**kw):
    return [rank_input(r, **kw) for r in range(WORLD)]


def collectives():
    R = dist.ReduceOp
    stack = torch.stack(all_inputs())
    for op, expected in [(R.SUM, stack.sum(0)), (R.AVG, stack.mean(0)), (R.MIN, stack.amin(0)),
                         (R.MAX, stack.amax(0)), (R.PRODUCT, stack.prod(0)),
                         (dist._make_nccl_premul_sum(0.5), stack.sum(0) * 0.5),
                         (dist._make_nccl_premul_sum(torch.tensor(0.25, device=DEVICE)), stack.sum(0) * 0.25)]:
        t = rank_input(RANK).to(DEVICE)
        dist.all_reduce(t, op=op)
        assert t.device == DEVICE
        assert_close(t.cpu(), expected, msg=lambda m: "all_reduce %s: %s" % (op, m))

    # integer AVG truncates, as NCCL's does; bfloat16 and a strided view
    ints = torch.stack(all_inputs(dtype=torch.int64))
    t = rank_input(RANK, dtype=torch.int64).to(DEVICE)
    dist.all_reduce(t, op=R.AVG)
    assert_close(t.cpu(), torch.div(ints.sum(0), WORLD, rounding_mode="trunc"))
    t = rank_input(RANK, dtype=torch.bfloat16).to(DEVICE)
    dist.all_reduce(t)
    assert_close(t.cpu(), torch.stack(all_inputs(dtype=torch.bfloat16)).float().sum(0).bfloat16())
    whole = torch.zeros(4, 6, device=DEVICE)
    view = whole.t()[1:5]  # non-contiguous, offset
    view.copy_(rank_input(RANK, shape=(4, 4)).to(DEVICE))
    dist.all_reduce(view)
    expected_whole = torch.zeros(4, 6)
    expected_whole.t()[1:5] = torch.stack(all_inputs(shape=(4, 4))).sum(0)
    assert_close(whole.cpu(), expected_whole)

    # broadcast into a slice, from the last rank
    root = WORLD - 1
    buf = torch.zeros(2, 3, 4, device=DEVICE)
    if RANK == root:
        buf[1] = rank_input(RANK).to(DEVICE)
    dist.broadcast(buf[1], src=root)
    assert_close(buf.cpu(), torch.stack([torch.zeros(3, 4), rank_input(root)]))

    # gathers
    outs = [torch.empty(3, 4, device=DEVICE) for _ in range(WORLD)]
    dist.all_gather(outs, rank_input(RANK).to(DEVICE))
    for got, expected in zip(outs, all_inputs()):
        assert_close(got.cpu(), expected)
    out = torch.empty(WORLD * 3, 4, device=DEVICE)
    dist.all_gather_into_tensor(out, rank_input(RANK).to(DEVICE))
    assert_close(out.cpu(), torch.cat(all_inputs()))
    root = 0
    gathered = [torch.empty(3, 4, device=DEVICE) for _ in range(WORLD)] if RANK == root else None
    dist.gather(rank_input(RANK).to(DEVICE), gathered, dst=root)
    if RANK == root:
        for got, expected in zip(gathered, all_inputs()):
            assert_close(got.cpu(), expected)

    # reductions to one rank and scattered reductions
    t = rank_input(RANK).to(DEVICE)
    dist.reduce(t, dst=WORLD - 1)
    if RANK == WORLD - 1:
        assert_close(t.cpu(), stack.sum(0))
    big = torch.stack(all_inputs(shape=(WORLD * 2, 3)))  # [rank, WORLD*2, 3]
    for op, reduced in [(R.SUM, big.sum(0)), (R.AVG, big.mean(0))]:
        out = torch.empty(2, 3, device=DEVICE)
        dist.reduce_scatter_tensor(out, rank_input(RANK, shape=(WORLD * 2, 3)).to(DEVICE), op=op)
        assert_close(out.cpu(), reduced[2 * RANK:2 * RANK + 2])
    out = torch.empty(3, 4, device=DEVICE)
    dist.reduce_scatter(out, [rank_input(RANK).to(DEVICE) * (j + 1) for j in range(WORLD)])
    assert_close(out.cpu(), stack.sum(0) * (RANK + 1))

    # coalesced: one call of the backend for several tensors
    outs = [torch.empty(WORLD * 3, 4, device=DEVICE) for _ in range(2)]
    scattered = [torch.empty(2, 3, device=DEVICE) for _ in range(2)]
    summed = [rank_input(RANK).to(DEVICE) * (k + 1) for k in range(2)]
    before = torch_tpu.metrics()["collectives"]
    with dist._coalescing_manager():  # torch's fast path: the backend's *_coalesced calls
        for k, out in enumerate(outs):
            dist.all_gather_into_tensor(out, rank_input(RANK).to(DEVICE) * (k + 1))
    with dist._coalescing_manager():
        for k, out in enumerate(scattered):
            dist.reduce_scatter_tensor(out, rank_input(RANK, shape=(WORLD * 2, 3)).to(DEVICE) * (k + 1))
    assert torch_tpu.metrics()["collectives"] - before == 2  # one per batch
    with dist._coalescing_manager(device=DEVICE):  # the backend's start/endCoalescing
        for t in summed:
            dist.all_reduce(t)
    for k in range(2):
        assert_close(outs[k].cpu(), torch.cat(all_inputs()) * (k + 1))
        assert_close(scattered[k].cpu(), big.sum(0)[2 * RANK:2 * RANK + 2] * (k + 1))
        assert_close(summed[k].cpu(), stack.sum(0) * (k + 1))

    # scatter, all-to-all (even and uneven), point to point
    chunks = [rank_input(j) for j in range(WORLD)]
    got = torch.empty(3, 4, device=DEVICE)
    dist.scatter(got, [c.to(DEVICE) for c in chunks] if RANK == 0 else None, src=0)
    assert_close(got.cpu(), chunks[RANK])
    send = rank_input(RANK, shape=(WORLD * 2, 2)).to(DEVICE)
    recv = torch.empty(WORLD * 2, 2, device=DEVICE)
    dist.all_to_all_single(recv, send)
    assert_close(recv.cpu(), torch.cat([rank_input(j, shape=(WORLD * 2, 2))[2 * RANK:2 * RANK + 2]
                                        for j in range(WORLD)]))
    # rank j sends j + 1 rows to each peer
    send = torch.full((WORLD * (RANK + 1), 2), float(RANK), device=DEVICE)
    recv = torch.empty(sum(j + 1 for j in range(WORLD)), 2, device=DEVICE)
    dist.all_to_all_single(recv, send, output_split_sizes=[j + 1 for j in range(WORLD)],
                           input_split_sizes=[RANK + 1] * WORLD)
    assert_close(recv.cpu(), torch.cat([torch.full((j + 1, 2), float(j)) for j in range(WORLD)]))
    outs = [torch.empty(j + 1, device=DEVICE) for j in range(WORLD)]
    dist.all_to_all(outs, [torch.full((RANK + 1,), float(RANK * 10 + j), device=DEVICE) for j in range(WORLD)])
    for j, got in enumerate(outs):
        assert_close(got.cpu(), torch.full((j + 1,), float(j * 10 + RANK)))
    peer = (RANK + 1) % WORLD
    source = (RANK - 1) % WORLD
    incoming = torch.empty(3, 4, device=DEVICE)
    ops = [dist.P2POp(dist.isend, rank_input(RANK).to(DEVICE), peer),
           dist.P2POp(dist.irecv, incoming, source)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert_close(incoming.cpu(), rank_input(source))

    if WORLD == 2:  # a receive from any source names its sender
        if RANK == 1:
            dist.send(torch.full((2,), 7.0, device=DEVICE), dst=0)
        else:
            anything = torch.empty(2, device=DEVICE)
            assert dist.recv(anything) == 1
            assert_close(anything.cpu(), torch.full((2,), 7.0))

    # complex, bool, 0-dim and empty tensors
    z = torch.complex(rank_input(RANK), -rank_input(RANK)).to(DEVICE)
    dist.all_reduce(z)
    assert_close(z.cpu(), torch.complex(stack.sum(0), -stack.sum(0)))
    flags = torch.tensor([RANK == 0, False, True], device=DEVICE)
    dist.all_reduce(flags, op=R.MAX)
    assert flags.cpu().tolist() == [True, False, True]
    scalar = torch.tensor(float(RANK + 1), device=DEVICE)
    dist.all_reduce(scalar)
    assert scalar.item() == WORLD * (WORLD + 1) / 2
    empty = torch.empty(0, 3, device=DEVICE)
    dist.all_reduce(empty)
    assert empty.shape == (0, 3)

    # async handles, objects, barrier, the CPU side of the default group
    t = rank_input(RANK).to(DEVICE)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert_close(t.cpu(), stack.sum(0))
    assert_close(work.get_future().wait()[0].cpu(), stack.sum(0))
    objects = [None] * WORLD
    dist.all_gather_object(objects, {"rank": RANK})
    assert objects == [{"rank": r} for r in range(WORLD)], objects
    dist.barrier()
    cpu = rank_input(RANK)
    dist.all_reduce(cpu)  # gloo, in the same default group
    assert_close(cpu, stack.sum(0))

    # named forms of the backend
    for backend in ("tpu_dist", "cpu:gloo,tpu:tpu_dist"):
        group = dist.new_group(backend=backend)
        t = rank_input(RANK).to(DEVICE)
        dist.all_reduce(t, group=group)
        assert_close(t.cpu(), stack.sum(0))
        dist.destroy_process_group(group)

    # counted: one collective, its tensor's bytes staged through the host
    before = torch_tpu.metrics()
    dist.all_reduce(rank_input(RANK).to(DEVICE))
    after = torch_tpu.metrics()
    assert after["collectives"] - before["collectives"] == 1, (before, after)
    assert after["collective_host_bytes"] - before["collective_host_bytes"] == 3 * 4 * 4, (before, after)
    assert after["collectives_host_transport"] - before["collectives_host_transport"] == 1, (before, after)
    assert after["collectives_device_transport"] == before["collectives_device_transport"], (before, after)


def make_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(WORLD * 4, 8, generator=g), torch.randn(WORLD * 4, 4, generator=g)


def train_against_reference(model, reference, steps=3):
    """`model` (wrapped, on tpu) sees this rank's quarter of each batch; the CPU
    reference sees the whole batch. Data-parallel SGD must match it."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(steps):
        x, y = batch(step)
        mine = slice(RANK * 4, RANK * 4 + 4)
        loss = ((model(x[mine].to(DEVICE)) - y[mine].to(DEVICE)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = ((reference(x) - y) ** 2).mean()
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()


def ddp():
    from torch.nn.parallel import DistributedDataParallel as DDP

    reference = make_mlp()
    model = copy.deepcopy(reference).to(DEVICE)
    train_against_reference(DDP(model, device_ids=[DEVICE.index]), reference)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5)


def fsdp2():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpu", (WORLD,))
    reference = make_mlp()
    model = copy.deepcopy(reference).to(DEVICE)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # parameters are sharded across ranks, as on CUDA
    assert model[0].weight.to_local().shape[0] == 16 // WORLD
    assert model[0].weight.to_local().device == DEVICE
    train_against_reference(model, reference)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_close(p.full_tensor().cpu(), q.detach(), rtol=1e-5, atol=1e-5)


def checkpoint():
    """FSDP2 model and optimizer state saved with torch.distributed.checkpoint
    (each rank writes its shards) and loaded into a differently initialised copy."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpu", (WORLD,))

    def sharded(seed):
        torch.manual_seed(seed)
        model = fully_shard(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).to(DEVICE), mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        model(torch.randn(4, 8, device=DEVICE)).sum().backward()
        opt.step()
        return model, opt

    path = os.path.join(os.environ["TORCH_TPU_TEST_DIR"], "checkpoint")
    saved, saved_opt = sharded(0)
    model_state, optim_state = get_state_dict(saved, saved_opt)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)
    loaded, loaded_opt = sharded(1)
    model_state, optim_state = get_state_dict(loaded, loaded_opt)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(loaded, loaded_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for p, q in zip(saved.parameters(), loaded.parameters()):
        assert q.to_local().device == DEVICE
        assert_close(q.full_tensor().cpu(), p.full_tensor().cpu())
    exp_avg = [s["exp_avg"].full_tensor().cpu() for s in loaded_opt.state.values()]
    assert_close(exp_avg, [s["exp_avg"].full_tensor().cpu() for s in saved_opt.state.values()])


def dtensor():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("tpu", (WORLD,))
    a, b = rank_input(0, shape=(WORLD * 2, 6)) / 10, rank_input(1, shape=(6, 4)) / 10
    da = distribute_tensor(a.to(DEVICE), mesh, [Shard(0)])
    db = distribute_tensor(b.to(DEVICE), mesh, [Replicate()])
    assert da.to_local().shape == (2, 6)
    assert_close((da @ db).full_tensor().cpu(), a @ b)
    assert_close(da.sum().full_tensor().cpu(), a.sum())
    assert_close(da.redistribute(mesh, [Replicate()]).to_local().cpu(), a)


def attention():
    """Tensor-parallel attention: DTensor query, key and value split on the heads (grouped query
    heads, causal, a mask split with them) or on the batch (a replicated mask, whose gradient is a
    partial sum), eager and compiled, forward and backward against CPU. The fused kernels run:
    DTensor shards them by torch_tpu's rules (the math path raised on a causal DTensor)."""
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("tpu", (WORLD,))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, heads, 5, 8, generator=g) for heads in (2 * WORLD, WORLD, WORLD))
    weight = torch.randn(2, 2 * WORLD, 5, 8, generator=g)
    masks = {"heads": torch.randn(2, 2 * WORLD, 5, 5, generator=g), "square": torch.randn(5, 5, generator=g)}

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True)

    cases = [(Shard(1), None, None), (Shard(1), "heads", Shard(1)), (Shard(0), "square", Replicate()),
             (Replicate(), "square", Replicate())]
    for fn in (attend, torch.compile(attend, backend="tpu")):
        for along, mask_name, mask_placement in cases:
            cpu = [t.clone().requires_grad_() for t in (q, k, v)]
            mask = None if mask_name is None else masks[mask_name].clone().requires_grad_()
            expected = attend(*cpu, mask)
            (expected * weight).sum().backward()
            tpu = [distribute_tensor(t.to(DEVICE), mesh, [along]).requires_grad_() for t in (q, k, v)]
            dmask = None if mask is None else distribute_tensor(
                mask.detach().to(DEVICE), mesh, [mask_placement]).requires_grad_()
            out = fn(*tpu, dmask)
            (out * distribute_tensor(weight.to(DEVICE), mesh, [along])).sum().backward()
            assert out.placements == (along,), out.placements
            assert_close(out.full_tensor().cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
            for got, want in zip(tpu + ([dmask] if mask is not None else []), cpu + ([mask] if mask is not None else [])):
                assert_close(got.grad.full_tensor().cpu(), want.grad, rtol=1e-4, atol=1e-4)


def compiled():
    """torch.compile(backend="tpu") of a DDP module (DDP's hooks run between the
    compiled pieces) and of a DTensor function (functional collectives in the graph)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.nn.parallel import DistributedDataParallel as DDP

    reference = make_mlp()
    model = copy.deepcopy(reference).to(DEVICE)
    train_against_reference(torch.compile(DDP(model, device_ids=[DEVICE.index]), backend="tpu"), reference)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5)

    mesh = init_device_mesh("tpu", (WORLD,))
    a, b = rank_input(0, shape=(WORLD * 2, 6)) / 10, rank_input(1, shape=(6, 4)) / 10
    da = distribute_tensor(a.to(DEVICE), mesh, [Shard(0)])
    db = distribute_tensor(b.to(DEVICE), mesh, [Replicate()])
    product = torch.compile(lambda u, v: (u @ v).redistribute(mesh, [Replicate()]).to_local(), backend="tpu")
    for _ in range(2):
        assert_close(product(da, db).cpu(), a @ b)


def divergent():
    """Rank-divergent code: each rank runs different ops, shapes and
    data-dependent branches between the collectives, and only some ranks use a
    subgroup."""
    x = rank_input(RANK, shape=(5, 5)).to(DEVICE) / 10
    if RANK == 0:
        y = (x @ x.t()).sin().sum(1)
        extra = torch.ones(7, 3, device=DEVICE).cumsum(0)  # a graph rank 1 never builds
        y = y + extra.mean()
    else:
        y = x.tanh()[:, 1] * 3
        if y.sum().item() > 0:  # a data-dependent branch only this rank takes
            y = y - 1
    dist.all_reduce(y)
    xs = [rank_input(r, shape=(5, 5)) / 10 for r in range(WORLD)]
    parts = []
    for r, xr in enumerate(xs):
        if r == 0:
            parts.append((xr @ xr.t()).sin().sum(1) + torch.ones(7, 3).cumsum(0).mean())
        else:
            v = xr.tanh()[:, 1] * 3
            parts.append(v - 1 if v.sum().item() > 0 else v)
    assert_close(y.cpu(), torch.stack(parts).sum(0), rtol=1e-5, atol=1e-5)
    # a subgroup of rank 0 alone: only rank 0 calls its collective
    solo = dist.new_group([0])
    if RANK == 0:
        t = torch.full((3,), 2.0, device=DEVICE)
        dist.all_reduce(t, group=solo)
        assert_close(t.cpu(), torch.full((3,), 2.0))
        # PREMUL_SUM alone scales in place, by a number or a tpu tensor
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=solo)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor(3.0, device=DEVICE)), group=solo)
        assert_close(t.cpu(), torch.full((3,), 3.0))
    dist.barrier()


def asynchronous():
    """async_op=True returns a Work at once; wait() (or the Work's future) gives the
    result, as with NCCL. Collectives on one tensor stay in call order without a
    wait in between; others run side by side; a coalesced batch and DDP's comm
    hooks (futures) get the results."""
    stack = torch.stack(all_inputs())
    t = rank_input(RANK).to(DEVICE)
    work = dist.all_reduce(t, async_op=True)
    assert work.wait() is True
    assert work.is_completed() and work.is_success()
    assert_close(t.cpu(), stack.sum(0))

    # two on one tensor, no wait between: the second reduces the first's result
    t = rank_input(RANK).to(DEVICE)
    first = dist.all_reduce(t, async_op=True)
    second = dist.all_reduce(t, async_op=True)
    second.wait()
    first.wait()
    assert_close(t.cpu(), stack.sum(0) * WORLD)

    # several tensors in flight at once, waited in reverse, and the other collectives
    ts = [rank_input(RANK).to(DEVICE) * (k + 1) for k in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in ts]
    gathered = torch.empty(WORLD * 3, 4, device=DEVICE)
    works.append(dist.all_gather_into_tensor(gathered, rank_input(RANK).to(DEVICE), async_op=True))
    scattered = torch.empty(2, 3, device=DEVICE)
    works.append(dist.reduce_scatter_tensor(scattered, rank_input(RANK, shape=(WORLD * 2, 3)).to(DEVICE),
                                            async_op=True))
    root = torch.zeros(3, 4, device=DEVICE) if RANK else rank_input(0).to(DEVICE)
    works.append(dist.broadcast(root, src=0, async_op=True))
    for w in reversed(works):
        w.wait()
    for k, x in enumerate(ts):
        assert_close(x.cpu(), stack.sum(0) * (k + 1))
    assert_close(gathered.cpu(), torch.cat(all_inputs()))
    big = torch.stack(all_inputs(shape=(WORLD * 2, 3)))
    assert_close(scattered.cpu(), big.sum(0)[2 * RANK:2 * RANK + 2])
    assert_close(root.cpu(), rank_input(0))

    # the future: its value is the output tensors; then() chains on it
    t = rank_input(RANK).to(DEVICE)
    future = dist.all_reduce(t, async_op=True).get_future()
    doubled = future.then(lambda f: f.value()[0] * 2)
    assert_close(doubled.wait().cpu(), stack.sum(0) * 2)
    assert_close(future.wait()[0].cpu(), stack.sum(0))

    # a coalesced batch: its one Work covers every call in it
    summed = [rank_input(RANK).to(DEVICE) * (k + 1) for k in range(3)]
    with dist._coalescing_manager(device=DEVICE, async_ops=True) as manager:
        for x in summed:
            dist.all_reduce(x)
    manager.wait()
    for k, x in enumerate(summed):
        assert_close(x.cpu(), stack.sum(0) * (k + 1))

    # a device synchronize covers the collectives in flight, as CUDA's covers NCCL's stream
    for synchronize in (torch.tpu.synchronize, torch.accelerator.synchronize):
        t = rank_input(RANK).to(DEVICE)
        dist.all_reduce(t, async_op=True)
        synchronize()
        assert_close(t.cpu(), stack.sum(0))


def errors():
    """Bad calls raise a clear error on the calling rank, before any
    communication, and leave the group and the tensors usable."""
    t = rank_input(RANK).to(DEVICE)
    wrong = torch.empty(5, device=DEVICE)
    try:
        dist.all_gather_into_tensor(wrong, t)
    except RuntimeError as e:
        assert "all_gather_into_tensor" in str(e) and "5 elements" in str(e), e
    else:
        raise AssertionError("a wrong all_gather_into_tensor output size did not raise")
    try:
        dist.reduce_scatter_tensor(torch.empty(4, device=DEVICE), t)
    except RuntimeError as e:
        assert "reduce_scatter_tensor" in str(e) and "12 elements" in str(e), e
    else:
        raise AssertionError("a wrong reduce_scatter_tensor input size did not raise")
    try:
        dist.all_gather([torch.empty(3, 4, device=DEVICE)] + [torch.empty(3, 4)] * (WORLD - 1), t)
    except RuntimeError as e:
        assert "allgather" in str(e) and "cpu" in str(e), e
    else:
        raise AssertionError("a CPU output among tpu ones did not raise")
    assert_close(t.cpu(), rank_input(RANK))  # untouched
    dist.all_reduce(t)  # the group still works
    assert_close(t.cpu(), torch.stack(all_inputs()).sum(0))


def peer_exit():
    """A rank that dies makes its peers' next collective raise, not hang."""
    if RANK == WORLD - 1:
        print("rank %d peer_exit ok" % RANK, flush=True)
        os._exit(0)
    t = rank_input(RANK).to(DEVICE)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
    except (RuntimeError, dist.DistError) as e:
        print("rank %d: all_reduce raised after %.1f s: %s" % (RANK, time.monotonic() - start, str(e)[:200]),
              flush=True)
        # the failure report: the collective, its number in the group, the rank that did not arrive
        assert "allreduce (collective #" in str(e), e
        assert "did not arrive" in str(e) and str(e).rstrip().endswith(": %d." % (WORLD - 1)), e
    else:
        raise AssertionError("all_reduce with a dead peer returned")
    assert_close(t.cpu(), rank_input(RANK))  # the rank's own data is intact


def peer_stops():
    """A rank that stops calling (alive, busy elsewhere) makes its peers' collective
    raise within the group's timeout, naming the collective and the rank missing."""
    group = dist.new_group(timeout=datetime.timedelta(seconds=3))
    t = rank_input(RANK).to(DEVICE)
    dist.all_reduce(t, group=group)  # collective #1 of the group, on every rank
    if RANK == WORLD - 1:
        time.sleep(10)  # never calls the second one
        print("rank %d peer_stops ok" % RANK, flush=True)
        os._exit(0)
    start = time.monotonic()
    work = dist.all_reduce(t, group=group, async_op=True)
    try:
        work.wait()
    except dist.DistError as e:
        took = time.monotonic() - start
        print("rank %d: all_reduce raised after %.1f s: %s" % (RANK, took, str(e)[:300]), flush=True)
        assert took < 9, took  # the group's 3 s, the report's 2 s, slack; not the default 30 min
        assert "allreduce (collective #2 of this group, on rank %d of %d)" % (RANK, WORLD) in str(e), e
        assert str(e).rstrip().endswith(": %d." % (WORLD - 1)), e
    else:
        raise AssertionError("all_reduce with a rank that stopped calling returned")
    assert_close(t.cpu(), torch.stack(all_inputs()).sum(0))  # the first one's result, intact


def mismatch():
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL (PyTorch's collective checker, which wraps
    tpu_dist as it wraps NCCL), ranks that call a collective with different shapes
    or dtypes raise before anything is sent, and the group stays usable."""
    shapes = torch.ones(3 + RANK, device=DEVICE)
    dtypes = torch.ones(3, device=DEVICE, dtype=torch.float32 if RANK else torch.int64)
    for bad in (shapes, dtypes):
        try:
            dist.all_reduce(bad)
        except RuntimeError as e:
            assert "Detected mismatch between collectives on ranks" in str(e), e
        else:
            raise AssertionError("a collective whose ranks disagree returned")
    t = rank_input(RANK).to(DEVICE)
    dist.all_reduce(t)
    assert_close(t.cpu(), torch.stack(all_inputs()).sum(0))

SCENARIOS = {f.__name__: f for f in (collectives, asynchronous, ddp, fsdp2, checkpoint, dtensor, attention, compiled, divergent, errors,
                                      peer_exit, peer_stops, mismatch)}


def main(names):
    dist.init_process_group(timeout=datetime.timedelta(seconds=120))
    torch.tpu.set_device(DEVICE)
    try:
        for name in names:
            SCENARIOS[name]()
            torch.tpu.synchronize()
            print("rank %d %s ok" % (RANK, name), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
