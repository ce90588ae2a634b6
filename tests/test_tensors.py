"""Storage, transfers and views: tpu tensors must alias exactly as CPU ones."""
import copy

import pytest
import torch
from torch.testing import assert_close

import torch_tpu

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip(dtype):
    x = sample((3, 5), dtype)
    y = x.to("tpu")
    assert y.device.type == "tpu" and y.dtype == dtype and y.shape == x.shape
    assert_close(y.cpu(), x, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (1,), (7,)], ids=str)
def test_zero_dim_and_empty(shape):
    x = sample(shape, torch.float32)
    y = x.to("tpu")
    assert y.shape == x.shape
    assert_close(y.cpu(), x)
    assert_close((y + 1).cpu(), x + 1)
    if x.dim() == 0:
        assert y.item() == x.item()


def test_non_blocking_and_tpu_to_tpu_copies():
    x = sample((4, 6), torch.float32)
    y = x.to("tpu", non_blocking=True)
    z = y.clone()
    y.add_(1)
    assert_close(z.cpu(), x)
    assert_close(y.cpu(), x + 1)
    w = torch.empty(4, 6, device="tpu", dtype=torch.float64)
    w.copy_(y)
    assert w.dtype == torch.float64
    assert_close(w.cpu(), (x + 1).double())


def test_copy_between_devices():
    if torch.tpu.device_count() < 2:
        pytest.skip("needs two tpu devices")
    x = sample((5,), torch.float32)
    a = x.to("tpu:0")
    b = a.to("tpu:1")
    assert b.device == torch.device("tpu", 1)
    assert_close(b.cpu(), x)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_copies_between_devices_stay_on_the_devices(mode):
    """tpu:0 -> tpu:1 goes device to device (PJRT_Buffer_CopyToDevice), through views, dtype
    conversions, lazy conjugation and negation, broadcasting and pending values."""
    if torch.tpu.device_count() < 2:
        pytest.skip("needs two tpu devices")
    x = sample((4, 6), torch.float32)
    z = torch.complex(sample((4, 6), torch.float32), sample((4, 6), torch.float32, seed=1))
    with torch_tpu.eager_mode(mode):
        a = x.to("tpu:0") * 2  # pending in fused mode
        torch_tpu.reset_metrics()
        whole = a.to("tpu:1")
        strided = a[:, ::2].to("tpu:1")
        converted = a.to("tpu:1", dtype=torch.int32)
        into_view = torch.zeros(6, 4, device="tpu:1")
        into_view.t().copy_(a)
        broadcast = torch.zeros(3, 4, 6, device="tpu:1")
        broadcast.copy_(a)
        neg = torch.zeros(4, 6, device="tpu:1")
        neg.copy_(a._neg_view())
        conj = z.to("tpu:0").conj().to("tpu:1")
        into_conj = torch.zeros(4, 6, dtype=torch.complex64, device="tpu:1").conj()
        into_conj.copy_(z.to("tpu:0"))
        m = torch_tpu.metrics()
        assert m["device_to_device_transfers"] == 8, m
        assert m["device_to_host_transfers"] == 0, m
        assert whole.device == torch.device("tpu", 1)
        assert_close(whole.cpu(), x * 2)
        assert_close(strided.cpu(), (x * 2)[:, ::2])
        assert_close(converted.cpu(), (x * 2).to(torch.int32))
        assert_close(into_view.cpu(), (x * 2).t())
        assert_close(broadcast.cpu(), (x * 2).expand(3, 4, 6))
        assert_close(neg.cpu(), -(x * 2))
        assert_close(conj.resolve_conj().cpu(), z.conj().resolve_conj())
        assert_close(into_conj.resolve_conj().cpu(), z)
        assert_close(a.cpu(), x * 2)  # the source is unchanged


def test_copy_broadcasts_and_converts():
    dst = torch.zeros(3, 4, device="tpu", dtype=torch.int32)
    dst.copy_(torch.tensor([1.7, 2.2, 3.9, -4.5]))
    assert_close(dst.cpu(), torch.tensor([1.7, 2.2, 3.9, -4.5]).to(torch.int32).expand(3, 4))
    dst2 = torch.zeros(3, 4, device="tpu")
    dst2.copy_(torch.arange(4.0, device="tpu") if False else torch.arange(4.0).to("tpu"))
    assert_close(dst2.cpu(), torch.arange(4.0).expand(3, 4))


