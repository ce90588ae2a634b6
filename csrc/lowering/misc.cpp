#include "lowering/misc.h"

#include <cmath>
#include <limits>

#include "lowering/formula.h"
#include "lowering/index.h"
#include "lowering/reduce.h"
#include "lowering/sort.h"

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

Value sign(Formula& f, Value x) {
  DType t = f.g.type(x).dtype;
  return f.sub(ir::convert(f.g, f.gt(x, 0.0), t), ir::convert(f.g, f.lt(x, 0.0), t));
}

Value s64_full(ir::Graph& g, int64_t v, const ir::Shape& shape) {
  return ir::full(g, DType::S64, static_cast<double>(v), shape);
}

}  // namespace

// ------------------------------------------------------------ distances

Value pnorm_last(ir::Graph& g, Value diff, double p) {
  Formula f{g};
  const ir::Shape shape = g.type(diff).shape;
  DType dt = g.type(diff).dtype;
  int64_t last = static_cast<int64_t>(shape.size()) - 1;
  ir::Shape out(shape.begin(), shape.end() - 1);
  if (shape.back() == 0) return ir::full(g, dt, 0, out);
  Value a = f.abs(diff);
  auto total = [&](Value v) { return sum(g, v, {last}, false, dt, dt); };
  if (p == 0) return total(ir::convert(g, f.ne(a, 0.0), dt));
  if (p == 1) return total(a);
  if (p == 2) return f.sqrt(total(f.mul(a, a)));
  if (std::isinf(p)) return amax(g, a, {last}, false);
  Value s = total(f.pow(a, f.c(a, p)));
  return f.pow(s, f.c(s, 1.0 / p));
}

Value pnorm_grad(ir::Graph& g, Value diff, Value grad, Value dist, double p) {
  Formula f{g};
  if (p == 0) return f.c(diff, 0.0);
  if (p == 1) return f.mul(grad, sign(f, diff));
  Value zero = f.c(diff, 0.0);
  Value at_zero = f.eq(dist, 0.0);
  if (std::isinf(p)) {
    // Only the coordinates attaining the maximum carry the gradient.
    Value hit = f.sub(f.c(diff, 1.0), f.min(f.c(diff, 1.0), f.un(ir::Op::Ceil, f.abs(f.sub(f.abs(diff), dist)))));
    return f.mul(f.mul(grad, sign(f, diff)), hit);
  }
  if (p == 2) return f.sel(at_zero, zero, f.div(f.mul(grad, diff), dist));
  if (p < 2) {
    Value r = f.div(f.mul(f.mul(sign(f, diff), f.pow(f.abs(diff), f.c(diff, p - 1))), grad),
                    f.pow(dist, f.c(dist, p - 1)));
    r = f.sel(at_zero, zero, r);
    if (p < 1) r = f.sel(f.eq(diff, 0.0), zero, r);
    return r;
  }
  Value r = f.div(f.mul(f.mul(diff, f.pow(f.abs(diff), f.c(diff, p - 2))), grad), f.pow(dist, f.c(dist, p - 1)));
  return f.sel(at_zero, zero, r);
}

namespace {
// x1 [B, P, M] and x2 [B, R, M] -> x1_i - x2_j [B, P, R, M].
Value pair_diff(ir::Graph& g, Value x1, Value x2) {
  const ir::Shape a = g.type(x1).shape, b = g.type(x2).shape;
  ir::Shape shape{a[0], a[1], b[1], a[2]};
  return ir::binary(g, ir::Op::Subtract, ir::broadcast_in_dim(g, x1, shape, {0, 1, 3}),
                    ir::broadcast_in_dim(g, x2, shape, {0, 2, 3}));
}
}  // namespace

Value cdist(ir::Graph& g, Value x1, Value x2, double p) { return pnorm_last(g, pair_diff(g, x1, x2), p); }

