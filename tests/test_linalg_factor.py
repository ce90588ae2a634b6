"""Factorizations and solves against CPU PyTorch (TORCH_TPU_FALLBACK=error):
Cholesky, triangular solves, LU (factor, unpack, solve), det/slogdet, inv,
solve, matrix_exp; forward, backward, batches, broadcasting, empty inputs and
singular / non-positive-definite inputs."""
import pytest
import torch
from torch.testing import assert_close

import torch_tpu  # noqa: F401
from support import make, to_tpu, check_grads

TOL = dict(rtol=1e-4, atol=1e-4)


def same(got, expected, **tol):
    """Compares (nested tuples of) tpu results with CPU ones, dtypes included."""
    if isinstance(expected, torch.Tensor):
        assert got.device.type == "tpu"
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        assert got.shape == expected.shape, (got.shape, expected.shape)
        assert_close(got.cpu(), expected, equal_nan=True, **(tol or TOL))
        return
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        same(g, e, **tol)


def run(fn, *args, **tol):
    expected = fn(*args)
    got = fn(*to_tpu(list(args)))
    same(got, expected, **tol)
    return got


def raises_like(fn, *args):
    """fn raises on tpu exactly as (type and message) on CPU."""
    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(type(cpu.value)) as tpu:
        fn(*to_tpu(list(args)))
    assert str(tpu.value) == str(cpu.value)


def spd(n, batch=(), seed=0, dtype=torch.float32):
    a = make(batch + (n, n), torch.float64, seed)
    return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def well_conditioned(shape, seed=0, dtype=torch.float32):
    a = make(shape, torch.float64, seed)
    n = min(shape[-2:])
    a[..., :n, :n] += 4 * torch.eye(n, dtype=torch.float64)
    return a.to(dtype)


# ------------------------------------------------------------ Cholesky

@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)], ids=str)
def test_cholesky(upper, batch):
    a = spd(5, batch)
    a_asym = a + torch.triu(make(a.shape, seed=3), 1)  # only one triangle may be read
    run(lambda x: torch.linalg.cholesky(x, upper=upper), a)
    run(lambda x: torch.linalg.cholesky(x.mT if upper else x, upper=upper), a_asym)
    run(lambda x: torch.linalg.cholesky_ex(x, upper=upper), a)
    run(lambda x: torch.cholesky(x, upper=upper), a)


def test_cholesky_float64_out_and_empty():
    run(torch.linalg.cholesky, spd(4, dtype=torch.float64))
    out = torch.empty(0, device="tpu")
    torch.linalg.cholesky(spd(3).to("tpu"), out=out)
    assert_close(out.cpu(), torch.linalg.cholesky(spd(3)), **TOL)
    run(torch.linalg.cholesky_ex, torch.zeros(2, 0, 0))
    run(torch.linalg.cholesky_ex, torch.zeros(0, 3, 3))


def test_cholesky_not_positive_definite():
    a = torch.tensor([[1.0, 2, 3], [2, 1, 0], [3, 0, -5]])
    _, info = torch.linalg.cholesky_ex(a.to("tpu"))
    assert info.dtype == torch.int32 and info.item() == 2
    b = torch.stack([spd(3), a, torch.diag(torch.tensor([-1.0, 1, 1]))])
    _, info = torch.linalg.cholesky_ex(b.to("tpu"))
    assert info.tolist() == [0, 2, 1]
    run(torch.linalg.cholesky_ex, b)  # the partial factors too, as LAPACK leaves them
    run(lambda b: torch.linalg.cholesky_ex(b.mT, upper=True), b)
    raises_like(torch.linalg.cholesky, a)
    raises_like(lambda a: torch.linalg.cholesky_ex(a, check_errors=True), a)
    raises_like(torch.cholesky, a)
    raises_like(torch.linalg.cholesky, b)


