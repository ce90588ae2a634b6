"""QR (geqrf, householder_product, ormqr, linalg.qr), symmetric eigendecomposition,
SVD and what is built on them (svdvals, matrix_rank, pinv, norms, cond, lstsq):
tpu vs CPU.

Eigenvectors and singular vectors are unique only up to each vector's sign: they
are compared after `signed` makes the largest-magnitude entry of each vector
positive (on both sides). Gradients are taken of sign-invariant functions."""
import pytest
import torch
from torch.testing import assert_close

from support import check, check_grads, make, to_tpu


def signed(t, vectors_are="columns"):
    """t with each vector's sign fixed: its largest-|.| entry positive."""
    axis = -2 if vectors_are == "columns" else -1
    pick = t.abs().argmax(dim=axis, keepdim=True)
    return t * torch.where(torch.gather(t, axis, pick) < 0, -1.0, 1.0).to(t.dtype)


def sym(n, batch=(), seed=0, dtype=torch.float32):
    a = make(batch + (n, n), dtype, seed=seed)
    return a + a.mT


def assert_orthonormal_columns(q, atol=1e-5):
    eye = torch.eye(q.shape[-1], dtype=q.dtype).expand(q.mT.shape[:-1] + (q.shape[-1],))
    assert_close(q.mT @ q, eye, atol=atol, rtol=0)


# ------------------------------------------------------------------ QR family

@pytest.mark.parametrize("shape", [(6, 3), (3, 6), (2, 4, 4), (1, 1)])
def test_geqrf(shape):
    a = make(shape)
    got = torch.geqrf(a.to("tpu"))
    exp = torch.geqrf(a)
    assert_close(got.a.cpu(), exp.a, atol=1e-5, rtol=1e-5)
    assert_close(got.tau.cpu(), exp.tau, atol=1e-5, rtol=1e-5)


def test_geqrf_zero_column_and_out():
    a = make((4, 3))
    a[1:, 0] = 0          # a trivial reflector (tau = 0), as LAPACK's dlarfg
    a[:, 2] = 0
    got, exp = torch.geqrf(a.to("tpu")), torch.geqrf(a)
    assert_close(got.tau.cpu(), exp.tau, atol=1e-6, rtol=1e-5)
    assert_close(got.a.cpu(), exp.a, atol=1e-6, rtol=1e-5)
    a_out, tau_out = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    torch.geqrf(a.to("tpu"), out=(a_out, tau_out))
    assert_close(a_out.cpu(), exp.a, atol=1e-6, rtol=1e-5)
    e = torch.geqrf(torch.zeros(3, 0, device="tpu"))
    assert e.a.shape == (3, 0) and e.tau.shape == (0,)


@pytest.mark.parametrize("shape,k", [((6, 4), 2), ((2, 5, 3), 3), ((5, 3), 0)])
def test_householder_product(shape, k):
    a = make(shape, seed=1)
    tau = make(shape[:-2] + (k,), seed=2, low=0, high=2)
    check(torch.linalg.householder_product if k else torch.orgqr, a, tau, atol=1e-5, rtol=1e-5)


def test_householder_product_grad():
    a, tau = make((5, 3), seed=3), make((3,), seed=4, low=0, high=2)
    check_grads(torch.linalg.householder_product, a, tau, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_ormqr(left, transpose):
    v, tau = torch.geqrf(make((2, 5, 3), seed=5))
    other = make((2, 5, 4) if left else (2, 4, 5), seed=6)
    check(lambda a, t, c: torch.ormqr(a, t, c, left=left, transpose=transpose), v, tau, other, atol=1e-5, rtol=1e-5)


def test_ormqr_grad():
    v, tau = torch.geqrf(make((5, 3), seed=5))
    check_grads(lambda a, t, c: torch.ormqr(a, t, c, left=False, transpose=True), v, tau, make((2, 5), seed=7),
                atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode,shape", [("reduced", (6, 3)), ("complete", (6, 3)), ("r", (6, 3)), ("reduced", (3, 6)),
                                        ("complete", (2, 3, 4, 2)), ("reduced", (4, 4)), ("complete", (3, 0)),
                                        ("reduced", (0, 3))])