Value cdist_euclidean_mm(ir::Graph& g, Value x1, Value x2) {
  Formula f{g};
  DType dt = g.type(x1).dtype;
  auto norm_sq = [&](Value x) { return sum(g, f.mul(x, x), {2}, true, dt, dt); };
  auto ones = [&](Value x) {
    ir::Shape s = g.type(x).shape;
    s[2] = 1;
    return ir::full(g, dt, 1, s);
  };
  // [-2 a, |a|^2, 1] . [b, 1, |b|^2] = |a|^2 - 2 a.b + |b|^2, as ATen's _euclidean_dist.
  Value a = ir::concatenate(g, {f.mul(x1, f.c(x1, -2.0)), norm_sq(x1), ones(x1)}, 2);
  Value b = ir::concatenate(g, {x2, ones(x2), norm_sq(x2)}, 2);
  Value r = ir::dot_general(g, a, b, {0}, {0}, {2}, {2}, dt);
  return f.sqrt(f.max(r, f.c(r, 0.0)));
}

Value cdist_backward(ir::Graph& g, Value grad, Value x1, Value x2, double p, Value dist) {
  Value diff = pair_diff(g, x1, x2);
  const ir::Shape shape = g.type(diff).shape;
  Value gb = ir::broadcast_in_dim(g, grad, shape, {0, 1, 2});
  Value db = ir::broadcast_in_dim(g, dist, shape, {0, 1, 2});
  DType dt = g.type(diff).dtype;
  return sum(g, pnorm_grad(g, diff, gb, db, p), {2}, false, dt, dt);
}

Pairs pdist_pairs(ir::Graph& g, int64_t n) {
  Formula f{g};
  int64_t k = n * (n - 1) / 2;
  // Row i's pairs start at i n - i (i + 1) / 2; the row of pair q is the last
  // start <= q, found by binary search (exact integer arithmetic throughout).
  Value i = ir::iota(g, DType::S64, {n}, 0);
  Value start = f.sub(f.mul(i, s64_full(g, n, {n})),
                      f.div(f.mul(i, f.add(i, s64_full(g, 1, {n}))), s64_full(g, 2, {n})));
  Value q = ir::iota(g, DType::S64, {k}, 0);
  Value row = f.sub(search_sorted(g, start, q, /*right=*/true), s64_full(g, 1, {k}));
  Value col = f.add(f.add(f.sub(q, ir::gather_1d(g, start, row)), row), s64_full(g, 1, {k}));
  return {row, col};
}

Value pdist(ir::Graph& g, Value x, double p) {
  const ir::Shape shape = g.type(x).shape;
  Pairs pairs = pdist_pairs(g, shape[0]);
  Value diff = ir::binary(g, ir::Op::Subtract, ir::gather_rows(g, x, pairs.i), ir::gather_rows(g, x, pairs.j));
  return pnorm_last(g, diff, p);
}

Value pdist_backward(ir::Graph& g, Value grad, Value x, double p, Value dist) {
  Formula f{g};
  const ir::Shape shape = g.type(x).shape;
  Pairs pairs = pdist_pairs(g, shape[0]);
  Value diff = f.sub(ir::gather_rows(g, x, pairs.i), ir::gather_rows(g, x, pairs.j));
  const ir::Shape ds = g.type(diff).shape;
  Value r = pnorm_grad(g, diff, ir::broadcast_in_dim(g, grad, ds, {0}), ir::broadcast_in_dim(g, dist, ds, {0}), p);
  // Each pair adds its gradient to row i and subtracts it from row j.
  Value rows = ir::concatenate(g, {pairs.i, pairs.j}, 0);
  Value updates = ir::concatenate(g, {r, f.neg(r)}, 0);
  return ir::scatter_rows(g, ir::full(g, g.type(x).dtype, 0, shape), rows, updates, ir::Combiner::Add);
}

// ------------------------------------------------------------ segment reductions

