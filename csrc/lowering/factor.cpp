#include "lowering/factor.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>

#include "lowering/linalg.h"

namespace tpu::lowering {
namespace {

using ir::Compare;
using ir::DType;
using ir::Graph;
using ir::Shape;
using ir::Value;

Value add(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Add, a, b); }
Value sub(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Subtract, a, b); }
Value mul(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Multiply, a, b); }
Value div(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Divide, a, b); }
Value both(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::And, a, b); }
Value cmp(Graph& g, Value a, Value b, Compare c) { return ir::compare(g, a, b, c); }
Value fill(Graph& g, Value like, double v) { return ir::full(g, g.type(like).dtype, v, g.type(like).shape); }
// A scalar broadcast to `shape`.
Value splat_scalar(Graph& g, Value s, const Shape& shape) { return ir::broadcast_in_dim(g, s, shape, {}); }
// x [B, ...] broadcast along new dims to `shape`, x's dims landing on `dims`.
Value bcast(Graph& g, Value x, const Shape& shape, const ir::Dims& dims) {
  return ir::broadcast_in_dim(g, x, shape, dims);
}

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }
int64_t batch_numel(const Shape& s) { return ir::numel(batch_of(s)); }

// x [batch..., m, n] as [B, m, n].
Value flatten_batch(Graph& g, Value x) {
  const Shape s = g.type(x).shape;
  int64_t r = static_cast<int64_t>(s.size());
  return ir::reshape(g, x, {batch_numel(s), s[r - 2], s[r - 1]});
}

// Row (dim rank-2) and column (dim rank-1) index of every element of `shape`.
Value row_index(Graph& g, const Shape& shape) {
  return ir::iota(g, DType::S64, shape, static_cast<int64_t>(shape.size()) - 2);
}
Value col_index(Graph& g, const Shape& shape) {
  return ir::iota(g, DType::S64, shape, static_cast<int64_t>(shape.size()) - 1);
}
// Whether col - row <= k (or >= k), elementwise over `shape`.
Value band_mask(Graph& g, const Shape& shape, int64_t k, Compare c) {
  Value diff = sub(g, col_index(g, shape), row_index(g, shape));
  return cmp(g, diff, ir::full(g, DType::S64, static_cast<double>(k), shape), c);
}

bool is_half(DType t) { return t == DType::F16 || t == DType::BF16; }

}  // namespace

// ------------------------------------------------------------ matrix helpers

Value matrix_transpose(Graph& g, Value x) {
  int64_t r = g.type(x).rank();
  ir::Dims perm;
  for (int64_t i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[r - 1], perm[r - 2]);
  return ir::transpose(g, x, perm);
}

Value tril(Graph& g, Value x, int64_t k) {
  const Shape s = g.type(x).shape;
  return ir::select(g, band_mask(g, s, k, Compare::LE), x, fill(g, x, 0));
}

Value triu(Graph& g, Value x, int64_t k) {
  const Shape s = g.type(x).shape;
  return ir::select(g, band_mask(g, s, k, Compare::GE), x, fill(g, x, 0));
}

Value diagonal(Graph& g, Value x) {
  const Shape s = g.type(x).shape;
  int64_t r = static_cast<int64_t>(s.size());
  int64_t k = std::min(s[r - 2], s[r - 1]);
  ir::Dims lo(r, 0), hi(s.begin(), s.end());
  hi[r - 2] = hi[r - 1] = k;
  Value sq = ir::slice(g, x, lo, hi);
  // Summing the diagonal with -0.0 everywhere else is exact (signed zeros included).
  Value off = fill(g, sq, -0.0);
  Value masked = ir::select(g, band_mask(g, g.type(sq).shape, 0, Compare::EQ), sq, off);
  return ir::reduce(g, masked, ir::constant(g, g.type(x).dtype, -0.0), {r - 1}, ir::Combiner::Add);
}