def test_cholesky_errors():
    for bad in (torch.ones(3), torch.ones(2, 3)):
        with pytest.raises(RuntimeError):
            torch.linalg.cholesky(bad.to("tpu"))
    with pytest.raises(NotImplementedError, match="not implemented for 'BFloat16'"):
        torch.linalg.cholesky(torch.eye(2, dtype=torch.bfloat16, device="tpu"))
    with pytest.raises(RuntimeError, match="floating point"):
        torch.linalg.cholesky(torch.eye(2, dtype=torch.int64, device="tpu"))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(upper):
    a = spd(4, (2,))
    f = torch.linalg.cholesky(a, upper=upper)
    run(lambda b, f: torch.cholesky_solve(b, f, upper=upper), make((2, 4, 3), seed=1), f)
    run(lambda b, f: torch.cholesky_solve(b, f, upper=upper), make((3, 1, 4, 2), seed=1), f)  # broadcast
    run(lambda f: torch.cholesky_inverse(f, upper=upper), f[0])
    run(lambda f: torch.cholesky_inverse(f, upper=upper), f)


def test_cholesky_backward():
    a = spd(4)
    check_grads(lambda x: torch.linalg.cholesky(x @ x.mT + 4 * torch.eye(4, device=x.device)), a, **TOL)
    check_grads(lambda x: torch.cholesky_inverse(torch.linalg.cholesky(x)), a, rtol=1e-3, atol=1e-3)
    f = torch.linalg.cholesky(a)
    check_grads(lambda b, f: torch.cholesky_solve(b, f), make((4, 2), seed=1), f, **TOL)


# ------------------------------------------------------------ triangular solves

@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(upper, left, unit):
    a = well_conditioned((2, 4, 4))  # both triangles full: only one may be read
    b = make((2, 4, 3) if left else (2, 3, 4), seed=1)
    run(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit), a, b)


@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve(transpose):
    a = well_conditioned((3, 1, 4, 4))
    b = make((2, 4, 2), seed=1)  # broadcast batch
    for upper in (False, True):
        for unit in (False, True):
            run(lambda b, a: torch.triangular_solve(b, a, upper=upper, transpose=transpose, unitriangular=unit), b, a)


def test_triangular_backward_and_errors():
    a, b = well_conditioned((4, 4)), make((4, 3), seed=1)
    check_grads(lambda a, b: torch.linalg.solve_triangular(a, b, upper=True), a, b, **TOL)
    check_grads(lambda a, b: torch.triangular_solve(b, a)[0], a, b, **TOL)
    with pytest.raises(RuntimeError, match="Incompatible shapes"):
        torch.linalg.solve_triangular(a.to("tpu"), make((3, 2)).to("tpu"), upper=True)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.linalg.solve_triangular(a.to("tpu"), b.double().to("tpu"), upper=True)
    run(lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), a, torch.zeros(4, 0))


# ------------------------------------------------------------ LU

@pytest.mark.parametrize("shape", [(5, 5), (3, 5, 5), (2, 6, 4), (4, 7), (1, 1)], ids=str)
def test_lu_factor(shape):
    a = make(shape, seed=2)
    got = run(torch.linalg.lu_factor_ex, a)
    assert got.pivots.dtype == torch.int32
    run(torch.linalg.lu_factor, a)
    run(torch.linalg.lu, a)
    run(lambda a: torch.lu(a, get_infos=True), a)
    lu, piv = torch.linalg.lu_factor(a)
    run(torch.lu_unpack, lu, piv)
    run(lambda lu, piv: torch.lu_unpack(lu, piv, unpack_data=False), lu, piv)
    run(lambda lu, piv: torch.lu_unpack(lu, piv, unpack_pivots=False), lu, piv)


def test_lu_pivots_ties_and_singular():
    # Ties pick the first row; a zero column gives info (first zero pivot) without raising.
    a = torch.tensor([[1.0, 2, 3], [-1, 0, 1], [1, 5, 1]])
    same(torch.linalg.lu_factor_ex(a.to("tpu")), torch.linalg.lu_factor_ex(a))
    s = torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 1, 1]])
    same(torch.linalg.lu_factor_ex(s.to("tpu")), torch.linalg.lu_factor_ex(s))
    z = torch.tensor([[0.0, 1], [0, 2]])
    same(torch.linalg.lu_factor_ex(z.to("tpu")), torch.linalg.lu_factor_ex(z))
    raises_like(torch.linalg.lu_factor, z)
    raises_like(lambda z: torch.linalg.lu_factor_ex(z, check_errors=True), z)
    with pytest.raises(RuntimeError, match="LU without pivoting is not implemented on the CPU"):
        torch.linalg.lu_factor(a.to("tpu"), pivot=False)


