#include "lowering/spectral.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "lowering/elementwise.h"
#include "lowering/index.h"
#include "lowering/sort.h"

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Graph;
using ir::Shape;
using ir::Value;
using Values = std::vector<Value>;

Value add(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Add, a, b); }
Value sub(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Subtract, a, b); }
Value mul(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Multiply, a, b); }
Value div(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Divide, a, b); }
Value vmax(Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Maximum, a, b); }
Value sqrt(Graph& g, Value x) { return ir::unary(g, ir::Op::Sqrt, x); }
Value abs(Graph& g, Value x) { return ir::unary(g, ir::Op::Abs, x); }
Value neg(Graph& g, Value x) { return ir::unary(g, ir::Op::Negate, x); }
Value cmp(Graph& g, Value a, Value b, ir::Compare c) { return ir::compare(g, a, b, c); }
Value zero_s64(Graph& g) { return ir::constant_int(g, DType::S64, 0); }

DType dtype_of(Graph& g, Value v) { return g.type(v).dtype; }
Shape shape_of(Graph& g, Value v) { return g.type(v).shape; }

// Sum / max over `dims`.
Value sum(Graph& g, Value x, const ir::Dims& dims) {
  return ir::reduce(g, x, ir::constant(g, dtype_of(g, x), 0), dims, ir::Combiner::Add);
}
Value max_abs(Graph& g, Value x, const ir::Dims& dims) {
  return ir::reduce(g, abs(g, x), ir::constant(g, dtype_of(g, x), 0), dims, ir::Combiner::Max);
}
Value any(Graph& g, Value pred) {
  ir::Dims dims;
  for (int64_t d = 0; d < g.type(pred).rank(); ++d) dims.push_back(d);
  return ir::reduce(g, pred, ir::constant_int(g, DType::Pred, 0), dims, ir::Combiner::Or);
}

// `x` (of `dims` of `shape`) broadcast to `shape`.
Value bcast(Graph& g, Value x, const Shape& shape, const ir::Dims& dims) {
  return ir::broadcast_in_dim(g, x, shape, dims);
}
// Positions along `dim` of `shape` compared with the s64 scalar `j`.
Value index_vs(Graph& g, const Shape& shape, int64_t dim, Value j, ir::Compare c) {
  return cmp(g, ir::iota(g, DType::S64, shape, dim), bcast(g, j, shape, {}), c);
}
// Positions along `dim_a` compared with positions along `dim_b` (+ offset).
Value index_pair(Graph& g, const Shape& shape, int64_t dim_a, int64_t dim_b, int64_t offset, ir::Compare c) {
  Value b = ir::iota(g, DType::S64, shape, dim_b);
  if (offset != 0) b = add(g, b, ir::full(g, DType::S64, static_cast<double>(offset), shape));
  return cmp(g, ir::iota(g, DType::S64, shape, dim_a), b, c);
}

// x[..., lo:hi, ...] along `axis`.
Value slice_axis(Graph& g, Value x, int64_t axis, int64_t lo, int64_t hi) {
  Shape s = shape_of(g, x);
  ir::Dims start(s.size(), 0), limit(s.begin(), s.end());
  start[axis] = lo;
  limit[axis] = hi;
  return ir::slice(g, x, start, limit);
}

// A column (rank-2 [B, rows]) of x [B, rows, cols] at the dynamic index j.
Value column(Graph& g, Value x, Value j) {
  Shape s = shape_of(g, x);
  Value z = zero_s64(g);
  return ir::reshape(g, ir::dynamic_slice(g, x, {z, z, j}, {s[0], s[1], 1}), {s[0], s[1]});
}

// The Householder vector of column j of `reflectors` [B, q, *]: zero above
// row j, one at row j, the stored entries below.
Value reflector(Graph& g, Value reflectors, Value j) {
  Value col = column(g, reflectors, j);
  Shape s = shape_of(g, col);
  Value v = ir::select(g, index_vs(g, s, 1, j, ir::Compare::GT), col, splat(g, col, 0));
  return ir::select(g, index_vs(g, s, 1, j, ir::Compare::EQ), splat(g, col, 1), v);
}

