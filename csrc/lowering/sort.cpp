#include "lowering/sort.h"

#include <cmath>
#include <limits>

#include "lowering/elementwise.h"
#include "lowering/index.h"
#include "lowering/reduce.h"

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

Value int_full(ir::Graph& g, DType dtype, int64_t v, const ir::Shape& shape) {
  return ir::broadcast_in_dim(g, ir::constant_int(g, dtype, v), shape, {});
}
Value s64_full(ir::Graph& g, int64_t v, const ir::Shape& shape) { return int_full(g, DType::S64, v, shape); }
Value bin(ir::Graph& g, ir::Op op, Value a, Value b) { return ir::binary(g, op, a, b); }
Value cmp(ir::Graph& g, Value a, Value b, ir::Compare c) { return ir::compare(g, a, b, c); }
Value and_(ir::Graph& g, Value a, Value b) { return bin(g, ir::Op::And, a, b); }
Value or_(ir::Graph& g, Value a, Value b) { return bin(g, ir::Op::Or, a, b); }
Value not_(ir::Graph& g, Value a) { return ir::unary(g, ir::Op::Not, a); }

// x along `dim` moved `step` places later (towards higher indices); the first
// `step` places hold `fill` (a scalar of x's dtype).
Value shift_later(ir::Graph& g, Value x, int64_t dim, int64_t step, Value fill) {
  const ir::Shape shape = g.type(x).shape;
  size_t rank = shape.size();
  if (step >= shape[dim]) return ir::broadcast_in_dim(g, fill, shape, {});
  ir::Dims start(rank, 0), limit(shape.begin(), shape.end()), low(rank, 0), high(rank, 0);
  limit[dim] -= step;
  low[dim] = step;
  return ir::pad(g, ir::slice(g, x, start, limit), fill, low, high);
}
// x along `dim` moved `step` places earlier; the last places hold `fill`.
Value shift_earlier(ir::Graph& g, Value x, int64_t dim, int64_t step, Value fill) {
  const ir::Shape shape = g.type(x).shape;
  size_t rank = shape.size();
  if (step >= shape[dim]) return ir::broadcast_in_dim(g, fill, shape, {});
  ir::Dims start(rank, 0), limit(shape.begin(), shape.end()), low(rank, 0), high(rank, 0);
  start[dim] = step;
  high[dim] = step;
  return ir::pad(g, ir::slice(g, x, start, limit), fill, low, high);
}

// An unsigned constant; u64 values past INT64_MAX are the bits of an s64 one.
Value unsigned_full(ir::Graph& g, DType dtype, uint64_t v, const ir::Shape& shape) {
  if (v <= static_cast<uint64_t>(INT64_MAX)) return int_full(g, dtype, static_cast<int64_t>(v), shape);
  return ir::bitcast_convert(g, int_full(g, DType::S64, static_cast<int64_t>(v), shape), dtype, shape);
}

// A scalar of x's dtype (any value) to pad shifts with.
Value zero_of(ir::Graph& g, Value x) { return ir::constant(g, g.type(x).dtype, 0); }

// The high and low u32 halves of a u64 value.
std::pair<Value, Value> halves(ir::Graph& g, Value bits) {
  const ir::Shape shape = g.type(bits).shape;
  Value hi = bin(g, ir::Op::ShiftRightLogical, bits, int_full(g, DType::U64, 32, shape));
  Value lo = and_(g, bits, int_full(g, DType::U64, 0xffffffffLL, shape));
  return {ir::convert(g, hi, DType::U32), ir::convert(g, lo, DType::U32)};
}