VIEWS = {
    "transpose": lambda t: t.transpose(0, 1),
    "permute": lambda t: t.permute(2, 0, 1),
    "slice": lambda t: t[:, 1:3],
    "step_slice": lambda t: t[::2, :, ::3],
    "select": lambda t: t[1],
    "narrow": lambda t: t.narrow(2, 1, 3),
    "expand": lambda t: t[:, :1].expand(4, 3, 5),
    "unsqueeze_squeeze": lambda t: t.unsqueeze(1).squeeze(1),
    "view": lambda t: t.view(12, 5),
    "reshape_of_transpose": lambda t: t.transpose(0, 2).reshape(-1),
    "unfold": lambda t: t.unfold(2, 2, 1),
    "diagonal": lambda t: t.diagonal(0, 1, 2),
    "as_strided": lambda t: t.as_strided((3, 3), (7, 2), 4),
    "flip_view_chain": lambda t: t[1:, ::2].transpose(0, 2)[::2],
    "view_dtype": lambda t: t.view(torch.int32),
    "view_dtype_narrow": lambda t: t.view(torch.int16),
    "t_of_2d": lambda t: t[0].t(),
    "split": lambda t: t.split(2, dim=2)[1],
    "chunk": lambda t: t.chunk(2, dim=0)[1],
    "unbind": lambda t: t.unbind(1)[2],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_read(name):
    x = sample((4, 3, 5), torch.float32)
    y = x.to("tpu")
    expected = VIEWS[name](x)
    got = VIEWS[name](y)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    assert got.storage_offset() == expected.storage_offset()
    assert_close(got.cpu(), expected)
    assert_close((got * 2).cpu(), expected * 2)


WRITABLE = ["transpose", "permute", "slice", "step_slice", "select", "narrow", "view", "diagonal",
            "as_strided", "flip_view_chain", "view_dtype", "view_dtype_narrow", "t_of_2d", "split", "chunk",
            "unbind"]


@pytest.mark.parametrize("name", WRITABLE)
def test_write_through_view(name):
    x = sample((4, 3, 5), torch.float32)
    y = x.to("tpu")
    vx, vy = VIEWS[name](x), VIEWS[name](y)
    if vx.dtype.is_floating_point:
        vx.mul_(3).add_(1)
        vy.mul_(3).add_(1)
    else:
        vx.fill_(7)
        vy.fill_(7)
    assert_close(y.cpu(), x)  # the base sees the write
    assert_close(vy.cpu(), vx)


def test_setitem_and_index_copy_semantics():
    x = torch.zeros(5, 6)
    y = x.to("tpu")
    for t in (x, y):
        t[1:4, 2] = 3.5
        t[0] = torch.arange(6.0).to(t.device)
        t[:, -1] += 1
        t[2:, :2].zero_()
    assert_close(y.cpu(), x)


def test_views_share_storage_after_inplace_updates():
    base = torch.zeros(2, 3, device="tpu")
    row = base[1]
    col = base[:, 2]
    row.add_(1)
    col.add_(10)
    assert_close(base.cpu(), torch.tensor([[0.0, 0, 10], [1, 1, 11]]))
    assert_close(row.cpu(), torch.tensor([1.0, 1, 11]))


def test_write_into_overlapping_view_raises():
    y = torch.zeros(3, device="tpu")
    with pytest.raises(RuntimeError, match="single memory location"):
        y[:1].expand(3).add_(1)


def test_resize_keeps_content():
    y = torch.arange(6.0).to("tpu")
    y.resize_(10)
    assert_close(y[:6].cpu(), torch.arange(6.0))
    y.resize_(2, 2)
    assert_close(y.cpu(), torch.arange(4.0).view(2, 2))
    out = torch.empty(0, device="tpu")
    torch.add(torch.ones(3, device="tpu"), 1, out=out)
    assert_close(out.cpu(), torch.full((3,), 2.0))


def buffer_shape(t):
    return torch_tpu._C._storage_buffer_shape(t)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_results_and_uploads_keep_their_shape(mode):
    # A storage's device buffer keeps the shape of the value written into it
    # (XLA then lays it out for its readers); 0-dim and 1-D values stay flat.
    a = torch.randn(8, 16)
    with torch_tpu.eager_mode(mode):
        on_tpu = a.to("tpu")
        assert buffer_shape(on_tpu) == [8, 16]
        assert buffer_shape(torch.randn(16).to("tpu")) == [16]
        product = on_tpu @ on_tpu.t()
        total = on_tpu.sum()
        batched = (on_tpu * 2).view(2, 4, 16)
        assert buffer_shape(product) == [8, 8]
        assert buffer_shape(total) == [1]
        assert buffer_shape(batched) == [8, 16]  # a view of the result: the buffer is the result's
        assert buffer_shape(torch.empty(3, 4, device="tpu")) is None
        assert_close(product.cpu(), a @ a.t())
        assert_close(total.cpu(), a.sum())
        assert_close(batched.cpu(), (a * 2).view(2, 4, 16))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_views_of_a_shaped_buffer_read_and_write_its_elements(mode):
    x = torch.randn(4, 6)
    with torch_tpu.eager_mode(mode):
        y = x.to("tpu") * 1
        assert buffer_shape(y) == [4, 6]
        for view in (lambda t: t.view(-1)[5:19], lambda t: t.t(), lambda t: t[1:3, ::2],
                     lambda t: t.view(torch.int32), lambda t: t.as_strided((3, 2), (5, 2), 3)):
            assert_close(view(y).cpu(), view(x), rtol=0, atol=0)
        expected = x.clone()
        for t in (y, expected):
            t.view(-1)[7:10] = 5.0  # through a flat view
            t.t()[2].mul_(3)
            t.view(torch.int32)[0, 0] = 7  # in another element type of the same width
        assert_close(y.cpu(), expected, rtol=0, atol=0)
        assert buffer_shape(y) == [4, 6]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_in_place_updates_keep_the_old_buffer_shape_and_donate_it(mode):
    with torch_tpu.eager_mode(mode):
        shaped = torch.zeros(64, 32, device="tpu")
        flat = torch.zeros(32).to("tpu")
        as_matrix = flat.view(4, 8)  # a 2-D value written into a storage whose buffer is 1-D
        torch.tpu.synchronize()
        before = torch_tpu.metrics()["donated_buffers"]
        shaped.add_(1)
        as_matrix.add_(2)
        torch.tpu.synchronize()
        assert torch_tpu.metrics()["donated_buffers"] - before >= 2
        assert buffer_shape(shaped) == [64, 32] and buffer_shape(flat) == [32]
        assert_close(shaped.cpu(), torch.ones(64, 32))
        assert_close(as_matrix.cpu(), torch.full((4, 8), 2.0))


def test_set_and_storage_sharing():
    a = torch.arange(6.0).to("tpu")
    b = torch.empty(0, device="tpu")
    b.set_(a.untyped_storage(), 2, (2, 2), (2, 1))
    assert_close(b.cpu(), torch.tensor([[2.0, 3], [4, 5]]))
    b.fill_(0)
    assert_close(a.cpu(), torch.tensor([0.0, 1, 0, 0, 0, 0]))


def test_channels_last_and_contiguous():
    x = sample((2, 3, 4, 5), torch.float32)
    y = x.to("tpu").contiguous(memory_format=torch.channels_last)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert y.stride() == x.contiguous(memory_format=torch.channels_last).stride()
    assert_close(y.cpu(), x)
    assert_close(y.contiguous().cpu(), x)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_strided_views_at_every_offset(mode):
    # A strided view is read as a box of its storage where it fits there, and
    # through a padded window where it would wrap around a box dim; views at
    # offsets of either kind share programs (the offset is a runtime scalar),
    # so every offset must still read its own elements.
    import torch_tpu

    x = torch.arange(60.0)
    y = x.to("tpu")
    layouts = [((3, 4), (5, 1)), ((2, 3, 2), (30, 2, 10)), ((4, 2, 3), (15, 3, 1)), ((2, 2), (1, 6)),
               ((3, 1, 4), (5, 7, 1)), ((2, 3), (0, 4))]
    views = [(x, y, layout) for layout in layouts]
    views.append((x.view(torch.int16), y.view(torch.int16), ((5, 6), (12, 2))))  # a storage of another dtype

    def programs():
        m = torch_tpu.metrics()
        return m["compiles"] + m["disk_cache_hits"]

    with torch_tpu.eager_mode(mode):
        for sweep in range(2):
            before = programs()
            for base, on_tpu, (size, stride) in views:
                last = sum((n - 1) * st for n, st in zip(size, stride))
                for offset in range(0, base.numel() - last):
                    expected = base.as_strided(size, stride, offset) * 2
                    assert_close((on_tpu.as_strided(size, stride, offset) * 2).cpu(), expected)
            # Per layout, offset 0, the box and the padded window: not one program per offset.
            assert programs() - before <= (3 * len(views) if sweep == 0 else 0)
        # Attention heads split off a fused qkv projection, as in the GPT workload.
        qkv = torch.randn(2, 8, 12)
        heads = [z.view(2, 8, 2, 2).transpose(1, 2) for z in qkv.to("tpu").split(4, dim=2)]
        expected = [z.view(2, 8, 2, 2).transpose(1, 2) for z in qkv.split(4, dim=2)]
        for got, want in zip(heads, expected):
            assert_close((got @ heads[0].transpose(-2, -1)).cpu(), want @ expected[0].transpose(-2, -1))


def test_same_program_reused_for_views_at_other_offsets():
    import torch_tpu

    y = torch.arange(100.0).to("tpu")
    (y[1:11] * 2).cpu()  # offset 0 is a program of its own (no offset parameter)
    before = torch_tpu.metrics()["compiles"]
    for start in range(2, 20):
        assert_close((y[start:start + 10] * 2).cpu(), torch.arange(start, start + 10.0) * 2)
    assert torch_tpu.metrics()["compiles"] == before


def _printed_cases():
    torch.manual_seed(0)
    big = torch.randn(40, 50)                                   # summarised with "..."
    return {
        "float": torch.randn(3, 4),
        "summarised": big,
        "int": torch.arange(-5, 7).reshape(3, 4),
        "bool": torch.tensor([True, False]),
        "bfloat16": torch.tensor([1.5, -2.25, 1e4], dtype=torch.bfloat16),
        "complex": torch.tensor([1 + 2j, -0.5j]),
        "scalar": torch.tensor(3.25),
        "inf_nan": torch.tensor([float("inf"), float("nan"), 1e-8, 0.0]),
        "empty": torch.zeros(0, 3),
        "strided_view": big[::3, 1:7].t(),
    }


@pytest.mark.parametrize("name", list(_printed_cases()))
def test_printing_matches_torch_formatting_on_the_device_with_one_download(name):
    import torch._tensor_str

    if torch_tpu.plugin_info()["platform"] == "tpu":
        pytest.skip("torch's own formatting on the device computes in float64, which TPUs lack")
    t = _printed_cases()[name].to("tpu")
    device_side = torch._tensor_str._str_intern.__wrapped__  # torch's own path: ops on tpu
    torch.tpu.synchronize()
    before = torch_tpu.metrics()
    t.cpu()
    between = torch_tpu.metrics()
    printed = repr(t)
    after = torch_tpu.metrics()
    assert printed == device_side(t)
    # What printing costs is one copy to the CPU (none for an empty tensor): no program.
    assert after["compiles"] == between["compiles"]
    one_copy = between["device_to_host_transfers"] - before["device_to_host_transfers"]
    assert after["device_to_host_transfers"] - between["device_to_host_transfers"] == (one_copy if t.numel() else 0)


@pytest.mark.parametrize("name, edgeitems", [("2d", 3), ("1d", 3), ("3d", 3), ("3d", 1), ("int", 3), ("complex", 3),
                                             ("strided", 3), ("2d", 0)])
def test_printing_a_large_tensor_summarises_it_on_the_device(monkeypatch, name, edgeitems):
    # Past WHOLE_DOWNLOAD_BYTES only the printed edges come to the host (kilobytes, not
    # the tensor), and the text is still torch's own.
    import torch._tensor_str
    from torch_tpu import _printing

    if torch_tpu.plugin_info()["platform"] == "tpu":
        pytest.skip("torch's own formatting on the device computes in float64, which TPUs lack")
    monkeypatch.setattr(_printing, "WHOLE_DOWNLOAD_BYTES", 0)
    torch.manual_seed(0)
    host = {"2d": torch.randn(40, 50), "1d": torch.randn(2000), "3d": torch.randn(20, 4, 30) * 1e8,
            "int": torch.arange(3000).reshape(30, 100), "complex": torch.randn(1500, dtype=torch.complex64),
            "strided": torch.randn(100, 80)[::2, 3:].t()}[name]
    t = host.to("tpu")
    default_edgeitems = torch._tensor_str.PRINT_OPTS.edgeitems
    torch.set_printoptions(edgeitems=edgeitems)
    try:
        torch.tpu.synchronize()
        before = torch_tpu.metrics()["device_to_host_bytes"]
        printed = repr(t)
        downloaded = torch_tpu.metrics()["device_to_host_bytes"] - before
        assert printed == torch._tensor_str._str_intern.__wrapped__(t)
        assert "..." in printed
        kept = 1
        for size in t.shape:
            kept *= min(size, 2 * edgeitems + 1)
        assert downloaded == kept * t.element_size()
    finally:
        torch.set_printoptions(edgeitems=default_edgeitems)


def test_printing_keeps_autograd_suffixes_and_parameter_form():
    w = torch.nn.Parameter(torch.randn(3, 2).to("tpu"))
    y = (w * 2)[:2]
    assert repr(w).startswith("Parameter containing:\ntensor(")
    assert repr(w).endswith("device='tpu:0', requires_grad=True)")
    assert repr(y).endswith("device='tpu:0', grad_fn=<SliceBackward0>)")
    if torch_tpu.plugin_info()["platform"] != "tpu":  # the device-side reference needs float64
        assert repr(y) == torch._tensor_str._str_intern.__wrapped__(y)


def test_printing_a_fake_tpu_tensor_reads_no_values():
    # Dynamo and AOTAutograd print fake tensors while tracing; they have no values to download.
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake = FakeTensorMode().from_tensor(torch.ones(2, 3, device="tpu"))
    assert repr(fake) == "FakeTensor(..., device='tpu:0', size=(2, 3))"


def test_module_to_tpu_keeps_parameters_and_tied_weights():
    # As with CUDA: .to() swaps each parameter's data in place, so parameters keep
    # their identity, tied weights stay tied, and an optimizer made before the
    # move updates the moved parameters.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # tied, as a language model's embedding and head
    reference = copy.deepcopy(model)
    params = list(model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model.to("tpu")
    assert [p is q for p, q in zip(model.parameters(), params)] == [True]
    assert model[1].weight is model[0].weight and model[0].weight.device.type == "tpu"
    ids = torch.tensor([[1, 2, 3]])
    for m, device in ((model, "tpu"), (reference, "cpu")):
        m(ids.to(device)).sum().backward()
    opt.step()
    torch.optim.SGD(reference.parameters(), lr=0.5).step()
    assert_close(model[0].weight.detach().cpu(), reference[0].weight.detach())
    model.cpu()  # and back
    assert model[1].weight is model[0].weight is params[0] and params[0].device.type == "cpu"
    assert_close(params[0].grad, reference[0].weight.grad)


def test_pinned_host_memory_is_recognised_and_released():
    before = torch_tpu.metrics()
    source = torch.randn(1000)
    pinned = source.pin_memory()
    assert pinned.device.type == "cpu" and pinned.is_pinned() and pinned[10:].is_pinned()
    assert not source.is_pinned()
    assert_close(pinned, source, rtol=0, atol=0)
    empty = torch.empty(3, 5, pin_memory=True)
    assert empty.is_pinned()
    # a pinned source copies to the device like any other, blocking or not
    assert_close(pinned.to("tpu", non_blocking=True).cpu(), source, rtol=0, atol=0)
    after = torch_tpu.metrics()
    assert after["pinned_host_allocations"] - before["pinned_host_allocations"] == 2
    live = after["pinned_host_bytes"] - before["pinned_host_bytes"]
    assert live >= 1000 * 4 + 15 * 4 and live % 4096 == 0  # whole pages
    if torch_tpu.plugin_info()["platform"] == "cpu":  # XLA:CPU has no DMA mapping to ask for
        assert after["pinned_host_dma_mapped_bytes"] == 0
    else:
        assert 0 <= after["pinned_host_dma_mapped_bytes"] <= after["pinned_host_bytes"]
    del pinned, empty
    assert torch_tpu.metrics()["pinned_host_bytes"] == before["pinned_host_bytes"]


def test_pinned_memory_the_host_cannot_give_is_an_out_of_memory_error():
    with pytest.raises(torch.OutOfMemoryError, match="could not allocate 1125899906842624 bytes of pinned host"):
        torch.empty(2**50, dtype=torch.uint8, pin_memory=True)
    assert torch.ones(3).pin_memory().is_pinned()  # and the next allocation works


def test_a_data_loader_pins_its_batches_for_the_tpu():
    dataset = torch.utils.data.TensorDataset(torch.randn(12, 3), torch.arange(12))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, pin_memory=True)
    for i, (x, y) in enumerate(loader):
        assert x.is_pinned() and y.is_pinned()
        assert_close(x.to("tpu", non_blocking=True).cpu(), dataset.tensors[0][4 * i:4 * i + 4], rtol=0, atol=0)
        assert_close(y.to("tpu", non_blocking=True).cpu(), dataset.tensors[1][4 * i:4 * i + 4], rtol=0, atol=0)