// ------------------------------------------------------------ Jacobi rotations
//
// Parallel (round-robin) Jacobi: the n (even) indices are laid out in pairs
// (2i, 2i+1), all n/2 pairs are rotated at once, then the indices move one
// step along the tournament circle (index 0 fixed), so that in n - 1 rounds
// every pair meets once. The move is a fixed permutation applied to the
// rows/columns themselves (static slices), and n - 1 moves are the identity:
// after whole sweeps every index is back in place.

// x's slices along `axis` (size 2h) as pairs: (even, odd) positions, each
// shaped like x with `axis` of size h and an extra unit dim after it; undo
// with pairs_joined.
std::pair<Value, Value> split_pairs(Graph& g, Value x, int64_t axis) {
  Shape s = shape_of(g, x);
  Shape split(s.begin(), s.begin() + axis);
  split.push_back(s[axis] / 2);
  split.push_back(2);
  split.insert(split.end(), s.begin() + axis + 1, s.end());
  Value pairs = ir::reshape(g, x, split);
  return {slice_axis(g, pairs, axis + 1, 0, 1), slice_axis(g, pairs, axis + 1, 1, 2)};
}
Value pairs_joined(Graph& g, Value even, Value odd, int64_t axis, const Shape& shape) {
  return ir::reshape(g, ir::concatenate(g, {even, odd}, axis + 1), shape);
}

// The tournament move along `axis` (size n = 2h): with top = even positions
// and bottom = odd ones, top' = [top0, bottom0, top1..top(h-2)],
// bottom' = [bottom1..bottom(h-1), top(h-1)].
Value tournament_move(Graph& g, Value x, int64_t axis) {
  Shape s = shape_of(g, x);
  int64_t n = s[axis], h = n / 2;
  if (h < 2) return x;
  auto [top, bottom] = split_pairs(g, x, axis);
  Value new_top = ir::concatenate(g, {slice_axis(g, top, axis, 0, 1), slice_axis(g, bottom, axis, 0, 1),
                                      slice_axis(g, top, axis, 1, h - 1)},
                                  axis);
  Value new_bottom =
      ir::concatenate(g, {slice_axis(g, bottom, axis, 1, h), slice_axis(g, top, axis, h - 1, h)}, axis);
  return pairs_joined(g, new_top, new_bottom, axis, s);
}

// Rotates the paired slices along `axis` of x: with p = 2i, q = 2i+1,
// x_p' = c x_p - s x_q and x_q' = s x_p + c x_q, where c and s are [B, h]
// (dims 0 and axis of x).
Value rotate_pairs(Graph& g, Value x, int64_t axis, Value c, Value s) {
  auto [xp, xq] = split_pairs(g, x, axis);
  Shape half = shape_of(g, xp);
  Value cb = bcast(g, c, half, {0, axis}), sb = bcast(g, s, half, {0, axis});
  Value np = sub(g, mul(g, cb, xp), mul(g, sb, xq));
  Value nq = add(g, mul(g, sb, xp), mul(g, cb, xq));
  return pairs_joined(g, np, nq, axis, shape_of(g, x));
}

// The rotation (c, s) that zeroes the off-diagonal entry of the symmetric
// 2x2 [[alpha, gamma], [gamma, beta]] under J^T M J, J = [[c, s], [-s, c]]
// (the smaller of the two angles); the identity where `skip`.
std::pair<Value, Value> jacobi_rotation(Graph& g, Value alpha, Value beta, Value gamma, Value skip) {
  Value one = splat(g, gamma, 1);
  Value safe_gamma = ir::select(g, skip, one, gamma);
  Value zeta = div(g, sub(g, beta, alpha), mul(g, splat(g, gamma, 2), safe_gamma));
  Value az = abs(g, zeta);
  // sqrt(1 + zeta^2) without overflow for large |zeta|.
  Value inv = div(g, one, vmax(g, az, one));
  Value root = ir::select(g, cmp(g, az, one, ir::Compare::GT), mul(g, az, sqrt(g, add(g, one, mul(g, inv, inv)))),
                          sqrt(g, add(g, one, mul(g, az, az))));
  Value sign = ir::select(g, cmp(g, zeta, splat(g, zeta, 0), ir::Compare::GE), one, neg(g, one));
  Value t = div(g, sign, add(g, az, root));
  Value c = div(g, one, sqrt(g, add(g, one, mul(g, t, t))));
  Value s = mul(g, t, c);
  return {ir::select(g, skip, one, c), ir::select(g, skip, splat(g, gamma, 0), s)};
}