// Order-preserving unsigned keys of IEEE floats of `width` bits, from their
// bits (u32 for widths up to 32, u64 for 64), with integer operations only:
// float comparisons may treat subnormals as zero (XLA:CPU flushes them),
// which would reorder them. -0.0 becomes +0.0 and every NaN one key above
// +inf; negatives flip their `width` bits, positives set the sign bit.
Value float_key(ir::Graph& g, Value bits, int width) {
  const ir::Type t = g.type(bits);
  auto c = [&](uint64_t v) { return unsigned_full(g, t.dtype, v, t.shape); };
  uint64_t sign = uint64_t{1} << (width - 1);
  uint64_t all = width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
  Value magnitude = and_(g, bits, c(all & ~sign));
  Value negative = cmp(g, and_(g, bits, c(sign)), c(0), ir::Compare::NE);
  Value zero = cmp(g, magnitude, c(0), ir::Compare::EQ);
  Value key = ir::select(g, negative, bin(g, ir::Op::Xor, bits, c(all)), or_(g, bits, c(sign)));
  return ir::select(g, zero, c(sign), key);
}

// The key of every NaN: above the key of +inf (`inf_bits` | sign).
Value nan_to_top(ir::Graph& g, Value key, Value bits, int width, uint64_t inf_bits) {
  const ir::Type t = g.type(bits);
  auto c = [&](uint64_t v) { return unsigned_full(g, t.dtype, v, t.shape); };
  uint64_t sign = uint64_t{1} << (width - 1);
  Value magnitude = and_(g, bits, c(~sign & (width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1)));
  Value nan = cmp(g, magnitude, c(inf_bits), ir::Compare::GT);
  return ir::select(g, nan, c(sign | inf_bits | 1), key);
}

Value float_bits_key(ir::Graph& g, Value bits, int width, uint64_t inf_bits) {
  return nan_to_top(g, float_key(g, bits, width), bits, width, inf_bits);
}

}  // namespace

std::vector<Value> sort_digits(ir::Graph& g, Value x) {
  const ir::Type t = g.type(x);
  const ir::Shape& shape = t.shape;
  switch (t.dtype) {
    case DType::Pred: case DType::U8: case DType::U16: case DType::U32:
      return {ir::convert(g, x, DType::U32)};
    case DType::S8: case DType::S16: case DType::S32: {
      Value bits = ir::bitcast_convert(g, ir::convert(g, x, DType::S32), DType::U32, shape);
      return {bin(g, ir::Op::Xor, bits, int_full(g, DType::U32, 0x80000000LL, shape))};
    }
    case DType::F16: case DType::BF16: {
      Value bits = ir::convert(g, ir::bitcast_convert(g, x, DType::U16, shape), DType::U32);
      return {float_bits_key(g, bits, 16, t.dtype == DType::F16 ? 0x7c00 : 0x7f80)};
    }
    case DType::F32:
      return {float_bits_key(g, ir::bitcast_convert(g, x, DType::U32, shape), 32, 0x7f800000)};
    case DType::U64: {
      auto [hi, lo] = halves(g, x);
      return {hi, lo};
    }
    case DType::S64: {
      auto [hi, lo] = halves(g, ir::bitcast_convert(g, x, DType::U64, shape));
      return {bin(g, ir::Op::Xor, hi, int_full(g, DType::U32, 0x80000000LL, shape)), lo};
    }
    case DType::F64: {
      Value key = float_bits_key(g, ir::bitcast_convert(g, x, DType::U64, shape), 64, 0x7ff0000000000000ULL);
      auto [hi, lo] = halves(g, key);
      return {hi, lo};
    }
    case DType::C64: case DType::C128:  // complex numbers have no order
      break;
  }
  throw std::invalid_argument("sort: unsupported element type");
}