def test_linalg_qr(mode, shape):
    a = make(shape, seed=8)
    got, exp = torch.linalg.qr(a.to("tpu"), mode=mode), torch.linalg.qr(a, mode=mode)
    # Householder with LAPACK's conventions: Q and R agree with CPU signs included.
    assert_close(got.Q.cpu(), exp.Q, atol=1e-5, rtol=1e-5)
    assert_close(got.R.cpu(), exp.R, atol=1e-5, rtol=1e-5)


def test_qr_legacy_and_out():
    a = make((4, 3), seed=9)
    for some in (True, False):
        got, exp = torch.qr(a.to("tpu"), some=some), torch.qr(a, some=some)
        assert_close(got.Q.cpu(), exp.Q, atol=1e-5, rtol=1e-5)
        assert_close(got.R.cpu(), exp.R, atol=1e-5, rtol=1e-5)
    q, r = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    torch.linalg.qr(a.to("tpu"), out=(q, r))
    assert_close(q.cpu() @ r.cpu(), a, atol=1e-5, rtol=1e-5)


def test_qr_float64():
    a = make((7, 4), torch.float64, seed=10)
    got, exp = torch.linalg.qr(a.to("tpu")), torch.linalg.qr(a)
    assert_close(got.Q.cpu(), exp.Q)
    assert_close(got.R.cpu(), exp.R)


# ------------------------------------------------------------------ eigh

@pytest.mark.parametrize("n,batch,uplo", [(1, (), "L"), (2, (), "U"), (5, (), "L"), (6, (2,), "U"), (7, (2, 3), "L"),
                                          (33, (), "U")])
def test_eigh(n, batch, uplo):
    a = make(batch + (n, n), seed=n)  # not symmetric: only the `uplo` triangle counts
    got, exp = torch.linalg.eigh(a.to("tpu"), UPLO=uplo), torch.linalg.eigh(a, UPLO=uplo)
    tol = 1e-5 * max(1, n)
    assert_close(got.eigenvalues.cpu(), exp.eigenvalues, atol=tol, rtol=1e-5)
    assert_close(signed(got.eigenvectors.cpu()), signed(exp.eigenvectors), atol=tol * 10, rtol=1e-4)
    v = got.eigenvectors.cpu()
    assert_orthonormal_columns(v, atol=tol)


def test_eigh_repeated_and_special():
    # Repeated eigenvalues: vectors are not unique, check the decomposition.
    q = torch.linalg.qr(make((6, 6), seed=11)).Q
    a = q @ torch.diag(torch.tensor([1.0, 1.0, 1.0, -2.0, 5.0, 5.0])) @ q.T
    w, v = torch.linalg.eigh(a.to("tpu"))
    assert_close(w.cpu(), torch.tensor([-2.0, 1.0, 1.0, 1.0, 5.0, 5.0]), atol=1e-5, rtol=0)
    assert_close(v.cpu() @ torch.diag(w.cpu()) @ v.cpu().T, a, atol=1e-5, rtol=0)
    for m in (torch.zeros(4, 4), torch.eye(3), torch.diag(torch.tensor([3.0, -1.0, 2.0]))):
        check(lambda x: torch.linalg.eigh(x).eigenvalues, m)
    e = torch.linalg.eigh(torch.zeros(2, 0, 0, device="tpu"))
    assert e.eigenvalues.shape == (2, 0) and e.eigenvectors.shape == (2, 0, 0)


def test_eigvalsh_and_float64():
    check(torch.linalg.eigvalsh, sym(9, (3,), seed=12), atol=1e-5, rtol=1e-5)
    a = sym(8, seed=13, dtype=torch.float64)
    got, exp = torch.linalg.eigh(a.to("tpu")), torch.linalg.eigh(a)
    assert_close(got.eigenvalues.cpu(), exp.eigenvalues)
    assert_close(signed(got.eigenvectors.cpu()), signed(exp.eigenvectors))
    w = torch.empty(0, dtype=torch.float64, device="tpu")
    torch.linalg.eigvalsh(a.to("tpu"), out=w)
    assert_close(w.cpu(), exp.eigenvalues)