def test_lu_empty_and_half_unpack():
    for shape in [(0, 0), (3, 0), (0, 3), (2, 0, 0), (0, 2, 2)]:
        run(torch.linalg.lu_factor_ex, torch.zeros(shape))
        run(torch.linalg.lu, torch.zeros(shape))
    lu, piv = torch.linalg.lu_factor(make((4, 4)))
    run(torch.lu_unpack, lu.half(), piv, rtol=1e-3, atol=1e-3)
    with pytest.raises(NotImplementedError, match="not implemented for 'Half'"):
        torch.linalg.lu_factor(torch.eye(2, dtype=torch.half, device="tpu"))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(left, adjoint):
    a = make((2, 4, 4), seed=3)
    lu, piv = torch.linalg.lu_factor(a)
    b = make((3, 2, 4, 2) if left else (3, 2, 2, 4), seed=4)  # broadcasts over LU's batch
    run(lambda lu, piv, b: torch.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint), lu, piv, b)


def test_lu_backward():
    a = make((4, 4), seed=5)
    check_grads(lambda a: torch.linalg.lu_factor(a)[0], a, **TOL)
    check_grads(lambda a: sum(t.sum() for t in torch.linalg.lu(a)[1:]), a, **TOL)
    check_grads(lambda a: torch.linalg.lu(a[:, :3])[2], a, **TOL)  # tall
    check_grads(lambda a: torch.linalg.lu(a[:3])[1], a, **TOL)  # wide
    lu, piv = torch.linalg.lu_factor(a)
    check_grads(lambda lu, b: torch.linalg.lu_solve(lu, piv.to(lu.device), b), lu, make((4, 2), seed=6), rtol=1e-3, atol=1e-3)


# ------------------------------------------------------------ det, slogdet, inv, solve

@pytest.mark.parametrize("contiguous", [True, False])
def test_det_slogdet(contiguous):
    a = make((3, 4, 4), seed=7)
    if not contiguous:
        a = a.mT.contiguous().mT
    # The factors too: ATen factors A^T for contiguous A, and so must we.
    run(torch.ops.aten._linalg_det, a)
    run(torch.ops.aten._linalg_slogdet, a)
    run(torch.linalg.det, a)
    run(torch.linalg.slogdet, a)
    run(torch.logdet, a @ a.mT)
    run(torch.linalg.det, torch.zeros(2, 0, 0))
    run(torch.linalg.slogdet, torch.zeros(0, 0))
    # Singular with exact elimination whichever of A, A^T gets factorized (no
    # rounding decides whether a pivot is zero).
    s = torch.tensor([[2.0, 4, 1], [1, 2, 3], [4, 8, 1]])
    for x in (s, s.mT):
        run(torch.ops.aten._linalg_det, x)
        run(torch.ops.aten._linalg_slogdet, x)


def test_det_backward():
    a = make((2, 4, 4), seed=8)
    check_grads(torch.linalg.det, a, **TOL)
    check_grads(lambda a: torch.linalg.slogdet(a)[1], a, **TOL)
    check_grads(lambda a: torch.logdet(a @ a.mT), a, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_inv(dtype):
    a = well_conditioned((3, 5, 5), seed=9, dtype=dtype)
    run(torch.linalg.inv, a)
    run(torch.linalg.inv_ex, a)
    run(torch.linalg.inv, a.mT)  # non-contiguous: the other factorization
    run(torch.inverse, a[0])
    run(torch.linalg.inv_ex, torch.zeros(2, 0, 0))
    if dtype == torch.float32:
        check_grads(torch.linalg.inv, a, **TOL)


def test_inv_singular():
    s = torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 1, 1]])
    _, info = torch.linalg.inv_ex(s.to("tpu"))
    assert info.item() == torch.linalg.inv_ex(s).info.item()
    raises_like(torch.linalg.inv, s)
    raises_like(lambda s: torch.linalg.inv_ex(s, check_errors=True), s)
    raises_like(torch.linalg.inv, torch.stack([torch.eye(3), s]))
    with pytest.raises(RuntimeError, match="Low precision dtypes not supported"):
        torch.linalg.inv(torch.eye(2, dtype=torch.half, device="tpu"))
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.inv(torch.ones(2, 3, device="tpu"))