// Most sweeps a Jacobi iteration runs (it converges quadratically, usually
// within 6-10): a bound so that NaN/Inf input cannot loop forever.
constexpr int64_t kMaxSweeps = 60;

double epsilon(DType dtype) {
  return dtype == DType::F64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
}

// Columns of x [B, r, c] reordered: out[:, :, j] = x[:, :, order[:, j]].
Value permute_columns(Graph& g, Value x, Value order) {
  Shape s = shape_of(g, x);
  return gather_dim(g, x, 2, bcast(g, order, s, {0, 2}));
}

// The diagonal [B, min(r, c)] of x [B, r, c].
Value diagonal(Graph& g, Value x) {
  Shape s = shape_of(g, x);
  int64_t k = std::min(s[1], s[2]);
  Value square = ir::slice(g, x, {0, 0, 0}, {s[0], k, k});
  Shape sq = shape_of(g, square);
  return sum(g, ir::select(g, index_pair(g, sq, 1, 2, 0, ir::Compare::EQ), square, splat(g, square, 0)), {2});
}

}  // namespace

Value eye(Graph& g, DType dtype, int64_t batch, int64_t rows, int64_t cols) {
  Shape s{batch, rows, cols};
  return ir::select(g, index_pair(g, s, 1, 2, 0, ir::Compare::EQ), ir::full(g, dtype, 1, s), ir::full(g, dtype, 0, s));
}

// ------------------------------------------------------------ Householder QR

Householder geqrf(Graph& g, Value a) {
  Shape s = shape_of(g, a);
  DType dt = dtype_of(g, a);
  int64_t batch = s[0], m = s[1], n = s[2], k = std::min(m, n);
  Value tau = ir::full(g, dt, 0, {batch, k});
  if (k == 0) return {a, tau};
  Values out = ir::fori_loop(g, k, {a, tau}, [&](Graph& r, Value j, const Values& c) -> Values {
    Value A = c[0], taus = c[1];
    Value col = column(r, A, j);  // [B, m]
    Shape cs = shape_of(r, col);
    Value is_j = index_vs(r, cs, 1, j, ir::Compare::EQ), below = index_vs(r, cs, 1, j, ir::Compare::GT);
    Value zeros = splat(r, col, 0);
    Value alpha = sum(r, ir::select(r, is_j, col, zeros), {1});  // [B]
    Value x = ir::select(r, below, col, zeros);
    // Norms scaled by the largest entry (as dnrm2), so tiny or huge columns
    // neither underflow nor overflow.
    Value xmax = max_abs(r, x, {1});
    Value scale = vmax(r, xmax, abs(r, alpha));
    Value trivial = cmp(r, xmax, splat(r, xmax, 0), ir::Compare::EQ);  // H = I, tau = 0
    Value safe_scale = ir::select(r, trivial, splat(r, scale, 1), scale);
    Value xs = div(r, x, bcast(r, safe_scale, cs, {0}));
    Value as = div(r, alpha, safe_scale);
    Value norm = mul(r, safe_scale, sqrt(r, add(r, mul(r, as, as), sum(r, mul(r, xs, xs), {1}))));
    Value beta = ir::select(r, cmp(r, alpha, splat(r, alpha, 0), ir::Compare::GE), neg(r, norm), norm);
    Value safe_beta = ir::select(r, trivial, splat(r, beta, 1), beta);
    Value tau_j = ir::select(r, trivial, splat(r, beta, 0), div(r, sub(r, beta, alpha), safe_beta));
    Value denom = ir::select(r, trivial, splat(r, beta, 1), sub(r, alpha, beta));
    Value v_below = mul(r, x, bcast(r, div(r, splat(r, denom, 1), denom), cs, {0}));
    Value v = ir::select(r, is_j, splat(r, col, 1), v_below);
    // Apply H = I - tau v v^T to the columns after j.
    Value w = ir::dot_general(r, v, A, {0}, {0}, {1}, {1}, dt);  // [B, n]
    Shape as3 = shape_of(r, A);
    Value update = mul(r, bcast(r, tau_j, as3, {0}), mul(r, bcast(r, v, as3, {0, 1}), bcast(r, w, as3, {0, 2})));
    A = ir::select(r, index_vs(r, as3, 2, j, ir::Compare::GT), sub(r, A, update), A);
    // Column j: beta on the diagonal, the reflector below (unchanged when trivial).
    Value trivial_b = bcast(r, trivial, cs, {0});
    Value new_col = ir::select(r, is_j, bcast(r, ir::select(r, trivial, alpha, beta), cs, {0}),
                               ir::select(r, below, ir::select(r, trivial_b, col, v_below), col));
    Value z = zero_s64(r);
    A = ir::dynamic_update_slice(r, A, ir::reshape(r, new_col, {cs[0], cs[1], 1}), {z, z, j});
    taus = ir::dynamic_update_slice(r, taus, ir::reshape(r, tau_j, {cs[0], 1}), {z, j});
    return {A, taus};
  });
  return {out[0], out[1]};
}