def test_eigh_grad():
    a = sym(5, seed=14)
    check_grads(torch.linalg.eigvalsh, a, atol=1e-4, rtol=1e-4)
    check_grads(lambda x: torch.linalg.eigh(x).eigenvectors.abs(), a, atol=1e-3, rtol=1e-3)


# ------------------------------------------------------------------ SVD

@pytest.mark.parametrize("shape", [(5, 5), (5, 3), (2, 3, 5), (1, 4), (40, 9)])
def test_svd(shape):
    a = make(shape, seed=sum(shape))
    got, exp = torch.linalg.svd(a.to("tpu"), full_matrices=False), torch.linalg.svd(a, full_matrices=False)
    assert_close(got.S.cpu(), exp.S, atol=1e-5, rtol=1e-5)
    assert_close(signed(got.U.cpu()), signed(exp.U), atol=1e-4, rtol=1e-4)
    assert_close(signed(got.Vh.cpu(), "rows"), signed(exp.Vh, "rows"), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 5)])
def test_svd_full_matrices(shape):
    a = make(shape, seed=20)
    U, S, Vh = (t.cpu() for t in torch.linalg.svd(a.to("tpu"), full_matrices=True))
    eU, eS, eVh = torch.linalg.svd(a, full_matrices=True)
    k = min(shape[-2:])
    assert U.shape == eU.shape and Vh.shape == eVh.shape
    assert_close(S, eS, atol=1e-5, rtol=1e-5)
    # The first k vectors are determined up to sign; the completions only up to a basis change.
    assert_close(signed(U[..., :k]), signed(eU[..., :k]), atol=1e-4, rtol=1e-4)
    assert_close(signed(Vh[..., :k, :], "rows"), signed(eVh[..., :k, :], "rows"), atol=1e-4, rtol=1e-4)
    assert_orthonormal_columns(U)
    assert_orthonormal_columns(Vh.mT)


def test_svd_rank_deficient_and_special():
    # Rank 2 of 4 (and a zero matrix): zero singular values still get orthonormal vectors.
    a = make((5, 2), seed=21) @ make((2, 3), seed=22)
    for m in (a, torch.zeros(5, 3)):
        U, S, Vh = (t.cpu() for t in torch.linalg.svd(m.to("tpu")))
        assert_close(S, torch.linalg.svdvals(m), atol=1e-5, rtol=1e-5)
        assert_orthonormal_columns(U)
        assert_orthonormal_columns(Vh.mT)
        k = min(m.shape)
        assert_close(U[:, :k] @ torch.diag(S) @ Vh[:k], m, atol=1e-5, rtol=0)
    U, S, Vh = torch.linalg.svd(torch.zeros(0, 3, device="tpu"))
    assert U.shape == (0, 0) and S.shape == (0,)
    assert_close(Vh.cpu(), torch.eye(3))


def test_svd_variants():
    a = make((2, 3, 5), seed=23)
    check(torch.linalg.svdvals, a, atol=1e-5, rtol=1e-5)
    got, exp = torch.svd(a.to("tpu")), torch.svd(a)
    assert_close(signed(got.V.cpu()), signed(exp.V), atol=1e-4, rtol=1e-4)
    got, exp = torch.svd(a.to("tpu"), compute_uv=False), torch.svd(a, compute_uv=False)
    assert_close(got.S.cpu(), exp.S, atol=1e-5, rtol=1e-5)
    assert_close(got.U.cpu(), exp.U)
    b = make((5, 3), torch.float64, seed=24)
    got, exp = torch.linalg.svd(b.to("tpu"), full_matrices=False), torch.linalg.svd(b, full_matrices=False)
    assert_close(got.S.cpu(), exp.S)
    assert_close(signed(got.U.cpu()), signed(exp.U))


