"""Sparse COO and CSR tensors on tpu: construction, transfers and to_dense run on
tpu; other sparse ops run through the counted CPU fallback. Compared with CPU."""
import pytest
import torch
from torch.testing import assert_close

import torch_tpu


def fallback_count(op):
    return torch_tpu.metrics().get("fallback_ops", {}).get(op, 0)


def sparse_input():
    dense = torch.tensor([[0.0, 2.0, 0.0, -1.0], [3.0, 0.0, 4.0, 0.0], [0.0, 0.0, 0.0, 5.0]])
    return dense


def test_coo_transfer_accessors_and_to_dense_run_on_tpu():
    # TORCH_TPU_FALLBACK=error (the default in tests): none of this falls back.
    dense = sparse_input()
    s = dense.to_sparse().to("tpu")
    assert s.layout == torch.sparse_coo and s.device.type == "tpu"
    assert s._indices().device.type == "tpu" and s._values().device.type == "tpu"
    assert s._nnz() == 5 and s.sparse_dim() == 2 and s.dense_dim() == 0 and s.is_coalesced()
    assert_close(s.to_dense().cpu(), dense)
    back = s.cpu()
    assert back.layout == torch.sparse_coo
    assert_close(back.to_dense(), dense)
    # Uncoalesced duplicates sum, and hybrid (dense-dim) values scatter whole rows.
    idx = torch.tensor([[0, 1, 0], [2, 0, 2]])
    dup = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0, 3.0]), (2, 3))
    assert_close(dup.to("tpu").to_dense().cpu(), dup.to_dense())
    hybrid = torch.randn(4, 3).to_sparse(1)
    assert_close(hybrid.to("tpu").to_dense().cpu(), hybrid.to_dense())
    clone = s.clone()
    clone.zero_()
    assert clone._nnz() == 0 and s._nnz() == 5


def test_csr_transfer_and_accessors():
    dense = sparse_input()
    c = dense.to_sparse_csr().to("tpu")
    assert c.layout == torch.sparse_csr and c.device.type == "tpu"
    for part in (c.crow_indices(), c.col_indices(), c.values()):
        assert part.device.type == "tpu"
    assert c._nnz() == 5
    back = c.cpu()
    assert back.layout == torch.sparse_csr
    assert_close(back.to_dense(), dense)


def test_sparse_ops_fall_back_counted(allow_fallback):
    dense = sparse_input()
    before = fallback_count("aten::_to_sparse")
    s = dense.to("tpu").to_sparse()
    assert s.layout == torch.sparse_coo and s.device.type == "tpu"
    assert_close(s.cpu().to_dense(), dense)
    assert fallback_count("aten::_to_sparse") == before + 1
    # Arithmetic on sparse tpu tensors keeps the layout and the device.
    twice = s + s
    assert twice.layout == torch.sparse_coo and twice.device.type == "tpu"
    assert_close(twice.to_dense().cpu(), 2 * dense)
    # An out= operand written by the CPU kernel is updated in place.
    other = torch.randn(4, 2)
    out = torch.empty(0, device="tpu")
    result = torch.mm(s, other.to("tpu"), out=out)
    assert result is out
    assert_close(out.cpu(), dense @ other)


def test_sparse_fallback_is_an_error_when_forbidden():
    idx = torch.tensor([[0, 1, 0], [2, 0, 2]])
    uncoalesced = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0, 3.0]), (2, 3)).to("tpu")
    with pytest.raises(NotImplementedError, match="coalesce.*for sparse tensors and TORCH_TPU_FALLBACK=error"):
        uncoalesced.coalesce()


def test_sparse_factories_and_edge_cases(allow_fallback):
    # A factory with only a device= argument (no tensor to move) builds on tpu.
    empty = torch.sparse_coo_tensor(size=(2, 3), device="tpu")
    assert empty.device.type == "tpu" and empty._nnz() == 0
    assert_close(empty.to_dense().cpu(), torch.zeros(2, 3))
    # No sparse dims: every value lands on the one dense block, summed.
    values = torch.randn(3, 2, 2)
    blocks = torch.sparse_coo_tensor(torch.zeros(0, 3, dtype=torch.long), values, (2, 2))
    assert_close(blocks.to("tpu").to_dense().cpu(), blocks.to_dense())
    # An index list operand (Tensor?[]) travels to the CPU with the rest.
    s = sparse_input().to_sparse().to("tpu")
    idx = torch.tensor([0, 2]).to("tpu")
    assert_close(s.index_select(0, idx).to_dense().cpu(), sparse_input()[[0, 2]])


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_sparse_mm_reduce_forward_backward(allow_fallback, reduce):
    # amax/amin backward needs the argmax the forward keeps only for inputs
    # requiring grad: the fallback passes requires_grad on to the CPU kernel.
    a = torch.randn(5, 5)
    a[a < 0] = 0
    w = torch.randn(5, 3)
    results = []
    for device in ("cpu", "tpu"):
        csr = a.to_sparse_csr().to(device)
        weight = w.detach().clone().to(device).requires_grad_()
        out = torch.sparse.mm(csr, weight, reduce)
        (out * torch.linspace(-1, 1, 15).reshape(5, 3).to(device)).sum().backward()
        results.append((out.detach().cpu(), weight.grad.cpu()))
    assert_close(results[1][0], results[0][0])
    assert_close(results[1][1], results[0][1])


def test_sampled_addmm_forward_backward(allow_fallback):
    mask = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]).to_sparse_csr()
    m1, m2 = torch.randn(3, 4), torch.randn(4, 2)
    results = []
    for device in ("cpu", "tpu"):
        a = m1.detach().clone().to(device).requires_grad_()
        b = m2.detach().clone().to(device).requires_grad_()
        out = torch.sparse.sampled_addmm(mask.to(device), a, b, beta=0.5, alpha=2.0)
        out.values().sum().backward()
        results.append((out.cpu().to_dense(), a.grad.cpu(), b.grad.cpu()))
    for got, want in zip(results[1], results[0]):
        assert_close(got, want)