namespace {

struct Segments {
  Value row;     // s64 [B * L]: the output row b * S + s of each element, or -1
  Value valid;   // pred [B * L]
  Value length;  // s64 [B * S]
  int64_t b, l, s, inner;
};

Segments segments(ir::Graph& g, Value data, Value offsets) {
  Formula f{g};
  const ir::Shape ds = g.type(data).shape, os = g.type(offsets).shape;
  Segments r{{}, {}, {}, ds[0], ds[1], os[1] - 1, ds[2]};
  ir::Shape bl{r.b, r.l};
  Value ends = ir::slice(g, offsets, {0, 1}, {r.b, r.s + 1});
  Value first = ir::broadcast_in_dim(g, ir::reshape(g, ir::slice(g, offsets, {0, 0}, {r.b, 1}), {r.b}), bl, {0});
  Value pos = ir::iota(g, DType::S64, bl, 1);
  // Segment of position l: the number of ends <= l (ends are non-decreasing).
  Value seg = r.s == 0 ? s64_full(g, 0, bl) : search_sorted(g, ends, pos, /*right=*/true);
  Value valid = f.and_(f.ge(pos, first), f.lt(seg, s64_full(g, r.s, bl)));
  Value row = f.add(f.mul(ir::iota(g, DType::S64, bl, 0), s64_full(g, r.s, bl)), seg);
  r.valid = ir::reshape(g, valid, {r.b * r.l});
  r.row = ir::reshape(g, f.sel(valid, row, s64_full(g, -1, bl)), {r.b * r.l});
  r.length = ir::reshape(g, f.sub(ends, ir::slice(g, offsets, {0, 0}, {r.b, r.s})), {r.b * r.s});
  return r;
}

// Per-segment combination of rows [B * L, I] (invalid rows dropped) into [B * S, I] starting from `init`.
Value combine(ir::Graph& g, const Segments& s, Value rows, Value init, ir::Combiner c) {
  return ir::scatter_rows(g, init, s.row, rows, c);
}

// The per-segment value [B * S, I] of each element [B * L, I] (anything for invalid ones).
Value spread(ir::Graph& g, const Segments& s, Value per_segment) {
  Formula f{g};
  Value idx = f.max(s.row, s64_full(g, 0, {s.b * s.l}));
  return ir::gather_rows(g, per_segment, idx);
}

}  // namespace

Value segment_reduce(ir::Graph& g, Value data, Value offsets, SegmentReduce kind, std::optional<Value> initial) {
  Formula f{g};
  DType dt = g.type(data).dtype;
  DType acc = accumulate_dtype(dt);
  Segments s = segments(g, data, offsets);
  ir::Shape out{s.b * s.s, s.inner};
  Value rows = ir::convert(g, ir::reshape(g, data, {s.b * s.l, s.inner}), acc);
  double identity = kind == SegmentReduce::Max   ? -std::numeric_limits<double>::infinity()
                    : kind == SegmentReduce::Min ? std::numeric_limits<double>::infinity()
                    : kind == SegmentReduce::Prod ? 1.0
                                                  : 0.0;
  Value init = initial ? ir::broadcast_in_dim(g, ir::convert(g, *initial, acc), out, {})
                       : ir::full(g, acc, identity, out);
  ir::Combiner c = kind == SegmentReduce::Max   ? ir::Combiner::Max
                   : kind == SegmentReduce::Min ? ir::Combiner::Min
                   : kind == SegmentReduce::Prod ? ir::Combiner::Mul
                                                 : ir::Combiner::Add;
  Value r = combine(g, s, rows, init, c);
  if (kind == SegmentReduce::Max || kind == SegmentReduce::Min) {
    // A NaN element makes its segment NaN, whatever the scatter's max/min does with it.
    Value nan_rows = ir::convert(g, f.isnan(rows), acc);
    Value has_nan = combine(g, s, nan_rows, ir::full(g, acc, 0, out), ir::Combiner::Max);
    r = f.sel(f.gt(has_nan, 0.0), std::numeric_limits<double>::quiet_NaN(), r);
  }
  if (kind == SegmentReduce::Mean) {
    Value len = ir::broadcast_in_dim(g, ir::convert(g, s.length, acc), out, {0});
    Value empty = f.eq(len, 0.0);
    Value divided = f.sel(f.isnan(r), r, f.div(r, len));
    // An empty segment keeps `initial` (undivided), or is NaN without one.
    r = f.sel(empty, initial ? r : f.c(r, std::numeric_limits<double>::quiet_NaN()), divided);
  }
  return ir::convert(g, ir::reshape(g, r, {s.b, s.s, s.inner}), dt);
}

