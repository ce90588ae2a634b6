#include "lowering/reduce.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

// The identity of max (lowest = true) or min in `dtype`.
Value extreme(ir::Graph& g, DType dtype, bool lowest) {
  switch (dtype) {
    case DType::Pred: return ir::constant_int(g, dtype, lowest ? 0 : 1);
    case DType::S8: return ir::constant_int(g, dtype, lowest ? INT8_MIN : INT8_MAX);
    case DType::S16: return ir::constant_int(g, dtype, lowest ? INT16_MIN : INT16_MAX);
    case DType::S32: return ir::constant_int(g, dtype, lowest ? INT32_MIN : INT32_MAX);
    case DType::S64: return ir::constant_int(g, dtype, lowest ? INT64_MIN : INT64_MAX);
    case DType::U8: return ir::constant_int(g, dtype, lowest ? 0 : UINT8_MAX);
    case DType::U16: return ir::constant_int(g, dtype, lowest ? 0 : UINT16_MAX);
    case DType::U32: return ir::constant_int(g, dtype, lowest ? 0 : static_cast<int64_t>(UINT32_MAX));
    case DType::U64:
      // 2^64-1 has no int64 literal: the bits of -1.
      if (lowest) return ir::constant_int(g, dtype, 0);
      return ir::bitcast_convert(g, ir::constant_int(g, DType::S64, -1), DType::U64, {});
    default:
      return ir::constant(g, dtype, lowest ? -std::numeric_limits<double>::infinity()
                                           : std::numeric_limits<double>::infinity());
  }
}

Value finish(ir::Graph& g, Value r, const ir::Shape& shape, const ir::Dims& dims, bool keepdim) {
  return keepdim ? keep_dims(g, r, shape, dims) : r;
}

Value full_like(ir::Graph& g, Value x, double v) { return ir::full(g, g.type(x).dtype, v, g.type(x).shape); }

Value truth(ir::Graph& g, Value x) {
  if (g.type(x).dtype == DType::Pred) return x;
  return ir::compare(g, x, full_like(g, x, 0), ir::Compare::NE);
}

}  // namespace

DType accumulate_dtype(DType t) {
  return t == DType::F16 || t == DType::BF16 ? DType::F32 : t;
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t extent = std::max<int64_t>(rank, 1);
  TORCH_CHECK_INDEX(dim >= -extent && dim < extent, "Dimension out of range (expected to be in range of [",
                    -extent, ", ", extent - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + extent : dim;
}

ir::Dims reduction_dims(const ir::Dims& dims, int64_t rank) {
  ir::Dims out;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) {
    int64_t wrapped = wrap_dim(d, rank);
    if (rank == 0) continue;  // reducing a 0-dim tensor over dim 0/-1 is the identity
    out.push_back(wrapped);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

ir::Shape reduced_shape(const ir::Shape& input, const ir::Dims& dims, bool keepdim) {
  ir::Shape shape;
  for (int64_t i = 0; i < static_cast<int64_t>(input.size()); ++i) {
    bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced)
      shape.push_back(input[i]);
    else if (keepdim)
      shape.push_back(1);
  }
  return shape;
}

int64_t reduced_count(const ir::Shape& input, const ir::Dims& dims) {
  int64_t count = 1;
  for (int64_t d : dims) count *= input[d];
  return count;
}

Value keep_dims(ir::Graph& g, Value reduced, const ir::Shape& input_shape, const ir::Dims& dims) {
  ir::Shape shape = input_shape;
  for (int64_t d : dims) shape[d] = 1;
  return ir::reshape(g, reduced, shape);
}

Value expand_reduced(ir::Graph& g, Value reduced, const ir::Shape& shape, const ir::Dims& dims) {
  ir::Shape kept = reduced_shape(shape, dims, false);
  Value r = ir::reshape(g, reduced, kept);
  ir::Dims map;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) map.push_back(i);
  return ir::broadcast_in_dim(g, r, shape, map);
}

// x folded over `dims` with `combiner` from `init` (booleans use `pred_combiner`),
// accumulated in `accumulate`, returned in `result`.
static Value fold(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim, DType accumulate, DType result, double init,
           ir::Combiner combiner, ir::Combiner pred_combiner) {
  ir::Shape shape = g.type(x).shape;
  Value acc = ir::convert(g, x, accumulate);
  Value r = ir::reduce(g, acc, ir::constant(g, accumulate, init), dims,
                       accumulate == DType::Pred ? pred_combiner : combiner);
  return ir::convert(g, finish(g, r, shape, dims, keepdim), result);
}