Value sort_indices(ir::Graph& g, Value x, int64_t dim, bool descending) {
  const ir::Shape shape = g.type(x).shape;
  if (shape.empty()) return s64_full(g, 0, {});
  std::vector<Value> digits = sort_digits(g, x);
  Value position = ir::iota(g, DType::U64, shape, dim);
  Value thirty_two = int_full(g, DType::U64, 32, shape);
  Value low_mask = int_full(g, DType::U64, 0xffffffffLL, shape);
  Value perm;
  // Least significant digit first: each pass is stable, so earlier passes
  // break the ties of later ones.
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    Value key = descending ? not_(g, *it) : *it;
    if (perm.valid()) key = gather_dim(g, key, dim, perm);
    Value packed = or_(g, bin(g, ir::Op::ShiftLeft, ir::convert(g, key, DType::U64), thirty_two), position);
    Value sorted = ir::sort(g, packed, dim, ir::Combiner::LessThan);
    Value p = ir::convert(g, and_(g, sorted, low_mask), DType::S64);
    perm = perm.valid() ? gather_dim(g, perm, dim, p) : p;
  }
  return perm;
}

ValuesIndices sort(ir::Graph& g, Value x, int64_t dim, bool descending) {
  if (g.type(x).shape.empty()) return {x, s64_full(g, 0, {})};
  Value indices = sort_indices(g, x, dim, descending);
  return {gather_dim(g, x, dim, indices), indices};
}

namespace {

// The slice [start, start + size) of x along dim.
Value slice_dim(ir::Graph& g, Value x, int64_t dim, int64_t start, int64_t size) {
  const ir::Shape shape = g.type(x).shape;
  ir::Dims lo(shape.size(), 0), hi(shape.begin(), shape.end());
  lo[dim] = start;
  hi[dim] = start + size;
  return ir::slice(g, x, lo, hi);
}

ir::Shape without(const ir::Shape& shape, int64_t dim) {
  ir::Shape s = shape;
  s.erase(s.begin() + dim);
  return s;
}

// x's elements at per-row positions `pos` (s64, x's shape without dim) along dim.
Value pick(ir::Graph& g, Value x, int64_t dim, Value pos) {
  ir::Shape kept = g.type(x).shape;
  kept[dim] = 1;
  Value r = gather_dim(g, x, dim, ir::reshape(g, pos, kept));
  return ir::reshape(g, r, without(kept, dim));
}

Value row_reduce(ir::Graph& g, Value x, int64_t dim, DType dtype, int64_t init, ir::Combiner c) {
  return ir::reduce(g, x, ir::constant_int(g, dtype, init), {dim}, c);
}

}  // namespace

ValuesIndices topk(ir::Graph& g, Value x, int64_t k, int64_t dim, bool largest) {
  if (g.type(x).shape.empty()) return {x, s64_full(g, 0, {})};
  ValuesIndices s = sort(g, x, dim, largest);
  return {slice_dim(g, s.values, dim, 0, k), slice_dim(g, s.indices, dim, 0, k)};
}

ValuesIndices kthvalue(ir::Graph& g, Value x, int64_t k, int64_t dim) {
  if (g.type(x).shape.empty()) return {x, s64_full(g, 0, {})};
  ValuesIndices s = sort(g, x, dim, false);
  ir::Shape out = without(g.type(x).shape, dim);
  return {ir::reshape(g, slice_dim(g, s.values, dim, k - 1, 1), out),
          ir::reshape(g, slice_dim(g, s.indices, dim, k - 1, 1), out)};
}

ValuesIndices median(ir::Graph& g, Value x, int64_t dim, bool ignore_nan) {
  const ir::Shape shape = g.type(x).shape;
  if (shape.empty()) return {x, s64_full(g, 0, {})};
  ValuesIndices s = sort(g, x, dim, false);
  int64_t n = shape[dim];
  ir::Shape out = without(shape, dim);
  Value pos = s64_full(g, (n - 1) / 2, out);
  if (ir::is_floating(g.type(x).dtype)) {
    // NaNs sort last: nan_count of them end each row.
    Value nans = row_reduce(g, ir::convert(g, is_nan(g, x), DType::S64), dim, DType::S64, 0, ir::Combiner::Add);
    Value finite = bin(g, ir::Op::Subtract, s64_full(g, n, out), nans);
    if (ignore_nan) {
      Value half = bin(g, ir::Op::Divide, bin(g, ir::Op::Subtract, finite, s64_full(g, 1, out)),
                       s64_full(g, 2, out));
      pos = ir::select(g, cmp(g, finite, s64_full(g, 0, out), ir::Compare::GT), half, s64_full(g, 0, out));
    } else {
      pos = ir::select(g, cmp(g, nans, s64_full(g, 0, out), ir::Compare::GT), finite, pos);
    }
  }
  return {pick(g, s.values, dim, pos), pick(g, s.indices, dim, pos)};
}