Value segment_reduce_backward(ir::Graph& g, Value grad, Value output, Value data, Value offsets, SegmentReduce kind,
                              std::optional<Value> initial) {
  Formula f{g};
  DType dt = g.type(data).dtype;
  DType acc = accumulate_dtype(dt);
  Segments s = segments(g, data, offsets);
  ir::Shape el{s.b * s.l, s.inner}, seg{s.b * s.s, s.inner};
  Value x = ir::convert(g, ir::reshape(g, data, el), acc);
  Value gs = ir::convert(g, ir::reshape(g, grad, seg), acc);
  Value ge = spread(g, s, gs);
  Value valid = ir::broadcast_in_dim(g, s.valid, el, {0});
  Value zero = ir::full(g, acc, 0, el);
  Value r;
  switch (kind) {
    case SegmentReduce::Sum:
      r = ge;
      break;
    case SegmentReduce::Mean: {
      Value len = ir::broadcast_in_dim(g, ir::convert(g, s.length, acc), seg, {0});
      r = spread(g, s, f.div(gs, len));
      break;
    }
    case SegmentReduce::Max:
    case SegmentReduce::Min: {
      Value oe = spread(g, s, ir::convert(g, ir::reshape(g, output, seg), acc));
      Value hit = f.and_(valid, f.or_(f.isnan(x), f.eq(x, oe)));
      Value count = spread(g, s, combine(g, s, ir::convert(g, hit, acc), ir::full(g, acc, 0, seg), ir::Combiner::Add));
      r = f.sel(hit, ge, zero);
      r = f.sel(f.and_(f.ge(count, 2.0), f.gt(r, 0.0)), f.div(r, count), r);
      break;
    }
    case SegmentReduce::Prod: {
      Value oe = spread(g, s, ir::convert(g, ir::reshape(g, output, seg), acc));
      Value is_nan = f.isnan(x), is_zero = f.eq(x, 0.0);
      Value special = f.or_(is_nan, is_zero);
      // For zeros and NaNs, the product of the other elements of the segment:
      // the product of the ordinary ones (and `initial`), NaN if another is
      // NaN, 0 (times that product) if another is zero.
      Value ones = ir::full(g, acc, 1, seg);
      Value init = initial ? ir::broadcast_in_dim(g, ir::convert(g, *initial, acc), seg, {}) : ones;
      Value ordinary = spread(g, s, combine(g, s, f.sel(special, f.c(x, 1.0), x), init, ir::Combiner::Mul));
      Value nans = spread(g, s, combine(g, s, ir::convert(g, is_nan, acc), ir::full(g, acc, 0, seg), ir::Combiner::Add));
      Value zeros = spread(g, s, combine(g, s, ir::convert(g, is_zero, acc), ir::full(g, acc, 0, seg), ir::Combiner::Add));
      Value other_nan = f.gt(f.sub(nans, ir::convert(g, is_nan, acc)), 0.0);
      Value other_zero = f.gt(f.sub(zeros, ir::convert(g, is_zero, acc)), 0.0);
      Value exclusive = f.sel(other_nan, std::numeric_limits<double>::quiet_NaN(),
                              f.sel(other_zero, f.mul(ordinary, zero), ordinary));
      r = f.sel(special, f.mul(ge, exclusive), f.div(f.mul(ge, oe), x));
      break;
    }
  }
  r = f.sel(valid, r, zero);
  return ir::convert(g, ir::reshape(g, r, {s.b, s.l, s.inner}), dt);
}

}  // namespace tpu::lowering