Value apply_reflectors(Graph& g, Value reflectors, Value tau, Value c, bool left, bool transpose) {
  int64_t k = shape_of(g, tau)[1];
  if (k == 0 || ir::numel(shape_of(g, c)) == 0) return c;
  DType dt = dtype_of(g, c);
  // Q = H_0 ... H_{k-1}: Q C and C Q^T apply H_{k-1} first.
  bool forward = left == transpose;
  Values out = ir::fori_loop(g, k, {reflectors, tau, c}, [&](Graph& r, Value i, const Values& carried) -> Values {
    Value j = forward ? i : sub(r, ir::constant_int(r, DType::S64, k - 1), i);
    Value v = reflector(r, carried[0], j);  // [B, q]
    Value z = zero_s64(r);
    Shape ts = shape_of(r, carried[1]);
    Value t = ir::reshape(r, ir::dynamic_slice(r, carried[1], {z, j}, {ts[0], 1}), {ts[0]});
    Value C = carried[2];
    Shape s = shape_of(r, C);
    Value update;
    if (left) {  // C -= tau v (v^T C)
      Value w = ir::dot_general(r, v, C, {0}, {0}, {1}, {1}, dt);  // [B, p]
      update = mul(r, bcast(r, v, s, {0, 1}), bcast(r, w, s, {0, 2}));
    } else {  // C -= tau (C v) v^T
      Value w = ir::dot_general(r, C, v, {0}, {0}, {2}, {1}, dt);  // [B, p]
      update = mul(r, bcast(r, w, s, {0, 1}), bcast(r, v, s, {0, 2}));
    }
    C = sub(r, C, mul(r, bcast(r, t, s, {0}), update));
    return {carried[0], carried[1], C};
  });
  return out[2];
}

Value householder_product(Graph& g, Value reflectors, Value tau) {
  Shape s = shape_of(g, reflectors);
  return apply_reflectors(g, reflectors, tau, eye(g, dtype_of(g, reflectors), s[0], s[1], s[2]), true, false);
}

// ------------------------------------------------------------ symmetric eigendecomposition