ValuesIndices mode(ir::Graph& g, Value x, int64_t dim) {
  const ir::Shape shape = g.type(x).shape;
  if (shape.empty()) return {x, s64_full(g, 0, {})};
  ValuesIndices s = sort(g, x, dim, false);
  int64_t n = shape[dim];
  ir::Shape out = without(shape, dim);
  Value v = s.values;
  Value i = ir::iota(g, DType::S64, shape, dim);
  Value start = or_(g, cmp(g, v, shift_later(g, v, dim, 1, zero_of(g, v)), ir::Compare::NE),
                    cmp(g, i, s64_full(g, 0, shape), ir::Compare::EQ));
  Value end = or_(g, cmp(g, v, shift_earlier(g, v, dim, 1, zero_of(g, v)), ir::Compare::NE),
                  cmp(g, i, s64_full(g, n - 1, shape), ir::Compare::EQ));
  // Where each element's run starts: a running max of the start positions.
  Value run_start = ir::select(g, start, i, s64_full(g, 0, shape));
  for (int64_t step = 1; step < n; step *= 2)
    run_start = bin(g, ir::Op::Maximum, run_start,
                    shift_later(g, run_start, dim, step, ir::constant_int(g, DType::S64, 0)));
  Value length = bin(g, ir::Op::Add, bin(g, ir::Op::Subtract, i, run_start), s64_full(g, 1, shape));
  Value score = ir::select(g, end, length, s64_full(g, 0, shape));
  Value best = row_reduce(g, score, dim, DType::S64, 0, ir::Combiner::Max);
  Value is_best = cmp(g, score, ir::broadcast_in_dim(g, best, shape, [&] {
                        ir::Dims d;
                        for (int64_t j = 0; j < static_cast<int64_t>(shape.size()); ++j)
                          if (j != dim) d.push_back(j);
                        return d;
                      }()),
                      ir::Compare::EQ);
  // The first (smallest value) of the most frequent runs.
  Value pos = row_reduce(g, ir::select(g, is_best, i, s64_full(g, n, shape)), dim, DType::S64, n, ir::Combiner::Min);
  return {pick(g, v, dim, pos), pick(g, s.indices, dim, pos)};
}

ValuesIndices cum_extreme(ir::Graph& g, Value x, int64_t dim, bool is_max) {
  const ir::Shape shape = g.type(x).shape;
  if (shape.empty()) return {x, s64_full(g, 0, {})};
  int64_t n = shape[dim];
  Value v = x;
  Value i = ir::iota(g, DType::S64, shape, dim);
  Value idx = i;
  // Hillis-Steele over (value, index) pairs: the later one wins when it is
  // NaN, or when neither is NaN and it is >= (<=) the earlier one.
  for (int64_t step = 1; step < n; step *= 2) {
    Value pv = shift_later(g, v, dim, step, zero_of(g, v));
    Value pi = shift_later(g, idx, dim, step, ir::constant_int(g, DType::S64, 0));
    Value no_earlier = cmp(g, i, s64_full(g, step, shape), ir::Compare::LT);
    Value better = cmp(g, v, pv, is_max ? ir::Compare::GE : ir::Compare::LE);
    Value later = or_(g, no_earlier, or_(g, is_nan(g, v), and_(g, not_(g, is_nan(g, pv)), better)));
    v = ir::select(g, later, v, pv);
    idx = ir::select(g, later, idx, pi);
  }
  return {v, idx};
}

