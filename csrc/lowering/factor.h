// Matrix factorizations and the solves built on them: Cholesky, triangular
// solves, LU with partial pivoting (as LAPACK's getrf: 1-based pivots, first
// maximum on ties), determinants, inverses and the matrix exponential.
//
// Operands are batches of matrices [batch..., m, n] in a floating dtype;
// operands of one call share their batch dims (callers broadcast). Loops
// (stablehlo.while) run over columns, never unrolled over the matrix size,
// and each step works on every matrix of the batch at once.
#pragma once

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// ------------------------------------------------------------ matrix helpers

// Swaps the last two dims.
ir::Value matrix_transpose(ir::Graph& g, ir::Value x);
// Keeps the elements on or below (tril) / above (triu) diagonal `k`, zeroes the rest.
ir::Value tril(ir::Graph& g, ir::Value x, int64_t k = 0);
ir::Value triu(ir::Graph& g, ir::Value x, int64_t k = 0);
// The main diagonal [batch..., min(m, n)].
ir::Value diagonal(ir::Graph& g, ir::Value x);
// Identity matrices [batch..., n, n] of `dtype`.
ir::Value identity(ir::Graph& g, ir::DType dtype, const ir::Shape& batch, int64_t n);
// Broadcasts the batch dims of x (all but the last two) to `batch`.
ir::Value broadcast_batch(ir::Graph& g, ir::Value x, const ir::Shape& batch);
// a @ b over matching batch dims, in a's dtype (f32 accumulation for half types).
ir::Value batched_matmul(ir::Graph& g, ir::Value a, ir::Value b);

// ------------------------------------------------------------ Cholesky

// The Cholesky factor of symmetric positive-definite matrices: lower (A = L L^H,
// reading A's lower triangle) or upper (A = U^H U, reading the upper one); the
// other triangle is zero. As LAPACK's potrf: `info` (s32 [batch...]) is the
// 1-based order of the first leading minor that is not positive-definite (0
// when none); the factorization of that matrix stops there, leaving its later
// columns as they were in A.
struct CholeskyFactors {
  ir::Value factor, info;
};
CholeskyFactors cholesky(ir::Graph& g, ir::Value a, bool upper);
// Solves A X = B given A's Cholesky factor (lower or upper).
ir::Value cholesky_solve(ir::Graph& g, ir::Value b, ir::Value factor, bool upper);

// ------------------------------------------------------------ triangular solves

// Solves op(A) X = B (left) or X op(A) = B with A triangular, op = transpose
// when `transpose`.
ir::Value triangular_solve(ir::Graph& g, ir::Value a, ir::Value b, bool upper, bool left, bool unitriangular,
                           bool transpose = false);

// ------------------------------------------------------------ LU

struct LUFactors {
  ir::Value lu;      // [batch..., m, n]: L below the diagonal (unit diagonal implied), U on and above
  ir::Value pivots;  // s32 [batch..., min(m, n)], 1-based: row i was swapped with row pivots[i] - 1
  ir::Value info;    // s32 [batch...]: 1-based index of the first zero pivot, 0 when none
};
LUFactors lu_factor(ir::Graph& g, ir::Value a);
// The row permutation of LAPACK pivots: row i of P^T A is row perm[i] of A.
// s32 [batch..., m].
ir::Value pivots_to_permutation(ir::Graph& g, ir::Value pivots, int64_t m);
// The permutation matrix P (A = P L U) of `perm`, [batch..., m, m] of `dtype`.
ir::Value permutation_matrix(ir::Graph& g, ir::Value perm, ir::DType dtype);
// out[..., i, :] = x[..., perm[i], :] (inverse: out[..., perm[i], :] = x[..., i, :]).
ir::Value permute_rows(ir::Graph& g, ir::Value x, ir::Value perm, bool inverse);
// Unit-lower L [batch..., m, k] and upper U [batch..., k, n] of packed LU factors.
ir::Value lu_unpack_l(ir::Graph& g, ir::Value lu);
ir::Value lu_unpack_u(ir::Graph& g, ir::Value lu);
// Solves A X = B (left) or X A = B, A^H instead of A when `adjoint`, given the
// LU factors of square A.
ir::Value lu_solve(ir::Graph& g, ir::Value lu, ir::Value pivots, ir::Value b, bool left, bool adjoint);
// det(P) = +-1 from pivots, in `dtype`, [batch...].
ir::Value pivots_sign(ir::Graph& g, ir::Value pivots, ir::DType dtype);
// Determinant from LU factors of square matrices, [batch...].
ir::Value lu_det(ir::Graph& g, ir::Value lu, ir::Value pivots);
// sign and log|det| from LU factors of square matrices, [batch...] each.
std::pair<ir::Value, ir::Value> lu_slogdet(ir::Graph& g, ir::Value lu, ir::Value pivots);

// ------------------------------------------------------------ matrix functions

// exp(A): degree-18 Taylor polynomial with scaling and squaring (the squarings
// run in a loop whose trip count is the largest scaling over the batch).
ir::Value matrix_exp(ir::Graph& g, ir::Value a);

}  // namespace tpu::lowering