Value identity(Graph& g, DType dtype, const Shape& batch, int64_t n) {
  Shape s = batch;
  s.push_back(n);
  s.push_back(n);
  return ir::convert(g, band_mask(g, s, 0, Compare::EQ), dtype);
}

Value broadcast_batch(Graph& g, Value x, const Shape& batch) {
  const Shape s = g.type(x).shape;
  Shape target = batch;
  target.push_back(s[s.size() - 2]);
  target.push_back(s[s.size() - 1]);
  return ir::broadcast_to(g, x, target);
}

Value batched_matmul(Graph& g, Value a, Value b) {
  DType dtype = g.type(a).dtype;
  int64_t nb = g.type(a).rank() - 2;
  ir::Dims batch;
  for (int64_t i = 0; i < nb; ++i) batch.push_back(i);
  DType acc = is_half(dtype) ? DType::F32 : dtype;
  return ir::convert(g, contract(g, a, b, batch, batch, {nb + 1}, {nb}, acc), dtype);
}

// ------------------------------------------------------------ Cholesky

CholeskyFactors cholesky(Graph& g, Value a, bool upper) {
  // The upper factor of A is the transposed lower factor of A^T (whose lower
  // triangle is A's upper one).
  if (upper) {
    CholeskyFactors f = lowering::cholesky(g, matrix_transpose(g, a), false);
    return {matrix_transpose(g, f.factor), f.info};
  }
  // Left-looking column by column, as LAPACK's potf2 (stablehlo.cholesky
  // would turn a whole failed matrix into NaNs, losing info): column j of L is
  // (a[:, j] - L[:, :j] L[j, :j]^T) / sqrt(a[j, j] - |L[j, :j]|^2).
  const Shape s = g.type(a).shape;
  int64_t r = static_cast<int64_t>(s.size());
  int64_t n = s[r - 1], B = batch_numel(s);
  DType dt = g.type(a).dtype;
  Value info0 = ir::full(g, DType::S32, 0, {B});
  auto out = ir::fori_loop(g, n, {flatten_batch(g, a), info0}, [&](Graph& q, Value j, const std::vector<Value>& c) {
    Value A = c[0], info = c[1];
    Value zero = ir::constant_int(q, DType::S64, 0);
    Shape mat{B, n, n}, vec{B, n};
    Value idx = ir::iota(q, DType::S64, vec, 1);
    Value jv = splat_scalar(q, j, vec);
    Value row = ir::reshape(q, ir::dynamic_slice(q, A, {zero, j, zero}, {B, 1, n}), vec);
    Value lrow = ir::select(q, cmp(q, idx, jv, Compare::LT), row, fill(q, row, 0));
    Value ajj = sub(q, ir::reshape(q, ir::dynamic_slice(q, A, {zero, j, j}, {B, 1, 1}), {B}),
                    ir::reduce(q, mul(q, lrow, lrow), ir::constant(q, dt, 0), {1}, ir::Combiner::Add));
    Value active = cmp(q, info, fill(q, info, 0), Compare::EQ);
    Value ok = cmp(q, ajj, fill(q, ajj, 0), Compare::GT);  // false for NaN
    Value proceed = both(q, active, ok);
    Value failed = both(q, active, ir::unary(q, ir::Op::Not, ok));
    Value j1 = add(q, ir::convert(q, j, DType::S32), ir::constant_int(q, DType::S32, 1));
    info = ir::select(q, failed, splat_scalar(q, j1, {B}), info);
    Value col = ir::reshape(q, ir::dynamic_slice(q, A, {zero, zero, j}, {B, n, 1}), vec);
    Value left = ir::select(q, cmp(q, ir::iota(q, DType::S64, mat, 2), splat_scalar(q, j, mat), Compare::LT), A,
                            fill(q, A, 0));
    Value mv = ir::dot_general(q, left, lrow, {0}, {0}, {2}, {1}, dt);
    Value d = ir::unary(q, ir::Op::Sqrt, ajj);
    Value db = bcast(q, d, vec, {0});
    Value scaled = mul(q, sub(q, col, mv), div(q, fill(q, db, 1), db));
    Value at_j = cmp(q, idx, jv, Compare::EQ), below = cmp(q, idx, jv, Compare::GT);
    Value done_col = ir::select(q, below, scaled, ir::select(q, at_j, db, col));
    // A failed column keeps a[j, j] - |L[j, :j]|^2 on the diagonal (as potf2).
    Value failed_col = ir::select(q, at_j, bcast(q, ajj, vec, {0}), col);
    Value new_col = ir::select(q, bcast(q, proceed, vec, {0}), done_col,
                               ir::select(q, bcast(q, failed, vec, {0}), failed_col, col));
    A = ir::dynamic_update_slice(q, A, ir::reshape(q, new_col, {B, n, 1}), {zero, zero, j});
    return std::vector<Value>{A, info};
  });
  return {tril(g, ir::reshape(g, out[0], s)), ir::reshape(g, out[1], batch_of(s))};
}