Value logcumsumexp(ir::Graph& g, Value x, int64_t dim) {
  const ir::Shape shape = g.type(x).shape;
  DType dtype = g.type(x).dtype;
  DType acc = dtype == DType::F16 || dtype == DType::BF16 ? DType::F32 : dtype;
  Value v = ir::convert(g, x, acc);
  if (shape.empty()) return x;
  Value minus_inf = ir::constant(g, acc, -std::numeric_limits<double>::infinity());
  for (int64_t step = 1; step < shape[dim]; step *= 2) {
    Value p = shift_later(g, v, dim, step, minus_inf);
    Value hi = nan_max(g, v, p);
    Value lo = bin(g, ir::Op::Minimum, v, p);
    Value r = bin(g, ir::Op::Add, hi,
                  ir::unary(g, ir::Op::LogPlusOne,
                            ir::unary(g, ir::Op::Exponential, bin(g, ir::Op::Subtract, lo, hi))));
    // Infinite maxima (both -inf, or +inf) are the result as they are.
    Value inf = splat(g, hi, std::numeric_limits<double>::infinity());
    v = ir::select(g, cmp(g, ir::unary(g, ir::Op::Abs, hi), inf, ir::Compare::EQ), hi, r);
  }
  return ir::convert(g, v, dtype);
}

Value search_sorted(ir::Graph& g, Value sorted, Value values, bool right) {
  const ir::Shape sshape = g.type(sorted).shape;
  const ir::Shape vshape = g.type(values).shape;
  int64_t m = sshape.empty() ? 1 : sshape.back();
  if (m == 0) return s64_full(g, 0, vshape);
  Value flat = ir::reshape(g, sorted, {ir::numel(sshape)});
  Value base = s64_full(g, 0, vshape);
  if (sshape.size() > 1) {
    // Row r of `sorted` serves the values of row r: flat position / N.
    int64_t n = vshape.back();
    int64_t count = ir::numel(vshape);
    Value row = bin(g, ir::Op::Divide, ir::iota(g, DType::S64, {count}, 0), s64_full(g, n, {count}));
    base = ir::reshape(g, bin(g, ir::Op::Multiply, row, s64_full(g, m, {count})), vshape);
  }
  Value lo = s64_full(g, 0, vshape), hi = s64_full(g, m, vshape);
  Value one = s64_full(g, 1, vshape), two = s64_full(g, 2, vshape);
  for (int64_t span = m; span > 0; span /= 2) {
    Value mid = bin(g, ir::Op::Divide, bin(g, ir::Op::Add, lo, hi), two);
    Value at = bin(g, ir::Op::Add, base, clamp_index(g, mid, m));
    Value boundary = ir::reshape(g, ir::gather_rows(g, flat, ir::reshape(g, at, vshape)), vshape);
    // ATen's lower/upper bound: go right while !(boundary >= v) (right: !(boundary > v)).
    Value go_right = not_(g, cmp(g, boundary, values, right ? ir::Compare::GT : ir::Compare::GE));
    Value active = cmp(g, lo, hi, ir::Compare::LT);
    lo = ir::select(g, and_(g, active, go_right), bin(g, ir::Op::Add, mid, one), lo);
    hi = ir::select(g, and_(g, active, not_(g, go_right)), mid, hi);
  }
  return lo;
}

Runs runs(ir::Graph& g, Value flat, bool sort_first) {
  int64_t n = g.type(flat).shape.at(0);
  Runs r;
  if (sort_first) {
    ValuesIndices s = sort(g, flat, 0, false);
    r.values = s.values;
    r.order = s.indices;
  } else {
    r.values = flat;
    r.order = ir::iota(g, DType::S64, {n}, 0);
  }
  Value i = ir::iota(g, DType::S64, {n}, 0);
  r.first = or_(g, cmp(g, r.values, shift_later(g, r.values, 0, 1, zero_of(g, r.values)), ir::Compare::NE),
                cmp(g, i, s64_full(g, 0, {n}), ir::Compare::EQ));
  return r;
}