Eigh eigh(Graph& g, Value a, bool upper, bool compute_vectors) {
  Shape s = shape_of(g, a);
  DType dt = dtype_of(g, a);
  int64_t batch = s[0], n = s[1];
  // The symmetric matrix of the referenced triangle.
  Value at = ir::transpose(g, a, {0, 2, 1});
  Value A = ir::select(g, index_pair(g, s, 1, 2, 0, upper ? ir::Compare::LE : ir::Compare::GE), a, at);
  // An odd n gets a zero row and column: a pair with it never rotates, and
  // after whole sweeps it is back in the last place.
  int64_t N = n + n % 2, h = N / 2;
  if (N != n) A = ir::pad(g, A, ir::constant(g, dt, 0), {0, 0, 0}, {0, 1, 1});
  Values init{ir::constant_int(g, DType::S64, 0), A};
  if (compute_vectors) init.push_back(eye(g, dt, batch, N, N));
  double eps = epsilon(dt);

  auto cond = [&](Graph& r, const Values& c) -> Value {
    Value M = c[1];
    Shape ms = shape_of(r, M);
    Value sq = mul(r, M, M);
    Value off = sum(r, ir::select(r, index_pair(r, ms, 1, 2, 0, ir::Compare::EQ), splat(r, sq, 0), sq), {1, 2});
    Value total = sum(r, sq, {1, 2});
    // Converged once the off-diagonal part is below rounding of the whole.
    Value pending = any(r, cmp(r, off, mul(r, total, splat(r, total, eps * eps)), ir::Compare::GT));
    Value more = cmp(r, c[0], ir::constant_int(r, DType::S64, kMaxSweeps), ir::Compare::LT);
    return ir::binary(r, ir::Op::And, pending, more);
  };
  auto round = [&](Graph& r, Value, const Values& c) -> Values {
    Value M = c[0];
    Shape ms = shape_of(r, M);
    Value d = ir::reshape(r, diagonal(r, M), {batch, h, 2});
    Value app = ir::reshape(r, slice_axis(r, d, 2, 0, 1), {batch, h});
    Value aqq = ir::reshape(r, slice_axis(r, d, 2, 1, 2), {batch, h});
    // M[2i, 2i+1]: the superdiagonal entries at even rows.
    Value even_row = cmp(r, ir::binary(r, ir::Op::Remainder, ir::iota(r, DType::S64, ms, 1), ir::full(r, DType::S64, 2, ms)),
                         ir::full(r, DType::S64, 0, ms), ir::Compare::EQ);
    Value super = ir::binary(r, ir::Op::And, even_row, index_pair(r, ms, 2, 1, 1, ir::Compare::EQ));
    Value upper_entries = sum(r, ir::select(r, super, M, splat(r, M, 0)), {2});  // [B, N]
    Value apq = ir::reshape(r, slice_axis(r, ir::reshape(r, upper_entries, {batch, h, 2}), 2, 0, 1), {batch, h});
    auto [cs, sn] = jacobi_rotation(r, app, aqq, apq, cmp(r, apq, splat(r, apq, 0), ir::Compare::EQ));
    M = rotate_pairs(r, M, 1, cs, sn);
    M = rotate_pairs(r, M, 2, cs, sn);
    // The rotated pairs' off-diagonal entries are zero by construction: drop
    // their rounding noise so the convergence test sees only real coupling.
    Value odd_row_sub = index_pair(r, ms, 2, 1, -1, ir::Compare::EQ);
    Value pair_off = ir::binary(r, ir::Op::Or, super, ir::binary(r, ir::Op::And, odd_row_sub,
                                                                      ir::unary(r, ir::Op::Not, even_row)));
    M = ir::select(r, pair_off, splat(r, M, 0), M);
    // Their diagonal entries by the accurate update app - t apq, aqq + t apq
    // (t = s / c) rather than the rotated sums, which accumulate rounding.
    Value t = ir::binary(r, ir::Op::Divide, sn, cs);
    Value shift = mul(r, t, apq);
    Value new_diag = ir::reshape(r, ir::concatenate(r, {ir::reshape(r, sub(r, app, shift), {batch, h, 1}),
                                                        ir::reshape(r, add(r, aqq, shift), {batch, h, 1})}, 2),
                                 {batch, N});
    M = ir::select(r, index_pair(r, ms, 1, 2, 0, ir::Compare::EQ), bcast(r, new_diag, ms, {0, 1}), M);
    M = tournament_move(r, tournament_move(r, M, 1), 2);
    Values next{M};
    if (compute_vectors) next.push_back(tournament_move(r, rotate_pairs(r, c[1], 2, cs, sn), 2));
    return next;
  };
  Values result = ir::while_loop(g, init, cond, [&](Graph& r, const Values& c) -> Values {
    Values inner(c.begin() + 1, c.end());
    Values after = ir::fori_loop(r, N - 1, inner, round);
    Values next{add(r, c[0], ir::constant_int(r, DType::S64, 1))};
    next.insert(next.end(), after.begin(), after.end());
    return next;
  });
  Value values = slice_axis(g, diagonal(g, result[1]), 1, 0, n);
  ValuesIndices sorted = sort(g, values, 1, false);
  Eigh e{sorted.values, {}};
  if (compute_vectors) {
    Value vectors = ir::slice(g, result[2], {0, 0, 0}, {batch, n, n});
    e.vectors = permute_columns(g, vectors, sorted.indices);
  }
  return e;
}