Value cholesky_solve(Graph& g, Value b, Value factor, bool upper) {
  // A = L L^T: L Y = B, then L^T X = Y (A = U^T U: U^T Y = B, then U X = Y).
  Value y = lowering::triangular_solve(g, factor, b, upper, true, false, /*transpose=*/upper);
  return lowering::triangular_solve(g, factor, y, upper, true, false, /*transpose=*/!upper);
}

// ------------------------------------------------------------ triangular solves

Value triangular_solve(Graph& g, Value a, Value b, bool upper, bool left, bool unitriangular, bool transpose) {
  // Zero the unused triangle (and set a unit diagonal) so nothing there, NaN
  // included, reaches the result whatever the backend's expansion reads.
  Value t = upper ? triu(g, a, unitriangular ? 1 : 0) : tril(g, a, unitriangular ? -1 : 0);
  if (unitriangular) {
    const Shape s = g.type(a).shape;
    t = ir::select(g, band_mask(g, s, 0, Compare::EQ), fill(g, a, 1), t);
  }
  return ir::triangular_solve(g, t, b, left, !upper, unitriangular, transpose);
}

// ------------------------------------------------------------ LU

LUFactors lu_factor(Graph& g, Value a) {
  const Shape s = g.type(a).shape;
  int64_t r = static_cast<int64_t>(s.size());
  int64_t m = s[r - 2], n = s[r - 1], k = std::min(m, n), B = batch_numel(s);
  DType dt = g.type(a).dtype;
  double tiny = dt == DType::F64 ? DBL_MIN : FLT_MIN;
  Value lu0 = flatten_batch(g, a);
  Value piv0 = ir::full(g, DType::S32, 0, {B, k});
  Value info0 = ir::full(g, DType::S32, 0, {B});
  auto out = ir::fori_loop(g, k, {lu0, piv0, info0}, [&](Graph& q, Value j, const std::vector<Value>& c) {
    Value A = c[0], piv = c[1], info = c[2];
    Value zero = ir::constant_int(q, DType::S64, 0);
    Shape mat{B, m, n}, colshape{B, m};
    // Pivot: the first row at or below j whose |a[row, j]| is largest (NaNs never win).
    Value rows2 = ir::iota(q, DType::S64, colshape, 1);
    Value col = ir::reshape(q, ir::dynamic_slice(q, A, {zero, zero, j}, {B, m, 1}), colshape);
    Value absc = ir::unary(q, ir::Op::Abs, col);
    Value below = cmp(q, rows2, splat_scalar(q, j, colshape), Compare::GE);
    Value valid = both(q, below, cmp(q, absc, absc, Compare::EQ));
    Value masked = ir::select(q, valid, absc, fill(q, absc, -1));
    Value mx = ir::reduce(q, masked, ir::constant(q, dt, -1), {1}, ir::Combiner::Max);
    Value is_max = both(q, below, cmp(q, masked, bcast(q, mx, colshape, {0}), Compare::EQ));
    Value p = ir::reduce(q, ir::select(q, is_max, rows2, ir::full(q, DType::S64, static_cast<double>(m), colshape)),
                         ir::constant_int(q, DType::S64, m), {1}, ir::Combiner::Min);
    // Swap rows j and p (whole rows, as getrf does).
    Value rows = ir::iota(q, DType::S64, mat, 1), cols = ir::iota(q, DType::S64, mat, 2);
    Value j3 = splat_scalar(q, j, mat);
    Value is_p = cmp(q, rows, bcast(q, p, mat, {0}), Compare::EQ);
    Value is_j = cmp(q, rows, j3, Compare::EQ);
    Value rowj = ir::reshape(q, ir::dynamic_slice(q, A, {zero, j, zero}, {B, 1, n}), {B, n});
    Value rowp = ir::reduce(q, ir::select(q, is_p, A, fill(q, A, -0.0)), ir::constant(q, dt, -0.0), {1},
                            ir::Combiner::Add);
    A = ir::select(q, is_j, bcast(q, rowp, mat, {0, 2}), ir::select(q, is_p, bcast(q, rowj, mat, {0, 2}), A));
    // Eliminate below the pivot: l = a[:, j] / pivot (unscaled for a zero
    // pivot, as LAPACK), then a rank-1 update of the trailing submatrix.
    Value pv = ir::reshape(q, ir::dynamic_slice(q, A, {zero, j, j}, {B, 1, 1}), {B});
    Value col1 = ir::reshape(q, ir::dynamic_slice(q, A, {zero, zero, j}, {B, m, 1}), colshape);
    Value pvb = bcast(q, pv, colshape, {0});
    // getrf scales by the reciprocal unless the pivot is subnormal.
    Value scaled = ir::select(q, cmp(q, ir::unary(q, ir::Op::Abs, pvb), fill(q, pvb, tiny), Compare::GE),
                              mul(q, col1, div(q, fill(q, pvb, 1), pvb)), div(q, col1, pvb));
    Value pv_zero = cmp(q, pvb, fill(q, pvb, 0), Compare::EQ);
    Value l = ir::select(q, pv_zero, col1, scaled);
    Value urow = ir::reshape(q, ir::dynamic_slice(q, A, {zero, j, zero}, {B, 1, n}), {B, n});
    Value lb = bcast(q, l, mat, {0, 1});
    Value outer = mul(q, lb, bcast(q, urow, mat, {0, 2}));
    Value rows_below = cmp(q, rows, j3, Compare::GT);
    Value trailing = both(q, rows_below, cmp(q, cols, j3, Compare::GT));
    A = ir::select(q, trailing, sub(q, A, outer), A);
    A = ir::select(q, both(q, rows_below, cmp(q, cols, j3, Compare::EQ)), lb, A);
    // info: the first zero pivot (1-based); pivots are 1-based too.
    Value j32 = ir::convert(q, j, DType::S32);
    Value one = ir::constant_int(q, DType::S32, 1);
    Value first_zero = both(q, cmp(q, info, fill(q, info, 0), Compare::EQ),
                            cmp(q, pv, fill(q, pv, 0), Compare::EQ));
    info = ir::select(q, first_zero, splat_scalar(q, add(q, j32, one), {B}), info);
    Value p1 = add(q, ir::convert(q, p, DType::S32), ir::full(q, DType::S32, 1, {B}));
    piv = ir::dynamic_update_slice(q, piv, ir::reshape(q, p1, {B, 1}), {zero, j});
    return std::vector<Value>{A, piv, info};
  });
  Shape piv_shape = batch_of(s);
  piv_shape.push_back(k);
  return {ir::reshape(g, out[0], s), ir::reshape(g, out[1], piv_shape), ir::reshape(g, out[2], batch_of(s))};
}

