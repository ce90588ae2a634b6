#include "lowering/conv.h"

#include <algorithm>
#include <limits>

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

ir::Dims ones(size_t n) { return ir::Dims(n, 1); }

Value add(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Add, a, b); }
Value mul(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Multiply, a, b); }
Value div(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Divide, a, b); }
Value land(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::And, a, b); }
Value lor(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Or, a, b); }
// a * x + b elementwise for integer constants (index arithmetic).
Value affine(ir::Graph& g, Value x, int64_t a, int64_t b) {
  const ir::Type& t = g.type(x);
  Value r = a == 1 ? x : mul(g, x, ir::broadcast_in_dim(g, ir::constant_int(g, t.dtype, a), t.shape, {}));
  return b == 0 ? r : add(g, r, ir::broadcast_in_dim(g, ir::constant_int(g, t.dtype, b), t.shape, {}));
}
Value full_int(ir::Graph& g, DType dtype, int64_t v, const ir::Shape& shape) {
  return ir::broadcast_in_dim(g, ir::constant_int(g, dtype, v), shape, {});
}

// The smallest value of `dtype` (-inf for floats): max pooling's padding.
Value lowest(ir::Graph& g, DType dtype) {
  if (ir::is_floating(dtype)) return ir::constant(g, dtype, -std::numeric_limits<double>::infinity());
  switch (dtype) {
    case DType::S8: return ir::constant_int(g, dtype, std::numeric_limits<int8_t>::min());
    case DType::S16: return ir::constant_int(g, dtype, std::numeric_limits<int16_t>::min());
    case DType::S32: return ir::constant_int(g, dtype, std::numeric_limits<int32_t>::min());
    case DType::S64: return ir::constant_int(g, dtype, std::numeric_limits<int64_t>::min());
    default: return ir::constant_int(g, dtype, 0);  // unsigned and bool
  }
}

// Positions of the trailing `k` dims inside a rank-`rank` shape.
ir::Dims trailing(int64_t rank, int64_t k) {
  ir::Dims d;
  for (int64_t i = rank - k; i < rank; ++i) d.push_back(i);
  return d;
}

}  // namespace

// ------------------------------------------------------------ convolution

Value conv_forward(ir::Graph& g, Value x, Value w, const ConvParams& p, DType result) {
  size_t n = p.stride.size();
  ir::Padding pad;
  for (int64_t q : p.padding) pad.emplace_back(q, q);
  return ir::convolution(g, x, w, ir::ConvDims::channels_first(n), p.stride, pad, ones(n), p.dilation, p.groups, 1,
                         result);
}

Value conv_input_grad(ir::Graph& g, Value gy, Value w, const ConvParams& p, const ir::Dims& input_spatial,
                      DType result) {
  // A convolution of gy (dilated by the stride) with the spatially flipped
  // kernel whose in/out features are swapped within each group.
  ir::Shape ws = g.type(w).shape;  // [O, C/G, k...]
  ir::Shape gys = g.type(gy).shape;
  size_t n = p.stride.size();
  int64_t G = p.groups, O = ws[0], Cg = ws[1];
  ir::Shape grouped{G, O / G, Cg};
  ir::Shape swapped{G * Cg, O / G};
  ir::Dims perm{0, 2, 1};
  for (size_t i = 0; i < n; ++i) {
    grouped.push_back(ws[2 + i]);
    swapped.push_back(ws[2 + i]);
    perm.push_back(3 + static_cast<int64_t>(i));
  }
  Value k = ir::reshape(g, ir::transpose(g, ir::reshape(g, w, grouped), perm), swapped);
  k = ir::reverse(g, k, trailing(2 + n, n));
  ir::Padding pad;
  for (size_t i = 0; i < n; ++i) {
    int64_t extent = p.dilation[i] * (ws[2 + i] - 1) + 1;  // dilated kernel
    int64_t dilated = (gys[2 + i] - 1) * p.stride[i] + 1;   // dilated gy
    int64_t lo = extent - 1 - p.padding[i];
    int64_t hi = input_spatial[i] - 1 + extent - dilated - lo;
    pad.emplace_back(lo, hi);
  }
  return ir::convolution(g, gy, k, ir::ConvDims::channels_first(n), ones(n), pad, p.stride, p.dilation, G, 1, result);
}