@pytest.mark.parametrize("left", [True, False])
def test_solve(left):
    a = well_conditioned((2, 4, 4), seed=10)
    b = make((3, 2, 4, 2) if left else (3, 2, 2, 4), seed=11)
    run(lambda a, b: torch.linalg.solve(a, b, left=left), a, b)
    run(lambda a, b: torch.linalg.solve_ex(a, b, left=left), a, b)
    run(lambda a, b: torch.linalg.solve(a, b, left=left), a.mT, b)
    if left:
        run(torch.linalg.solve, a, make((2, 4), seed=12))  # a batch of vectors
        run(torch.linalg.solve, a, make((4,), seed=12))  # one vector, broadcast
    check_grads(lambda a, b: torch.linalg.solve(a, b, left=left), a, b, rtol=1e-3, atol=1e-3)


def test_solve_singular_and_errors():
    s = torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 1, 1]])
    raises_like(torch.linalg.solve, s, torch.ones(3))
    with pytest.raises(RuntimeError, match="Incompatible shapes"):
        torch.linalg.solve(torch.eye(3, device="tpu"), torch.ones(4, 2, device="tpu"))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.linalg.solve(torch.eye(3, device="tpu"), torch.ones(3, dtype=torch.float64, device="tpu"))


def test_composites():
    a = well_conditioned((4, 4), seed=13)
    for n in (-3, -1, 0, 2, 5):
        run(lambda a: torch.linalg.matrix_power(a, n), a)
    t = well_conditioned((6, 6), seed=14).reshape(2, 3, 6)
    run(lambda t: torch.linalg.tensorinv(t, ind=2), t)
    run(lambda a, b: torch.linalg.tensorsolve(a, b), t.reshape(6, 2, 3), make((6,), seed=15))


# ------------------------------------------------------------ matrix_exp

@pytest.mark.parametrize("scale", [0.1, 1.0, 8.0])
def test_matrix_exp(scale):
    a = make((3, 5, 5), seed=16) * scale
    run(torch.linalg.matrix_exp, a, rtol=1e-4, atol=1e-4 * max(1.0, scale ** 3))
    run(torch.linalg.matrix_exp, a.double(), rtol=1e-10, atol=1e-10 * max(1.0, scale ** 3))


def test_matrix_exp_edges_and_backward():
    run(torch.linalg.matrix_exp, torch.zeros(4, 4))
    run(torch.linalg.matrix_exp, torch.zeros(2, 0, 0))
    run(torch.linalg.matrix_exp, make((1, 1)))
    # Half types are computed in float32 (CPU works in the half type itself).
    x = make((3, 3)).bfloat16()
    got = torch.linalg.matrix_exp(x.to("tpu"))
    assert got.dtype == torch.bfloat16
    assert_close(got.cpu(), torch.linalg.matrix_exp(x.float()).bfloat16())
    check_grads(torch.linalg.matrix_exp, make((4, 4), seed=17), **TOL)


@pytest.mark.parametrize("shapes", [((4, 4), (4, 5)), ((2, 3, 4, 4), (2, 3, 4, 5)), ((2, 4, 4), (4, 2))])
def test_solve_triangular_result_is_column_major_as_on_cpu(shapes):
    # CPU (LAPACK) returns batched column-major matrices; code that views the result, and
    # torch.compile's fake tensors, rely on that layout
    torch.manual_seed(0)
    A = torch.randn(shapes[0]).triu() + 4 * torch.eye(shapes[0][-1])
    B = torch.randn(shapes[1])
    expected = torch.linalg.solve_triangular(A, B, upper=True)
    got = torch.linalg.solve_triangular(A.to("tpu"), B.to("tpu"), upper=True)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.mT.reshape(-1).cpu(), expected.mT.reshape(-1), rtol=1e-4, atol=1e-5)