Value pivots_to_permutation(Graph& g, Value pivots, int64_t m) {
  const Shape s = g.type(pivots).shape;
  int64_t r = static_cast<int64_t>(s.size());
  int64_t k = s[r - 1];
  Shape batch(s.begin(), s.end() - 1);
  int64_t B = ir::numel(batch);
  Value piv = ir::reshape(g, ir::convert(g, pivots, DType::S32), {B, k});
  Value perm0 = ir::iota(g, DType::S32, {B, m}, 1);
  // Apply the swaps in order: perm[i] <-> perm[pivots[i] - 1].
  auto out = ir::fori_loop(g, k, {perm0, piv}, [&](Graph& q, Value i, const std::vector<Value>& c) {
    Value perm = c[0], pv = c[1];
    Value zero = ir::constant_int(q, DType::S64, 0);
    Shape ps{B, m};
    Value target = sub(q, ir::reshape(q, ir::dynamic_slice(q, pv, {zero, i}, {B, 1}), {B}),
                       ir::full(q, DType::S32, 1, {B}));
    Value rows = ir::iota(q, DType::S32, ps, 1);
    Value at_i = ir::reshape(q, ir::dynamic_slice(q, perm, {zero, i}, {B, 1}), {B});
    Value is_t = cmp(q, rows, bcast(q, target, ps, {0}), Compare::EQ);
    Value at_t = ir::reduce(q, ir::select(q, is_t, perm, fill(q, perm, 0)), ir::constant_int(q, DType::S32, 0), {1},
                            ir::Combiner::Add);
    Value is_i = cmp(q, rows, splat_scalar(q, ir::convert(q, i, DType::S32), ps), Compare::EQ);
    perm = ir::select(q, is_i, bcast(q, at_t, ps, {0}), ir::select(q, is_t, bcast(q, at_i, ps, {0}), perm));
    return std::vector<Value>{perm, pv};
  });
  batch.push_back(m);
  return ir::reshape(g, out[0], batch);
}