Value run_count(ir::Graph& g, const Runs& r) {
  return ir::reduce(g, ir::convert(g, r.first, DType::S64), ir::constant_int(g, DType::S64, 0), {0},
                    ir::Combiner::Add);
}

RunResults run_results(ir::Graph& g, const Runs& r, int64_t count) {
  int64_t n = g.type(r.values).shape.at(0);
  Value id = bin(g, ir::Op::Subtract, prefix_sum(g, ir::convert(g, r.first, DType::S64)), s64_full(g, 1, {n}));
  RunResults out;
  Value firsts = ir::select(g, r.first, id, s64_full(g, -1, {n}));
  out.values = ir::scatter_rows(g, ir::full(g, g.type(r.values).dtype, 0, {count}), firsts, r.values,
                                ir::Combiner::Replace);
  out.inverse = ir::scatter_rows(g, s64_full(g, 0, {n}), r.order, id, ir::Combiner::Replace);
  out.counts = ir::scatter_rows(g, s64_full(g, 0, {count}), id, s64_full(g, 1, {n}), ir::Combiner::Add);
  return out;
}

Value isin(ir::Graph& g, Value elements, Value test) {
  const ir::Shape eshape = g.type(elements).shape;
  int64_t m = ir::numel(g.type(test).shape);
  if (m == 0) return ir::full(g, DType::Pred, 0, eshape);
  // Binary search over the sort keys: unlike float comparisons they order
  // NaNs (last) and subnormals consistently with the sort.
  Value flat = ir::reshape(g, test, {m});
  Value perm = sort_indices(g, flat, 0, false);
  std::vector<Value> keys = sort_digits(g, flat), wanted = sort_digits(g, elements);
  for (Value& k : keys) k = ir::gather_rows(g, k, perm);
  Value lo = s64_full(g, 0, eshape), hi = s64_full(g, m, eshape);
  Value one = s64_full(g, 1, eshape), two = s64_full(g, 2, eshape);
  auto at = [&](Value key, Value pos) {
    return ir::reshape(g, ir::gather_rows(g, key, ir::reshape(g, clamp_index(g, pos, m), eshape)), eshape);
  };
  for (int64_t span = m; span > 0; span /= 2) {
    Value mid = bin(g, ir::Op::Divide, bin(g, ir::Op::Add, lo, hi), two);
    // Lexicographic key[mid] < wanted, most significant digit first.
    Value less = ir::full(g, DType::Pred, 0, eshape);
    for (size_t d = keys.size(); d-- > 0;) {
      Value b = at(keys[d], mid);
      less = or_(g, cmp(g, b, wanted[d], ir::Compare::LT), and_(g, cmp(g, b, wanted[d], ir::Compare::EQ), less));
    }
    Value active = cmp(g, lo, hi, ir::Compare::LT);
    lo = ir::select(g, and_(g, active, less), bin(g, ir::Op::Add, mid, one), lo);
    hi = ir::select(g, and_(g, active, not_(g, less)), mid, hi);
  }
  Value found = cmp(g, lo, s64_full(g, m, eshape), ir::Compare::LT);
  for (size_t d = 0; d < keys.size(); ++d) found = and_(g, found, cmp(g, at(keys[d], lo), wanted[d], ir::Compare::EQ));
  return and_(g, found, not_(g, is_nan(g, elements)));  // NaN is in nothing
}

// ------------------------------------------------------------ histograms