def test_svd_grad():
    a = make((5, 3), seed=25)
    check_grads(torch.linalg.svdvals, a, atol=1e-4, rtol=1e-4)

    def invariant(x):
        U, S, Vh = torch.linalg.svd(x, full_matrices=False)
        return U @ Vh + (U * S.sqrt().unsqueeze(-2)) @ Vh   # sign-invariant

    check_grads(invariant, a, atol=1e-3, rtol=1e-3)


# ------------------------------------------------------------------ composites

def test_composites():
    a = make((2, 3, 5), seed=26)
    tol = dict(atol=1e-4, rtol=1e-4)
    check(torch.linalg.pinv, a, **tol)
    check(lambda x: torch.linalg.matrix_norm(x, "nuc"), a, **tol)
    check(lambda x: torch.linalg.matrix_norm(x, -2), a, **tol)
    check(torch.linalg.cond, a, **tol)
    check(torch.linalg.matrix_rank, make((5, 2), seed=27) @ make((2, 3), seed=28))
    s = sym(5, seed=29)
    check(lambda x: torch.linalg.pinv(x, hermitian=True), s, **tol)
    check(lambda x: torch.linalg.matrix_rank(x, hermitian=True), s)
    check_grads(torch.linalg.pinv, make((5, 3), seed=30), **tol)



# ------------------------------------------------------------------ lstsq

@pytest.mark.parametrize("driver,shapes", [(None, ((5, 3), (5, 2))), ("gels", ((5, 3), (5, 2))), ("gelsd", ((5, 3), (5, 2))),
                                           ("gelss", ((3, 5), (3, 2))), ("gels", ((4, 4), (4,))),
                                           ("gelsy", ((2, 5, 3), (2, 5))), ("gelsd", ((2, 1, 5, 3), (1, 3, 5, 1)))])
def test_lstsq(driver, shapes):
    a, b = make(shapes[0], seed=31), make(shapes[1], seed=32)
    got = torch.linalg.lstsq(a.to("tpu"), b.to("tpu"), driver=driver)
    exp = torch.linalg.lstsq(a, b, driver=driver)
    for name in ("solution", "residuals", "rank", "singular_values"):
        g, e = getattr(got, name).cpu(), getattr(exp, name)
        assert g.shape == e.shape and g.dtype == e.dtype, (name, g.shape, e.shape)
        assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_lstsq_rank_deficient_and_grad():
    a = make((5, 2), seed=33) @ make((2, 3), seed=34)
    b = make((5, 2), seed=35)
    got = torch.linalg.lstsq(a.to("tpu"), b.to("tpu"), driver="gelsd")
    exp = torch.linalg.lstsq(a, b, driver="gelsd")
    assert got.rank.item() == exp.rank.item() == 2
    assert got.residuals.numel() == 0    # not full rank: no residuals, as on CPU
    assert_close(got.solution.cpu(), exp.solution, atol=1e-4, rtol=1e-4)
    check_grads(lambda x, y: torch.linalg.lstsq(x, y).solution, make((5, 3), seed=36), make((5, 2), seed=37),
                atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ errors

def test_errors():
    t = torch.ones(3, 4, device="tpu")
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        torch.linalg.eigh(t)
    with pytest.raises(RuntimeError, match="unrecognized mode"):
        torch.linalg.qr(t, mode="x")
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.geqrf(torch.ones(3, device="tpu"))
    with pytest.raises(NotImplementedError, match="not implemented for 'BFloat16'"):
        torch.linalg.svd(t.bfloat16())
    with pytest.raises(RuntimeError, match="floating point"):
        torch.linalg.qr(torch.ones(3, 3, dtype=torch.long, device="tpu"))
    with pytest.raises(RuntimeError, match="Expected UPLO"):
        torch.linalg.eigh(torch.ones(3, 3, device="tpu"), UPLO="X")
    with pytest.raises(RuntimeError, match="must be greater than or equal to tau"):
        torch.linalg.householder_product(t.T, torch.ones(4, device="tpu"))
