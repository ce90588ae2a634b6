// Orthogonal factorizations as IR: Householder QR (LAPACK's geqrf/orgqr/ormqr
// conventions), symmetric eigendecomposition and SVD by Jacobi rotations.
//
// Every matrix here is a batch [B, rows, cols] (the ATen layer flattens the
// batch dimensions) of a floating dtype. Iterations are stablehlo.while loops
// whose bodies are vectorized over the batch (and, for Jacobi, over the n/2
// rotations of one round), so a program's size does not grow with n.
#pragma once

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// geqrf: R on and above the diagonal of `packed`, the Householder vectors
// below it (implicit unit leading entry), tau [B, min(rows, cols)]. Each
// reflector is LAPACK's dlarfg: beta = -sign(alpha) * norm, tau = 0 when
// the column below the diagonal is zero.
struct Householder {
  ir::Value packed;
  ir::Value tau;
};
Householder geqrf(ir::Graph& g, ir::Value a);

// C := op(Q) C (left) or C op(Q) (right), op(Q) = Q or Q^T, with
// Q = H_0 H_1 ... H_{k-1} given by the reflectors in the columns of
// `reflectors` [B, q, >= k] (entries below the diagonal) and tau [B, k]
// (ormqr). q is C's row count (left) or column count (right).
ir::Value apply_reflectors(ir::Graph& g, ir::Value reflectors, ir::Value tau, ir::Value c, bool left,
                           bool transpose);
// The first `cols` columns of Q (orgqr / householder_product): `reflectors`
// [B, m, cols] with cols <= m, tau [B, k] with k <= cols.
ir::Value householder_product(ir::Graph& g, ir::Value reflectors, ir::Value tau);

// The identity's first `cols` columns, [B, rows, cols].
ir::Value eye(ir::Graph& g, ir::DType dtype, int64_t batch, int64_t rows, int64_t cols);

// Symmetric eigendecomposition of the matrix whose lower (or upper)
// triangle is given; eigenvalues ascending [B, n] and, when asked, the
// eigenvectors as columns [B, n, n].
struct Eigh {
  ir::Value values;
  ir::Value vectors;  // invalid unless compute_vectors
};
Eigh eigh(ir::Graph& g, ir::Value a, bool upper, bool compute_vectors);

// A = U diag(S) Vh with S descending [B, k], k = min(m, n); U [B, m, m or k],
// Vh [B, n or k, n] (full_matrices or not). U and Vh invalid unless compute_uv.
struct Svd {
  ir::Value u, s, vh;
};
Svd svd(ir::Graph& g, ir::Value a, bool full_matrices, bool compute_uv);

// Least squares through the SVD (linalg_lstsq, every driver). The pseudo-inverse's
// singular values of s [B, k]: 1/s where s > rcond * max(s) and s > 0, else 0, and
// which were kept (pred [B, k]: their count is the rank).
struct PseudoInverse {
  ir::Value inverse_s, kept;
};
PseudoInverse pseudo_inverse(ir::Graph& g, ir::Value s, double rcond);
// x = Vh^T diag(inverse_s) U^T b: U [B, m, k], Vh [B, k, n], inverse_s [B, k], b [B, m, nrhs] -> [B, n, nrhs].
ir::Value svd_solve(ir::Graph& g, ir::Value u, ir::Value vh, ir::Value inverse_s, ir::Value b);

}  // namespace tpu::lowering