Value permutation_matrix(Graph& g, Value perm, DType dtype) {
  const Shape s = g.type(perm).shape;  // [batch..., m]
  int64_t r = static_cast<int64_t>(s.size());
  Shape ms = s;
  ms.push_back(s[r - 1]);
  ir::Dims dims;
  for (int64_t i = 0; i < r - 1; ++i) dims.push_back(i);
  dims.push_back(r);  // perm[..., c] along the columns
  Value pc = bcast(g, ir::convert(g, perm, DType::S64), ms, dims);
  return ir::convert(g, cmp(g, row_index(g, ms), pc, Compare::EQ), dtype);
}

Value permute_rows(Graph& g, Value x, Value perm, bool inverse) {
  const Shape s = g.type(x).shape;
  int64_t r = static_cast<int64_t>(s.size());
  int64_t m = s[r - 2], w = s[r - 1], B = batch_numel(s);
  // Rows of all matrices in one [B*m, w] table; row i of matrix b is b*m + i.
  Value flat = ir::reshape(g, x, {B * m, w});
  Value p = ir::reshape(g, ir::convert(g, perm, DType::S64), {B, m});
  Value base = mul(g, ir::iota(g, DType::S64, {B, m}, 0), ir::full(g, DType::S64, static_cast<double>(m), {B, m}));
  Value idx = ir::reshape(g, add(g, p, base), {B * m});
  Value out = inverse ? ir::scatter_rows(g, fill(g, flat, 0), idx, flat, ir::Combiner::Replace)
                      : ir::gather_rows(g, flat, idx);
  return ir::reshape(g, out, s);
}