Value bin_counts(ir::Graph& g, Value bin, std::optional<Value> weight, int64_t bins, DType dtype) {
  int64_t n = g.type(bin).shape.at(0);
  Value zeros = ir::full(g, dtype, 0, {bins});
  if (n == 0 || bins == 0) return zeros;
  Value w = weight ? ir::convert(g, *weight, dtype) : ir::full(g, dtype, 1, {n});
  return ir::scatter_rows(g, zeros, bin, w, ir::Combiner::Add);
}

Value edge_bin(ir::Graph& g, Value x, Value edges) {
  int64_t n = g.type(x).shape.at(0);
  int64_t e = g.type(edges).shape.at(0);
  Value first = ir::broadcast_in_dim(g, ir::reshape(g, ir::slice(g, edges, {0}, {1}), {}), {n}, {});
  Value last = ir::broadcast_in_dim(g, ir::reshape(g, ir::slice(g, edges, {e - 1}, {e}), {}), {n}, {});
  Value pos = bin(g, ir::Op::Subtract, search_sorted(g, edges, x, /*right=*/true), s64_full(g, 1, {n}));
  pos = bin(g, ir::Op::Minimum, pos, s64_full(g, e - 2, {n}));  // x == last edge: the last bin
  Value inside = and_(g, cmp(g, x, first, ir::Compare::GE), cmp(g, x, last, ir::Compare::LE));
  return ir::select(g, inside, pos, s64_full(g, -1, {n}));
}

ir::Value histc(ir::Graph& g, ir::Value x, int64_t bins, ir::Value left, ir::Value right, bool data_range) {
  ir::DType acc = g.type(x).dtype;
  const bool integral = acc == ir::DType::S64;
  int64_t n = g.type(x).shape[0];
  if (data_range) {
    // The data's finite range (NaNs ignored, as ATen's aminmax of the input).
    if (integral) {
      left = amin(g, x, {0}, false);
      right = amax(g, x, {0}, false);
    } else {
      ir::Value nan = is_nan(g, x);
      ir::Value inf = ir::full(g, acc, std::numeric_limits<double>::infinity(), {n});
      ir::Value minus_inf = ir::full(g, acc, -std::numeric_limits<double>::infinity(), {n});
      left = ir::reduce(g, ir::select(g, nan, inf, x), ir::constant(g, acc, INFINITY), {0}, ir::Combiner::Min);
      right = ir::reduce(g, ir::select(g, nan, minus_inf, x), ir::constant(g, acc, -INFINITY), {0},
                         ir::Combiner::Max);
    }
    ir::Value same = ir::compare(g, left, right, ir::Compare::EQ);
    ir::Value one = ir::constant(g, acc, 1);
    left = ir::select(g, same, ir::binary(g, ir::Op::Subtract, left, one), left);
    right = ir::select(g, same, ir::binary(g, ir::Op::Add, right, one), right);
  }
  ir::Value l = ir::broadcast_in_dim(g, left, {n}, {}), r = ir::broadcast_in_dim(g, right, {n}, {});
  ir::Value nb = ir::full(g, acc, static_cast<double>(bins), {n});
  ir::Value scaled = ir::binary(g, ir::Op::Divide,
                                ir::binary(g, ir::Op::Multiply, ir::binary(g, ir::Op::Subtract, x, l), nb),
                                ir::binary(g, ir::Op::Subtract, r, l));
  // Integer division truncates; below `left` (where that differs from floor) is outside anyway.
  ir::Value pos = ir::convert(g, integral ? scaled : unary(g, Unary::Floor, scaled), ir::DType::S64);
  pos = ir::binary(g, ir::Op::Minimum, pos, s64_full(g, bins - 1, {n}));
  ir::Value inside = ir::binary(g, ir::Op::And, ir::compare(g, x, l, ir::Compare::GE),
                                ir::compare(g, x, r, ir::Compare::LE));
  pos = ir::select(g, inside, pos, s64_full(g, -1, {n}));
  return bin_counts(g, pos, std::nullopt, bins, acc);
}

}  // namespace tpu::lowering