// ------------------------------------------------------------ SVD

Svd svd(Graph& g, Value a, bool full_matrices, bool compute_uv) {
  Shape s = shape_of(g, a);
  DType dt = dtype_of(g, a);
  int64_t batch = s[0], m = s[1], n = s[2];
  bool wide = m < n;
  // One-sided Jacobi on the columns of a tall X (A, or A^T when wide):
  // X V has orthogonal columns, whose norms are the singular values.
  Value X = wide ? ir::transpose(g, a, {0, 2, 1}) : a;
  int64_t rows = std::max(m, n), k = std::min(m, n);
  int64_t K = k + k % 2, h = K / 2;
  if (K != k) X = ir::pad(g, X, ir::constant(g, dt, 0), {0, 0, 0}, {0, 0, 1});  // a zero column never rotates
  double tol = epsilon(dt) * static_cast<double>(std::max<int64_t>(rows, 1));
  Values init{ir::constant_int(g, DType::S64, 0), ir::constant_int(g, DType::Pred, 1), X};
  if (compute_uv) init.push_back(eye(g, dt, batch, K, K));

  auto cond = [&](Graph& r, const Values& c) -> Value {
    Value more = cmp(r, c[0], ir::constant_int(r, DType::S64, kMaxSweeps), ir::Compare::LT);
    return ir::binary(r, ir::Op::And, c[1], more);
  };
  auto round = [&](Graph& r, Value, const Values& c) -> Values {
    Value rotated = c[0], M = c[1];
    Value pairs = ir::reshape(r, M, {batch, rows, h, 2});
    Value xp = slice_axis(r, pairs, 3, 0, 1), xq = slice_axis(r, pairs, 3, 1, 2);
    auto gram = [&](Value u, Value v) { return ir::reshape(r, sum(r, mul(r, u, v), {1}), {batch, h}); };
    Value alpha = gram(xp, xp), beta = gram(xq, xq), gamma = gram(xp, xq);
    // Rotate only pairs not yet orthogonal to working precision.
    Value bound = mul(r, splat(r, alpha, tol), mul(r, sqrt(r, alpha), sqrt(r, beta)));
    Value skip = ir::unary(r, ir::Op::Not, cmp(r, abs(r, gamma), bound, ir::Compare::GT));
    auto [cs, sn] = jacobi_rotation(r, alpha, beta, gamma, skip);
    Values next{ir::binary(r, ir::Op::Or, rotated, any(r, ir::unary(r, ir::Op::Not, skip))),
                tournament_move(r, rotate_pairs(r, M, 2, cs, sn), 2)};
    if (compute_uv) next.push_back(tournament_move(r, rotate_pairs(r, c[2], 2, cs, sn), 2));
    return next;
  };
  Values result = ir::while_loop(g, init, cond, [&](Graph& r, const Values& c) -> Values {
    Values inner{ir::constant_int(r, DType::Pred, 0)};
    inner.insert(inner.end(), c.begin() + 2, c.end());
    Values after = K > 1 ? ir::fori_loop(r, K - 1, inner, round) : inner;
    Values next{add(r, c[0], ir::constant_int(r, DType::S64, 1))};
    next.insert(next.end(), after.begin(), after.end());
    return next;
  });
  X = slice_axis(g, result[2], 2, 0, k);
  Value norms = sqrt(g, sum(g, mul(g, X, X), {1}));  // [B, k]
  ValuesIndices sorted = sort(g, norms, 1, true);
  Svd out{{}, sorted.values, {}};
  if (!compute_uv) return out;
  Value V = permute_columns(g, ir::slice(g, result[3], {0, 0, 0}, {batch, k, k}), sorted.indices);
  X = permute_columns(g, X, sorted.indices);
  // The left vectors: Q of X = QR (orthonormal even where a singular value
  // is zero, and completed to a basis when full), columns signed as X's.
  int64_t cols = full_matrices ? rows : k;
  Householder qr = geqrf(g, X);
  Value packed = qr.packed;
  if (cols > k) packed = ir::pad(g, packed, ir::constant(g, dt, 0), {0, 0, 0}, {0, 0, cols - k});
  Value Q = householder_product(g, packed, qr.tau);  // [B, rows, cols]
  Value rdiag = diagonal(g, qr.packed);             // [B, k]
  Value sign = ir::select(g, cmp(g, rdiag, splat(g, rdiag, 0), ir::Compare::LT), splat(g, rdiag, -1), splat(g, rdiag, 1));
  if (cols > k) sign = ir::pad(g, sign, ir::constant(g, dt, 1), {0, 0}, {0, cols - k});
  Q = mul(g, Q, bcast(g, sign, shape_of(g, Q), {0, 2}));
  if (!wide) {
    out.u = Q;
    out.vh = ir::transpose(g, V, {0, 2, 1});
  } else {  // A^T = Q S V^T, so A = V S Q^T
    out.u = V;
    out.vh = ir::transpose(g, Q, {0, 2, 1});
  }
  return out;
}