def _spd(*batch, n=3):
    a = torch.randn(*batch, n, n)
    return a @ a.mT + n * torch.eye(n)


# op, inputs, whether the values are unique (QR, SVD and eigenvectors are up to signs)
_LAPACK_LAYOUT_CASES = {
    "cholesky": (torch.linalg.cholesky, lambda: (_spd(2),), True),
    "cholesky_ex": (torch.linalg.cholesky_ex, lambda: (_spd(2, 2),), True),
    "cholesky_solve": (torch.cholesky_solve, lambda: (torch.randn(2, 3, 4), torch.linalg.cholesky(_spd(2))), True),
    "cholesky_inverse": (torch.cholesky_inverse, lambda: (torch.linalg.cholesky(_spd()),), True),
    "triangular_solve": (lambda b, a: torch.triangular_solve(b, a, upper=False),
                         lambda: (torch.randn(2, 3, 4), torch.linalg.cholesky(_spd(2))), True),
    "lu_factor_ex": (torch.linalg.lu_factor_ex, lambda: (_spd(2),), True),
    "lu_solve": (lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
                 lambda: (_spd(2), torch.randn(2, 3, 4)), True),
    "solve_ex": (torch.linalg.solve_ex, lambda: (_spd(2), torch.randn(2, 3, 4)), True),
    "inv_ex": (torch.linalg.inv_ex, lambda: (_spd(2, 2),), True),
    "_linalg_det": (torch.ops.aten._linalg_det, lambda: (_spd(2),), True),
    "qr": (torch.linalg.qr, lambda: (torch.randn(2, 5, 3),), False),
    "qr_complete": (lambda a: torch.linalg.qr(a, mode="complete"), lambda: (torch.randn(2, 5, 3),), False),
    "svd": (lambda a: torch.linalg.svd(a, full_matrices=False), lambda: (torch.randn(2, 5, 3),), False),
    "eigh": (torch.linalg.eigh, lambda: (_spd(2),), False),
    "geqrf": (torch.geqrf, lambda: (torch.randn(2, 5, 3),), False),
    "householder_product": (torch.linalg.householder_product,
                            lambda: (torch.randn(2, 5, 3), torch.randn(2, 3)), False),
}


def _tensors(result):
    return [result] if isinstance(result, torch.Tensor) else [t for t in result if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("case", sorted(_LAPACK_LAYOUT_CASES))
def test_linalg_results_are_laid_out_as_on_cpu(case):
    # CPU (LAPACK) returns batches of column-major matrices: .mT.view(-1) works there,
    # and torch.compile's fake tensors carry those strides
    fn, make_inputs, unique = _LAPACK_LAYOUT_CASES[case]
    torch.manual_seed(0)
    inputs = make_inputs()
    expected = _tensors(fn(*inputs))
    got = _tensors(fn(*[t.to("tpu") for t in inputs]))
    assert [t.stride() for t in got] == [t.stride() for t in expected]
    for g, e in zip(got, expected):
        if e.dim() >= 2 and e.numel() > 0 and e.mT.is_contiguous():
            assert g.mT.view(-1).numel() == e.numel()  # the view CPU allows
        if unique:
            assert_close(g.cpu(), e, rtol=1e-4, atol=1e-4)


def test_linalg_out_resized_takes_cpu_layout():
    torch.manual_seed(0)
    A = _spd(2)
    for device in ("cpu", "tpu"):
        out = torch.empty(0, device=device)
        torch.linalg.inv(A.to(device), out=out)
        assert out.stride() == (9, 1, 3)
        assert_close(out.cpu(), torch.linalg.inv(A), rtol=1e-4, atol=1e-4)
        kept = torch.empty(2, 3, 3, device=device)  # the right shape already: its layout is kept
        torch.linalg.inv(A.to(device), out=kept)
        assert kept.stride() == (9, 3, 1)
        assert_close(kept.cpu(), torch.linalg.inv(A), rtol=1e-4, atol=1e-4)