namespace {
// The first min(m, n) entries of the packed [.., m, n] LU along `axis` (-1:
// columns, for L; -2: rows, for U).
Value lu_leading(Graph& g, Value lu, int64_t axis) {
  const Shape s = g.type(lu).shape;
  int64_t r = static_cast<int64_t>(s.size());
  ir::Dims lo(r, 0), hi(s.begin(), s.end());
  hi[r + axis] = std::min(s[r - 2], s[r - 1]);
  return ir::slice(g, lu, lo, hi);
}
}  // namespace

Value lu_unpack_l(Graph& g, Value lu) {
  Value x = lu_leading(g, lu, -1);
  const Shape xs = g.type(x).shape;
  return ir::select(g, band_mask(g, xs, 0, Compare::EQ), fill(g, x, 1), tril(g, x, -1));
}

Value lu_unpack_u(Graph& g, Value lu) { return triu(g, lu_leading(g, lu, -2), 0); }

Value lu_solve(Graph& g, Value lu, Value pivots, Value b, bool left, bool adjoint) {
  // X A = B  <=>  A^T X^T = B^T.
  if (!left) return matrix_transpose(g, lu_solve(g, lu, pivots, matrix_transpose(g, b), true, !adjoint));
  const Shape s = g.type(lu).shape;
  Value perm = pivots_to_permutation(g, pivots, s[s.size() - 2]);
  if (!adjoint) {  // A = P L U: X = U^-1 L^-1 P^T B
    Value y = lowering::triangular_solve(g, lu, permute_rows(g, b, perm, false), false, true, true);
    return lowering::triangular_solve(g, lu, y, true, true, false);
  }
  // A^T = U^T L^T P^T: X = P L^-T U^-T B
  Value y = lowering::triangular_solve(g, lu, b, true, true, false, true);
  y = lowering::triangular_solve(g, lu, y, false, true, true, true);
  return permute_rows(g, y, perm, true);
}

Value pivots_sign(Graph& g, Value pivots, DType dtype) {
  const Shape s = g.type(pivots).shape;
  int64_t r = static_cast<int64_t>(s.size());
  Value piv = ir::convert(g, pivots, DType::S32);
  Value order = add(g, ir::iota(g, DType::S32, s, r - 1), ir::full(g, DType::S32, 1, s));
  Value swapped = ir::convert(g, cmp(g, piv, order, Compare::NE), DType::S32);
  Value count = ir::reduce(g, swapped, ir::constant_int(g, DType::S32, 0), {r - 1}, ir::Combiner::Add);
  Value parity = ir::binary(g, ir::Op::And, count, fill(g, count, 1));
  // 1 - 2 * parity
  Value sign = sub(g, fill(g, count, 1), mul(g, fill(g, count, 2), parity));
  return ir::convert(g, sign, dtype);
}

Value lu_det(Graph& g, Value lu, Value pivots) {
  DType dt = g.type(lu).dtype;
  Value d = diagonal(g, lu);
  int64_t r = g.type(d).rank();
  Value prod = ir::reduce(g, d, ir::constant(g, dt, 1), {r - 1}, ir::Combiner::Mul);
  return mul(g, pivots_sign(g, pivots, dt), prod);
}

std::pair<Value, Value> lu_slogdet(Graph& g, Value lu, Value pivots) {
  DType dt = g.type(lu).dtype;
  Value d = diagonal(g, lu);
  int64_t r = g.type(d).rank();
  Value signs = ir::unary(g, ir::Op::Sign, d);
  Value sign = mul(g, pivots_sign(g, pivots, dt),
                   ir::reduce(g, signs, ir::constant(g, dt, 1), {r - 1}, ir::Combiner::Mul));
  Value logs = ir::unary(g, ir::Op::Log, ir::unary(g, ir::Op::Abs, d));
  Value logabs = ir::reduce(g, logs, ir::constant(g, dt, 0), {r - 1}, ir::Combiner::Add);
  return {sign, logabs};
}

// ------------------------------------------------------------ matrix functions