Value conv_weight_grad(ir::Graph& g, Value x, Value gy, const ConvParams& p, const ir::Dims& kernel_spatial,
                       DType result) {
  // Correlates x with gy over the batch: batch and feature roles swap, the
  // forward stride becomes the kernel dilation, groups become batch groups.
  ir::Shape xs = g.type(x).shape;
  ir::Shape gys = g.type(gy).shape;
  size_t n = p.stride.size();
  ir::ConvDims dn = ir::ConvDims::channels_first(n);
  dn.input_batch = 1, dn.input_feature = 0;
  dn.kernel_output = 1, dn.kernel_input = 0;
  dn.output_batch = 1, dn.output_feature = 0;
  ir::Padding pad;
  for (size_t i = 0; i < n; ++i) {
    int64_t extent = p.dilation[i] * (kernel_spatial[i] - 1) + 1;
    int64_t dilated = (gys[2 + i] - 1) * p.stride[i] + 1;
    pad.emplace_back(p.padding[i], dilated - xs[2 + i] + extent - p.padding[i] - 1);
  }
  return ir::convolution(g, x, gy, dn, p.dilation, pad, ones(n), p.stride, 1, p.groups, result);
}

// ------------------------------------------------------------ pooling

int64_t pooling_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                            bool ceil_mode) {
  int64_t num = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t q = num / stride;
  if ((num % stride != 0) && ((num < 0) != (stride < 0))) --q;  // floor division
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

namespace {

ir::Shape pool_output_shape(const ir::Shape& in, const PoolParams& p) {
  ir::Shape out = in;
  size_t lead = in.size() - p.kernel.size();
  for (size_t d = 0; d < p.kernel.size(); ++d)
    out[lead + d] = pooling_output_size(in[lead + d], p.kernel[d], p.padding[d], p.stride[d], p.dilation[d],
                                        p.ceil_mode);
  return out;
}

}  // namespace

MaxPoolResult max_pool(ir::Graph& g, Value x, const PoolParams& p) {
  ir::Type t = g.type(x);
  int64_t k = static_cast<int64_t>(p.kernel.size()), rank = t.rank(), lead = rank - k;
  ir::Shape out = pool_output_shape(t.shape, p);
  ir::Shape grid(out.begin() + lead, out.end());
  ir::Dims lo(rank, 0), hi(rank, 0), plane_stride(k, 1);
  for (int64_t d = 0; d < k; ++d) {
    int64_t in = t.shape[lead + d];
    lo[lead + d] = p.padding[d];
    hi[lead + d] = std::max<int64_t>(0, (out[lead + d] - 1) * p.stride[d] + (p.kernel[d] - 1) * p.dilation[d] + 1 -
                                            in - p.padding[d]);
  }
  for (int64_t d = k - 2; d >= 0; --d) plane_stride[d] = plane_stride[d + 1] * t.shape[lead + d + 1];
  Value low = lowest(g, t.dtype);
  Value xp = ir::pad(g, x, low, lo, hi);
  Value best = ir::broadcast_in_dim(g, low, out, {});
  Value best_index = full_int(g, DType::S64, 0, out);
  Value seen = ir::full(g, DType::Pred, 0, out);  // whether a window has met an in-bounds element
  ir::Dims grid_dims = trailing(rank, k);
  // Visit window offsets in row-major order, keeping ATen's choice: the first
  // strict maximum, or the latest NaN.
  ir::Dims offset(k, 0);
  while (true) {
    ir::Dims start(rank, 0), limit = out, strides(rank, 1);
    Value valid, flat;
    for (int64_t d = 0; d < k; ++d) {
      start[lead + d] = offset[d] * p.dilation[d];
      limit[lead + d] = start[lead + d] + (out[lead + d] - 1) * p.stride[d] + 1;
      strides[lead + d] = p.stride[d];
      Value pos = affine(g, ir::iota(g, DType::S64, grid, d), p.stride[d], offset[d] * p.dilation[d] - p.padding[d]);
      Value ok = land(g, ir::compare(g, pos, full_int(g, DType::S64, 0, grid), ir::Compare::GE),
                      ir::compare(g, pos, full_int(g, DType::S64, t.shape[lead + d], grid), ir::Compare::LT));
      valid = valid.valid() ? land(g, valid, ok) : ok;
      Value term = affine(g, pos, plane_stride[d], 0);
      flat = flat.valid() ? add(g, flat, term) : term;
    }
    Value v = ir::slice(g, xp, start, limit, strides);
    valid = ir::broadcast_in_dim(g, valid, out, grid_dims);
    flat = ir::broadcast_in_dim(g, flat, out, grid_dims);
    Value better = lor(g, ir::compare(g, v, best, ir::Compare::GT), ir::compare(g, v, v, ir::Compare::NE));
    Value take = land(g, valid, lor(g, ir::unary(g, ir::Op::Not, seen), better));
    best = ir::select(g, take, v, best);
    best_index = ir::select(g, take, flat, best_index);
    seen = lor(g, seen, valid);
    int64_t d = k - 1;
    while (d >= 0 && ++offset[d] == p.kernel[d]) offset[d--] = 0;
    if (d < 0) break;
  }
  return {best, best_index};
}

Value max_pool_backward(ir::Graph& g, Value gy, Value indices, const ir::Shape& input_shape, int64_t spatial_rank,
                        DType accumulate) {
  ir::Shape gs = g.type(gy).shape;
  int64_t lead = static_cast<int64_t>(gs.size()) - spatial_rank;
  int64_t planes = 1, plane = 1, cells = 1;
  for (int64_t i = 0; i < lead; ++i) planes *= gs[i];
  for (int64_t i = lead; i < static_cast<int64_t>(gs.size()); ++i) {
    plane *= input_shape[i];
    cells *= gs[i];
  }
  // Plane-local indices become positions in the flattened input.
  Value idx = ir::reshape(g, ir::convert(g, indices, DType::S64), {planes, cells});
  idx = add(g, idx, affine(g, ir::iota(g, DType::S64, {planes, cells}, 0), plane, 0));
  Value updates = ir::reshape(g, ir::convert(g, gy, accumulate), {planes * cells});
  Value zeros = ir::full(g, accumulate, 0, {planes * plane});
  Value r = ir::scatter_1d_combine(g, zeros, ir::reshape(g, idx, {planes * cells}), updates, ir::Combiner::Add);
  return ir::reshape(g, r, input_shape);
}

namespace {

// The divisor of every output cell of an average pool, broadcast to `out`.
Value avg_divisor(ir::Graph& g, const ir::Shape& in, const ir::Shape& out, const PoolParams& p,
                  bool count_include_pad, std::optional<int64_t> divisor_override, DType acc) {
  int64_t k = static_cast<int64_t>(p.kernel.size()), lead = static_cast<int64_t>(in.size()) - k;
  if (divisor_override) return ir::full(g, acc, static_cast<double>(*divisor_override), out);
  // Window sums of a mask that is 1 over the input (and its padding when it
  // counts), 0 past it: ATen's pool_size, clipped at in + pad.
  ir::Shape spatial(in.begin() + lead, in.end()), grid(out.begin() + lead, out.end());
  ir::Dims lo(k), hi(k), extra(k), zero(k, 0);
  for (int64_t d = 0; d < k; ++d) {
    lo[d] = hi[d] = p.padding[d];
    extra[d] = std::max<int64_t>(0, (grid[d] - 1) * p.stride[d] + p.kernel[d] - (spatial[d] + 2 * p.padding[d]));
  }
  Value mask = ir::full(g, acc, 1, spatial);
  mask = ir::pad(g, mask, ir::constant(g, acc, count_include_pad ? 1 : 0), lo, hi);
  mask = ir::pad(g, mask, ir::constant(g, acc, 0), zero, extra);
  Value count = ir::reduce_window(g, mask, ir::constant(g, acc, 0), p.kernel, p.stride, ones(k), ones(k),
                                  ir::Padding(k, {0, 0}), ir::Combiner::Add);
  count = ir::slice(g, count, zero, grid);
  if (!count_include_pad) {  // a window wholly in the padding averages to 0, as in ATen
    Value zeros = ir::full(g, acc, 0, grid);
    count = ir::select(g, ir::compare(g, count, zeros, ir::Compare::EQ), ir::full(g, acc, 1, grid), count);
  }
  return ir::broadcast_in_dim(g, count, out, trailing(static_cast<int64_t>(out.size()), k));
}

}  // namespace

Value avg_pool(ir::Graph& g, Value x, const PoolParams& p, bool count_include_pad,
               std::optional<int64_t> divisor_override, DType acc) {
  ir::Shape in = g.type(x).shape;
  int64_t k = static_cast<int64_t>(p.kernel.size()), rank = static_cast<int64_t>(in.size()), lead = rank - k;
  ir::Shape out = pool_output_shape(in, p);
  ir::Dims window(rank, 1), strides(rank, 1);
  ir::Padding pad(rank, {0, 0});
  for (int64_t d = 0; d < k; ++d) {
    window[lead + d] = p.kernel[d];
    strides[lead + d] = p.stride[d];
    int64_t needed = (out[lead + d] - 1) * p.stride[d] + p.kernel[d];
    pad[lead + d] = {p.padding[d], std::max(p.padding[d], needed - in[lead + d] - p.padding[d])};
  }
  Value sum = ir::reduce_window(g, ir::convert(g, x, acc), ir::constant(g, acc, 0), window, strides, ones(rank),
                                ones(rank), pad, ir::Combiner::Add);
  sum = ir::slice(g, sum, ir::Dims(rank, 0), out);
  return div(g, sum, avg_divisor(g, in, out, p, count_include_pad, divisor_override, acc));
}

Value avg_pool_backward(ir::Graph& g, Value gy, const ir::Shape& in, const PoolParams& p, bool count_include_pad,
                        std::optional<int64_t> divisor_override, DType acc) {
  ir::Shape out = g.type(gy).shape;
  int64_t k = static_cast<int64_t>(p.kernel.size()), rank = static_cast<int64_t>(in.size()), lead = rank - k;
  Value share = div(g, ir::convert(g, gy, acc), avg_divisor(g, in, out, p, count_include_pad, divisor_override, acc));
  // Each padded-input position sums the shares of the windows covering it:
  // a stride-1 window sum over the shares spread out by the stride.
  ir::Dims window(rank, 1), base(rank, 1), start(rank, 0), limit = in;
  ir::Padding pad(rank, {0, 0});
  for (int64_t d = 0; d < k; ++d) {
    window[lead + d] = p.kernel[d];
    base[lead + d] = p.stride[d];
    int64_t dilated = (out[lead + d] - 1) * p.stride[d] + 1;
    pad[lead + d] = {p.kernel[d] - 1, std::max<int64_t>(0, p.padding[d] + in[lead + d] - dilated)};
    start[lead + d] = p.padding[d];
    limit[lead + d] = p.padding[d] + in[lead + d];
  }
  Value r = ir::reduce_window(g, share, ir::constant(g, acc, 0), window, ones(rank), base, ones(rank), pad,
                              ir::Combiner::Add);
  return ir::slice(g, r, start, limit);
}

namespace {

// [out, in] 0/1 membership of input positions in adaptive cells, and the cell sizes [out].
std::pair<Value, Value> adaptive_cells(ir::Graph& g, int64_t in, int64_t out, DType acc) {
  auto bounds = [&](Value i) {
    // start = floor(i * in / out), end = ceil((i + 1) * in / out)
    const ir::Shape& s = g.type(i).shape;
    Value start = div(g, affine(g, i, in, 0), full_int(g, DType::S64, out, s));
    Value end = div(g, affine(g, i, in, in + out - 1), full_int(g, DType::S64, out, s));
    return std::make_pair(start, end);
  };
  auto [start, end] = bounds(ir::iota(g, DType::S64, {out, in}, 0));
  Value h = ir::iota(g, DType::S64, {out, in}, 1);
  Value member = land(g, ir::compare(g, h, start, ir::Compare::GE), ir::compare(g, h, end, ir::Compare::LT));
  auto [s1, e1] = bounds(ir::iota(g, DType::S64, {out}, 0));
  Value size = ir::binary(g, ir::Op::Subtract, e1, s1);
  return {ir::convert(g, member, acc), ir::convert(g, size, acc)};
}

Value adaptive_counts(ir::Graph& g, const ir::Shape& in, const ir::Shape& out, int64_t k, DType acc) {
  int64_t rank = static_cast<int64_t>(out.size()), lead = rank - k;
  Value count;
  for (int64_t d = 0; d < k; ++d) {
    Value c = ir::broadcast_in_dim(g, adaptive_cells(g, in[lead + d], out[lead + d], acc).second, out, {lead + d});
    count = count.valid() ? mul(g, count, c) : c;
  }
  return count;
}

}  // namespace

Value adaptive_avg_pool(ir::Graph& g, Value x, const ir::Dims& output, DType acc) {
  ir::Shape in = g.type(x).shape;
  int64_t k = static_cast<int64_t>(output.size()), rank = static_cast<int64_t>(in.size()), lead = rank - k;
  // Cells are rectangles, so their sums separate into one contraction per dim;
  // each contraction moves its (now pooled) dim to the end, keeping the order.
  Value r = ir::convert(g, x, acc);
  for (int64_t d = 0; d < k; ++d) {
    Value member = adaptive_cells(g, in[lead + d], output[d], acc).first;
    r = ir::dot_general(g, r, member, {}, {}, {lead}, {1}, acc);
  }
  return div(g, r, adaptive_counts(g, in, g.type(r).shape, k, acc));
}

Value adaptive_avg_pool_backward(ir::Graph& g, Value gy, const ir::Shape& in, int64_t spatial_rank, DType acc) {
  ir::Shape out = g.type(gy).shape;
  int64_t k = spatial_rank, lead = static_cast<int64_t>(in.size()) - k;
  Value r = div(g, ir::convert(g, gy, acc), adaptive_counts(g, in, out, k, acc));
  for (int64_t d = 0; d < k; ++d) {
    Value member = adaptive_cells(g, in[lead + d], out[lead + d], acc).first;
    r = ir::dot_general(g, r, member, {}, {}, {lead}, {0}, acc);
  }
  return r;
}

// ------------------------------------------------------------ adaptive / fractional max pooling, unpooling

namespace {

// Keeps ATen's running choice over candidates visited in row-major order:
// a strictly greater value, or any NaN, replaces the current one.
struct Running {
  Value best, index;
  void visit(ir::Graph& g, Value v, Value i) {
    if (!best.valid()) {
      best = v;
      index = i;
      return;
    }
    Value better = lor(g, ir::compare(g, v, best, ir::Compare::GT), ir::compare(g, v, v, ir::Compare::NE));
    best = ir::select(g, better, v, best);
    index = ir::select(g, better, i, index);
  }
};

// Plane-local row-major flat position of every element of the trailing k dims.
Value flat_positions(ir::Graph& g, const ir::Shape& shape, int64_t k) {
  int64_t rank = static_cast<int64_t>(shape.size()), lead = rank - k, stride = 1;
  Value flat;
  for (int64_t d = k - 1; d >= 0; --d) {
    Value term = affine(g, ir::iota(g, DType::S64, shape, lead + d), stride, 0);
    flat = flat.valid() ? add(g, flat, term) : term;
    stride *= shape[lead + d];
  }
  return flat;
}

}  // namespace

MaxPoolResult adaptive_max_pool(ir::Graph& g, Value x, const ir::Dims& output) {
  int64_t k = static_cast<int64_t>(output.size()), rank = g.type(x).rank(), lead = rank - k;
  Value vals = x, idx = flat_positions(g, g.type(x).shape, k);
  // Cells are rectangles: reduce one dim at a time (innermost first), the
  // later stages choosing among the earlier stages' winners.
  for (int64_t d = k - 1; d >= 0; --d) {
    int64_t dim = lead + d, in = g.type(vals).shape[dim], out = output[d], taps = 1;
    std::vector<int64_t> start(out), end(out);
    for (int64_t i = 0; i < out; ++i) {
      start[i] = (i * in) / out;
      end[i] = ((i + 1) * in + out - 1) / out;
      taps = std::max(taps, end[i] - start[i]);
    }
    std::vector<double> table;
    for (int64_t i = 0; i < out; ++i)
      for (int64_t t = 0; t < taps; ++t) table.push_back(static_cast<double>(std::min(start[i] + t, end[i] - 1)));
    Value tv = ir::constant_tensor(g, DType::S64, {out, taps}, table);
    ir::Dims perm{dim}, inv(rank);
    for (int64_t i = 0; i < rank; ++i)
      if (i != dim) perm.push_back(i);
    for (int64_t i = 0; i < rank; ++i) inv[perm[i]] = i;
    Value gv = ir::gather_rows(g, ir::transpose(g, vals, perm), tv);  // [out, taps, rest...]
    Value gi = ir::gather_rows(g, ir::transpose(g, idx, perm), tv);
    ir::Shape gs = g.type(gv).shape;
    ir::Shape rs = gs;
    rs.erase(rs.begin() + 1);
    Running r;
    for (int64_t t = 0; t < taps; ++t) {
      ir::Dims lo(gs.size(), 0), hi = gs;
      lo[1] = t;
      hi[1] = t + 1;
      r.visit(g, ir::reshape(g, ir::slice(g, gv, lo, hi), rs), ir::reshape(g, ir::slice(g, gi, lo, hi), rs));
    }
    vals = ir::transpose(g, r.best, inv);
    idx = ir::transpose(g, r.index, inv);
  }
  return {vals, idx};
}

MaxPoolResult fractional_max_pool(ir::Graph& g, Value x, Value samples, const ir::Dims& kernel, const ir::Dims& output,
                                  const ir::Dims& sample_column) {
  ir::Type t = g.type(x);  // [P, spatial...]
  int64_t k = static_cast<int64_t>(kernel.size()), planes = t.shape[0], plane = 1;
  for (int64_t d = 0; d < k; ++d) plane *= t.shape[1 + d];
  DType sd = g.type(samples).dtype;
  ir::Shape grid{planes};
  for (int64_t o : output) grid.push_back(o);
  // Window starts per plane and dim, computed in the samples' dtype as ATen does.
  std::vector<Value> starts;
  for (int64_t d = 0; d < k; ++d) {
    int64_t in = t.shape[1 + d], out = output[d];
    ir::Shape ps{planes, out};
    Value last = full_int(g, DType::S64, in - kernel[d], ps);
    Value seq = last;
    if (out > 1) {
      Value s = ir::slice(g, samples, {0, sample_column[d]}, {planes, sample_column[d] + 1});
      s = ir::broadcast_in_dim(g, ir::reshape(g, s, {planes}), ps, {0});
      Value alpha = div(g, ir::full(g, sd, static_cast<double>(in - kernel[d]), ps),
                            ir::full(g, sd, static_cast<double>(out - 1), ps));
      Value a = ir::convert(g, mul(g, add(g, ir::iota(g, sd, ps, 1), s), alpha), DType::S64);
      Value b = ir::convert(g, mul(g, s, alpha), DType::S64);
      seq = ir::binary(g, ir::Op::Subtract, a, b);
      Value is_last = ir::compare(g, ir::iota(g, DType::S64, ps, 1), full_int(g, DType::S64, out - 1, ps),
                                  ir::Compare::EQ);
      seq = ir::select(g, is_last, last, seq);
    }
    starts.push_back(ir::broadcast_in_dim(g, seq, grid, {0, 1 + d}));
  }
  Value xf = ir::reshape(g, x, {planes * plane});
  Value base = affine(g, ir::iota(g, DType::S64, grid, 0), plane, 0);
  Running r;
  ir::Dims offset(k, 0);
  while (true) {
    Value flat;
    int64_t stride = 1;
    for (int64_t d = k - 1; d >= 0; --d) {
      Value term = affine(g, starts[d], stride, offset[d] * stride);
      flat = flat.valid() ? add(g, flat, term) : term;
      stride *= t.shape[1 + d];
    }
    r.visit(g, ir::gather_1d(g, xf, add(g, flat, base)), flat);
    int64_t d = k - 1;
    while (d >= 0 && ++offset[d] == kernel[d]) offset[d--] = 0;
    if (d < 0) break;
  }
  return {r.best, r.index};
}

Value max_unpool(ir::Graph& g, Value x, Value indices, int64_t size) {
  ir::Type t = g.type(x);  // [P, L]
  int64_t planes = t.shape[0], l = t.shape[1];
  Value idx = add(g, ir::convert(g, indices, DType::S64), affine(g, ir::iota(g, DType::S64, {planes, l}, 0), size, 0));
  Value zeros = ir::full(g, t.dtype, 0, {planes * size});
  Value r = ir::scatter_1d(g, zeros, ir::reshape(g, idx, {planes * l}), ir::reshape(g, x, {planes * l}));
  return ir::reshape(g, r, {planes, size});
}

}  // namespace tpu::lowering