Value sum(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim, DType accumulate, DType result) {
  return fold(g, x, dims, keepdim, accumulate, result, 0, ir::Combiner::Add, ir::Combiner::Or);
}

Value mean(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim, DType accumulate, DType result) {
  int64_t count = reduced_count(g.type(x).shape, dims);
  Value s = sum(g, x, dims, keepdim, accumulate, accumulate);
  // count == 0 gives 0/0 = NaN, as in ATen.
  Value n = full_like(g, s, static_cast<double>(count));
  return ir::convert(g, ir::binary(g, ir::Op::Divide, s, n), result);
}

Value prod(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim, DType accumulate, DType result) {
  return fold(g, x, dims, keepdim, accumulate, result, 1, ir::Combiner::Mul, ir::Combiner::And);
}

namespace {

// Max or min over dims. XLA's reduce max/min may drop NaNs (XLA:CPU does),
// while ATen propagates them: a NaN anywhere in a slice makes its result NaN.
Value extremum(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim, bool is_max) {
  const ir::Type t = g.type(x);
  ir::Combiner combiner = t.dtype == DType::Pred ? (is_max ? ir::Combiner::Or : ir::Combiner::And)
                                                 : (is_max ? ir::Combiner::Max : ir::Combiner::Min);
  Value r = ir::reduce(g, x, extreme(g, t.dtype, is_max), dims, combiner);
  if (ir::is_floating(t.dtype)) {
    Value has_nan = ir::reduce(g, ir::compare(g, x, x, ir::Compare::NE), ir::constant_int(g, DType::Pred, 0), dims,
                               ir::Combiner::Or);
    r = ir::select(g, has_nan, full_like(g, r, std::numeric_limits<double>::quiet_NaN()), r);
  }
  return finish(g, r, t.shape, dims, keepdim);
}

}  // namespace

Value amax(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim) { return extremum(g, x, dims, keepdim, true); }
Value shift_max(ir::Graph& g, Value x, const ir::Dims& dims) {
  const ir::Type t = g.type(x);
  return finish(g, ir::reduce(g, x, extreme(g, t.dtype, true), dims, ir::Combiner::Max), t.shape, dims, false);
}
Value amin(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim) { return extremum(g, x, dims, keepdim, false); }

Value arg_extreme(ir::Graph& g, Value x, std::optional<int64_t> dim, bool keepdim, bool is_max) {
  const ir::Type t = g.type(x);
  int64_t d = 0;
  Value v = x;
  if (dim.has_value() && t.rank() > 0) {
    d = *dim;
  } else {
    v = ir::reshape(g, x, {ir::numel(t.shape)});  // flat index, as ATen's dim=None
  }
  const ir::Shape shape = g.type(v).shape;
  ir::Dims dims{d};
  Value m = expand_reduced(g, is_max ? amax(g, v, dims, false) : amin(g, v, dims, false), shape, dims);
  // A NaN is the extreme and only NaNs compare unequal to themselves: an
  // extreme equal to x, or a NaN x, marks a candidate.
  Value hit = ir::compare(g, v, m, ir::Compare::EQ);
  if (ir::is_floating(t.dtype))
    hit = ir::binary(g, ir::Op::Or, hit, ir::compare(g, v, v, ir::Compare::NE));
  Value index = ir::iota(g, DType::S64, shape, d);
  Value none = ir::full(g, DType::S64, static_cast<double>(shape[d]), shape);
  Value first = ir::reduce(g, ir::select(g, hit, index, none), ir::constant_int(g, DType::S64, INT64_MAX), dims,
                           ir::Combiner::Min);
  if (!keepdim) return first;
  if (dim.has_value() && t.rank() > 0) return keep_dims(g, first, shape, dims);
  return ir::reshape(g, first, ir::Shape(t.rank(), 1));
}

Value all(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim) {
  ir::Shape shape = g.type(x).shape;
  Value r = ir::reduce(g, truth(g, x), ir::constant_int(g, DType::Pred, 1), dims, ir::Combiner::And);
  return finish(g, r, shape, dims, keepdim);
}

Value any(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim) {
  ir::Shape shape = g.type(x).shape;
  Value r = ir::reduce(g, truth(g, x), ir::constant_int(g, DType::Pred, 0), dims, ir::Combiner::Or);
  return finish(g, r, shape, dims, keepdim);
}