Value matrix_exp(Graph& g, Value a) {
  const Shape s = g.type(a).shape;
  DType out_dtype = g.type(a).dtype;
  int64_t r = static_cast<int64_t>(s.size());
  int64_t n = s[r - 1], B = batch_numel(s);
  Value x = flatten_batch(g, a);
  if (is_half(out_dtype)) x = ir::convert(g, x, DType::F32);
  DType dt = g.type(x).dtype;
  Shape mat{B, n, n};
  // Scaling: A / 2^s with ||A / 2^s||_1 <= theta, where the degree-18 Taylor
  // polynomial is accurate to the dtype's rounding (Bader, Blanes, Casas 2019).
  double theta = dt == DType::F64 ? 1.090863719290036 : 3.010066362817634;
  Value colsum = ir::reduce(g, ir::unary(g, ir::Op::Abs, x), ir::constant(g, dt, 0), {1}, ir::Combiner::Add);
  Value norm = ir::reduce(g, colsum, ir::constant(g, dt, 0), {1}, ir::Combiner::Max);  // [B]
  Value lg = div(g, ir::unary(g, ir::Op::Log, div(g, norm, fill(g, norm, theta))), fill(g, norm, std::log(2.0)));
  Value steps = ir::unary(g, ir::Op::Ceil, lg);
  // Clamp to [0, 1100] (a NaN or infinite norm squares nothing useful anyway).
  steps = ir::select(g, cmp(g, steps, fill(g, steps, 0), Compare::GT), steps, fill(g, steps, 0));
  steps = ir::select(g, cmp(g, steps, fill(g, steps, 1100), Compare::LT), steps, fill(g, steps, 1100));
  Value sb = ir::convert(g, steps, DType::S64);
  Value smax = ir::reduce(g, sb, ir::constant_int(g, DType::S64, 0), {0}, ir::Combiner::Max);
  // Repeats `step` on the matrices whose scaling exceeds the iteration count.
  auto repeat = [&](Value m0, bool square) {
    auto res = ir::while_loop(
        g, {ir::constant_int(g, DType::S64, 0), smax, sb, m0},
        [](Graph& q, const std::vector<Value>& c) { return cmp(q, c[0], c[1], Compare::LT); },
        [&](Graph& q, const std::vector<Value>& c) {
          Value active = bcast(q, cmp(q, splat_scalar(q, c[0], {B}), c[2], Compare::LT), mat, {0});
          Value next = square ? batched_matmul(q, c[3], c[3]) : mul(q, c[3], fill(q, c[3], 0.5));
          return std::vector<Value>{add(q, c[0], ir::constant_int(q, DType::S64, 1)), c[1], c[2],
                                    ir::select(q, active, next, c[3])};
        });
    return res[3];
  };
  x = repeat(x, false);
  // Paterson-Stockmeyer: sum_k x^k / k! as a polynomial in x^4 whose
  // coefficients are cubics in x.
  Value eye = identity(g, dt, {B}, n);
  Value x2 = batched_matmul(g, x, x), x3 = batched_matmul(g, x2, x), x4 = batched_matmul(g, x2, x2);
  std::vector<Value> powers{eye, x, x2, x3};
  double coef[19];
  coef[0] = 1;
  for (int k = 1; k <= 18; ++k) coef[k] = coef[k - 1] / k;
  auto chunk = [&](int q) {
    Value sum;
    for (int rr = 0; rr < 4 && 4 * q + rr <= 18; ++rr) {
      Value term = mul(g, powers[rr], fill(g, x, coef[4 * q + rr]));
      sum = sum.valid() ? add(g, sum, term) : term;
    }
    return sum;
  };
  Value p = chunk(4);
  for (int q = 3; q >= 0; --q) p = add(g, batched_matmul(g, p, x4), chunk(q));
  p = repeat(p, true);
  return ir::reshape(g, ir::convert(g, p, out_dtype), s);
}

}  // namespace tpu::lowering