PseudoInverse pseudo_inverse(ir::Graph& g, ir::Value s, double rcond) {
  ir::DType dt = g.type(s).dtype;
  int64_t b = g.type(s).shape[0], k = g.type(s).shape[1];
  ir::Value smax = ir::slice(g, s, {0, 0}, {b, 1});
  ir::Value thr = ir::binary(g, ir::Op::Multiply, ir::broadcast_in_dim(g, smax, {b, k}, {0, 1}),
                             ir::full(g, dt, rcond, {b, k}));
  ir::Value zero = ir::full(g, dt, 0, {b, k});
  ir::Value kept = ir::binary(g, ir::Op::And, ir::compare(g, s, thr, ir::Compare::GT),
                              ir::compare(g, s, zero, ir::Compare::GT));
  return {ir::select(g, kept, ir::binary(g, ir::Op::Divide, ir::full(g, dt, 1, {b, k}), s), zero), kept};
}

ir::Value svd_solve(ir::Graph& g, ir::Value u, ir::Value vh, ir::Value inverse_s, ir::Value b) {
  ir::DType dt = g.type(u).dtype;
  int64_t batch = g.type(b).shape[0], k = g.type(u).shape[2], nrhs = g.type(b).shape[2];
  ir::Value y = ir::dot_general(g, u, b, {0}, {0}, {1}, {1}, dt);  // [B, k, nrhs]
  y = ir::binary(g, ir::Op::Multiply, y, ir::broadcast_in_dim(g, inverse_s, {batch, k, nrhs}, {0, 1}));
  return ir::dot_general(g, vh, y, {0}, {0}, {1}, {1}, dt);  // [B, n, nrhs]
}

}  // namespace tpu::lowering