Moments moments(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim, double correction, DType result) {
  const ir::Shape shape = g.type(x).shape;
  DType acc = accumulate_dtype(g.type(x).dtype);
  Value xa = ir::convert(g, x, acc);
  Value mu = mean(g, xa, dims, false, acc, acc);
  Value centered = ir::binary(g, ir::Op::Subtract, xa, expand_reduced(g, mu, shape, dims));
  Value sq = sum(g, ir::binary(g, ir::Op::Multiply, centered, centered), dims, false, acc, acc);
  // ATen divides by max(N - correction, 0): a non-positive divisor gives inf/NaN.
  double divisor = std::max(0.0, static_cast<double>(reduced_count(shape, dims)) - correction);
  Value var = ir::binary(g, ir::Op::Divide, sq, full_like(g, sq, divisor));
  return {ir::convert(g, finish(g, var, shape, dims, keepdim), result),
          ir::convert(g, finish(g, mu, shape, dims, keepdim), result)};
}

Value logsumexp(ir::Graph& g, Value x, const ir::Dims& dims, bool keepdim, DType result) {
  const ir::Shape shape = g.type(x).shape;
  DType acc = accumulate_dtype(result);
  Value xa = ir::convert(g, x, acc);
  Value m = shift_max(g, xa, dims);
  Value inf = full_like(g, m, std::numeric_limits<double>::infinity());
  Value is_inf = ir::compare(g, ir::unary(g, ir::Op::Abs, m), inf, ir::Compare::EQ);
  m = ir::select(g, is_inf, full_like(g, m, 0), m);
  Value shifted = ir::binary(g, ir::Op::Subtract, xa, expand_reduced(g, m, shape, dims));
  Value s = sum(g, ir::unary(g, ir::Op::Exponential, shifted), dims, false, acc, acc);
  Value r = ir::binary(g, ir::Op::Add, ir::unary(g, ir::Op::Log, s), m);
  return ir::convert(g, finish(g, r, shape, dims, keepdim), result);
}

Value vector_norm(ir::Graph& g, Value x, double ord, const ir::Dims& dims, bool keepdim, DType result) {
  const ir::Shape shape = g.type(x).shape;
  DType acc = accumulate_dtype(result);
  Value xa = ir::convert(g, x, acc);
  Value a = ir::unary(g, ir::Op::Abs, xa);
  Value r;
  if (std::isinf(ord)) {
    r = ord > 0 ? amax(g, a, dims, false) : amin(g, a, dims, false);
  } else if (ord == 0) {
    r = sum(g, ir::convert(g, truth(g, xa), acc), dims, false, acc, acc);
  } else if (ord == 1) {
    r = sum(g, a, dims, false, acc, acc);
  } else if (ord == 2) {
    r = ir::unary(g, ir::Op::Sqrt, sum(g, ir::binary(g, ir::Op::Multiply, xa, xa), dims, false, acc, acc));
  } else {
    Value p = ir::binary(g, ir::Op::Power, a, full_like(g, a, ord));
    Value s = sum(g, p, dims, false, acc, acc);
    r = ir::binary(g, ir::Op::Power, s, full_like(g, s, 1.0 / ord));
  }
  return ir::convert(g, finish(g, r, shape, dims, keepdim), result);
}

Value cumulative(ir::Graph& g, Value x, int64_t dim, ir::Combiner combiner, DType result) {
  DType acc = accumulate_dtype(result);
  Value v = ir::convert(g, x, acc);
  const ir::Shape shape = g.type(v).shape;
  if (shape.empty()) return ir::convert(g, v, result);
  ir::Op op = combiner == ir::Combiner::Mul ? ir::Op::Multiply : ir::Op::Add;
  Value identity = ir::constant(g, acc, combiner == ir::Combiner::Mul ? 1 : 0);
  int64_t n = shape[dim];
  size_t rank = shape.size();
  // Hillis-Steele: after step k every element combines the 2^k elements up to it.
  for (int64_t step = 1; step < n; step *= 2) {
    ir::Dims start(rank, 0), limit(shape.begin(), shape.end()), low(rank, 0), high(rank, 0);
    limit[dim] = n - step;
    low[dim] = step;
    Value shifted = ir::pad(g, ir::slice(g, v, start, limit), identity, low, high);
    v = ir::binary(g, op, v, shifted);
  }
  return ir::convert(g, v, result);
}

ir::Value all_finite(ir::Graph& g, ir::Value x) {
  const ir::Shape shape = g.type(x).shape;
  ir::Value finite = g.add(ir::Op::IsFinite, {x}, ir::Type{ir::DType::Pred, shape});
  return ir::reduce(g, finite, ir::constant(g, ir::DType::Pred, 1),
                    reduction_dims({}, static_cast<int64_t>(shape.size())), ir::Combiner::And);
}

}  // namespace tpu::lowering
