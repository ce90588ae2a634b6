#include "lowering/index.h"

#include <algorithm>
#include <stdexcept>

#include "lowering/elementwise.h"

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

Value s64_full(ir::Graph& g, int64_t v, const ir::Shape& shape) {
  return ir::full(g, DType::S64, static_cast<double>(v), shape);
}

Value add(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Add, a, b); }
Value mul(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Multiply, a, b); }

std::vector<int64_t> row_major_strides(const ir::Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

// Flat row-major positions in a tensor of `shape` of the elements picked along
// `dim` by `index` (every other coordinate is the position in index's shape).
Value flat_positions(ir::Graph& g, const ir::Shape& shape, int64_t dim, Value index) {
  const ir::Shape ishape = g.type(index).shape;
  std::vector<int64_t> strides = row_major_strides(shape);
  Value flat = s64_full(g, 0, ishape);
  for (size_t d = 0; d < ishape.size(); ++d) {
    Value coord = static_cast<int64_t>(d) == dim ? index : ir::iota(g, DType::S64, ishape, d);
    flat = add(g, flat, strides[d] == 1 ? coord : mul(g, coord, s64_full(g, strides[d], ishape)));
  }
  return flat;
}

// Permutation moving `dim` to the front; and its inverse.
ir::Dims front_perm(int64_t rank, int64_t dim) {
  ir::Dims p{dim};
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim) p.push_back(d);
  return p;
}
ir::Dims inverse(const ir::Dims& p) {
  ir::Dims inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<int64_t>(i);
  return inv;
}

// Out-of-range positions become -1, which a scatter drops.
Value drop_invalid(ir::Graph& g, Value flat, Value valid) {
  return ir::select(g, valid, flat, s64_full(g, -1, g.type(flat).shape));
}

// How an advanced index maps onto a gather/scatter of rows: x is transposed
// (indexed dims first) and its indexed dims collapsed into one.
struct Plan {
  ir::Dims perm;             // x -> indexed dims, then the others
  ir::Shape collapsed;       // [prod(indexed sizes), other sizes...]
  ir::Dims result_perm;      // [index dims, other dims] -> ATen's result order
  Value flat;                // s64 row numbers, index shape
  Value valid;               // pred, index shape
};

// `clamp`: out-of-range indices are clamped into their dim (reads); else
// they are left to `valid` (writes drop them).
Plan plan_index(ir::Graph& g, const ir::Shape& shape, const std::vector<std::optional<Value>>& indices, bool clamp) {
  Plan p;
  std::vector<int64_t> indexed, rest;
  ir::Shape ishape;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool has = d < indices.size() && indices[d].has_value();
    (has ? indexed : rest).push_back(static_cast<int64_t>(d));
    if (has) ishape = g.type(*indices[d]).shape;
  }
  if (indexed.empty()) throw std::invalid_argument("advanced index without index tensors");
  int64_t rows = 1;
  for (int64_t d : indexed) rows *= shape[d];
  p.perm = indexed;
  p.perm.insert(p.perm.end(), rest.begin(), rest.end());
  p.collapsed = {rows};
  for (int64_t d : rest) p.collapsed.push_back(shape[d]);

  p.flat = s64_full(g, 0, ishape);
  p.valid = ir::full(g, DType::Pred, 1, ishape);
  int64_t stride = 1;
  for (auto it = indexed.rbegin(); it != indexed.rend(); ++it) {
    int64_t size = shape[*it];
    Value idx = wrap_negative(g, *indices[*it], size);
    p.valid = ir::binary(g, ir::Op::And, p.valid, in_range(g, idx, size));
    if (clamp) idx = clamp_index(g, idx, size);
    p.flat = add(g, p.flat, stride == 1 ? idx : mul(g, idx, s64_full(g, stride, ishape)));
    stride *= size;
  }

  // Adjacent indexed dims: the index dims sit where the indexed dims were.
  bool adjacent = indexed.back() - indexed.front() + 1 == static_cast<int64_t>(indexed.size());
  int64_t nb = static_cast<int64_t>(ishape.size());
  int64_t before = adjacent ? indexed.front() : 0;
  for (int64_t i = 0; i < before; ++i) p.result_perm.push_back(nb + i);
  for (int64_t i = 0; i < nb; ++i) p.result_perm.push_back(i);
  for (int64_t i = nb + before; i < nb + static_cast<int64_t>(rest.size()); ++i) p.result_perm.push_back(i);
  return p;
}

}  // namespace

Value wrap_negative(ir::Graph& g, Value index, int64_t size) {
  index = ir::convert(g, index, DType::S64);
  const ir::Shape& shape = g.type(index).shape;
  Value negative = ir::compare(g, index, s64_full(g, 0, shape), ir::Compare::LT);
  return ir::select(g, negative, add(g, index, s64_full(g, size, shape)), index);
}

Value in_range(ir::Graph& g, Value index, int64_t size) {
  index = ir::convert(g, index, DType::S64);
  const ir::Shape& shape = g.type(index).shape;
  Value ge0 = ir::compare(g, index, s64_full(g, 0, shape), ir::Compare::GE);
  Value lt = ir::compare(g, index, s64_full(g, size, shape), ir::Compare::LT);
  return ir::binary(g, ir::Op::And, ge0, lt);
}

Value clamp_index(ir::Graph& g, Value index, int64_t size) {
  index = ir::convert(g, index, DType::S64);
  const ir::Shape& shape = g.type(index).shape;
  Value hi = ir::binary(g, ir::Op::Minimum, index, s64_full(g, std::max<int64_t>(size - 1, 0), shape));
  return ir::binary(g, ir::Op::Maximum, hi, s64_full(g, 0, shape));
}

Value gather_dim(ir::Graph& g, Value x, int64_t dim, Value index) {
  ir::Shape shape = g.type(x).shape;
  if (shape.empty()) shape = {1};
  Value idx = clamp_index(g, index, shape[dim]);
  if (g.type(idx).shape.empty()) idx = ir::reshape(g, idx, {1});
  Value flat = ir::reshape(g, x, {ir::numel(shape)});
  Value r = ir::gather_rows(g, flat, flat_positions(g, shape, dim, idx));
  return ir::reshape(g, r, g.type(index).shape);
}

namespace {

// A scatter along `dim` as a scatter into the flattened x.
struct FlatScatter {
  Value x;        // x flattened
  Value targets;  // s64 flat positions (index's shape), -1 where out of range
  Value src;      // src cut to index's shape
};

FlatScatter flat_scatter(ir::Graph& g, Value x, int64_t dim, Value index, Value src) {
  ir::Shape xshape = g.type(x).shape;
  ir::Shape shape = xshape.empty() ? ir::Shape{1} : xshape;
  ir::Shape ishape = g.type(index).shape;
  if (ishape.empty()) ishape = {1};
  Value idx = ir::reshape(g, ir::convert(g, index, DType::S64), ishape);
  // src may be larger than index: only its leading corner is used.
  Value s = ir::reshape(g, src, g.type(src).shape.empty() ? ir::Shape{1} : g.type(src).shape);
  if (g.type(s).shape != ishape) s = ir::slice(g, s, ir::Dims(ishape.size(), 0), ishape);
  Value flat = drop_invalid(g, flat_positions(g, shape, dim, idx), in_range(g, idx, shape[dim]));
  return {ir::reshape(g, x, {ir::numel(shape)}), flat, s};
}

}  // namespace

Value scatter_dim(ir::Graph& g, Value x, int64_t dim, Value index, Value src, ir::Combiner combiner) {
  ir::Shape xshape = g.type(x).shape;
  FlatScatter f = flat_scatter(g, x, dim, index, src);
  return ir::reshape(g, ir::scatter_rows(g, f.x, f.targets, f.src, combiner), xshape);
}

Value scatter_reduce_dim(ir::Graph& g, Value x, int64_t dim, Value index, Value src, ir::Combiner combiner, bool mean,
                         bool include_self, Value identity) {
  ir::Shape xshape = g.type(x).shape;
  DType dtype = g.type(x).dtype;
  FlatScatter f = flat_scatter(g, x, dim, index, src);
  ir::Shape flat = g.type(f.x).shape, ishape = g.type(f.src).shape;
  Value base = f.x;
  Value touched;
  if (!include_self || mean) {
    touched = ir::scatter_rows(g, ir::full(g, DType::Pred, 0, flat), f.targets, ir::full(g, DType::Pred, 1, ishape),
                               ir::Combiner::Replace);
  }
  if (!include_self) base = ir::select(g, touched, ir::broadcast_in_dim(g, identity, flat, {}), base);
  Value r = ir::scatter_rows(g, base, f.targets, f.src, mean ? ir::Combiner::Add : combiner);
  if (mean) {
    // count = (include_self or untouched) + number of values received.
    Value start = include_self ? ir::full(g, dtype, 1, flat)
                               : ir::select(g, touched, ir::full(g, dtype, 0, flat), ir::full(g, dtype, 1, flat));
    Value count = ir::scatter_rows(g, start, f.targets, ir::full(g, dtype, 1, ishape), ir::Combiner::Add);
    r = binary(g, ir::is_floating(dtype) ? Binary::Div : Binary::FloorDiv, r, count);
  }
  return ir::reshape(g, r, xshape);
}

Value select_rows(ir::Graph& g, Value x, int64_t dim, Value index) {
  ir::Shape xshape = g.type(x).shape;
  int64_t n = ir::numel(g.type(index).shape);
  if (xshape.empty()) {  // a 0-dim x is one row
    Value r = ir::gather_rows(g, ir::reshape(g, x, {1}), clamp_index(g, ir::reshape(g, index, {n}), 1));
    return ir::reshape(g, r, {});
  }
  ir::Dims perm = front_perm(static_cast<int64_t>(xshape.size()), dim);
  Value idx = clamp_index(g, ir::reshape(g, index, {n}), xshape[dim]);
  Value r = ir::gather_rows(g, ir::transpose(g, x, perm), idx);
  return ir::transpose(g, r, inverse(perm));
}

Value combine_rows(ir::Graph& g, Value x, int64_t dim, Value index, Value source, ir::Combiner combiner) {
  ir::Shape xshape = g.type(x).shape;
  int64_t n = ir::numel(g.type(index).shape);
  Value idx = ir::reshape(g, ir::convert(g, index, DType::S64), {n});
  if (xshape.empty()) {
    Value r = ir::scatter_rows(g, ir::reshape(g, x, {1}), drop_invalid(g, idx, in_range(g, idx, 1)),
                               ir::reshape(g, source, {n}), combiner);
    return ir::reshape(g, r, {});
  }
  ir::Dims perm = front_perm(static_cast<int64_t>(xshape.size()), dim);
  idx = drop_invalid(g, idx, in_range(g, idx, xshape[dim]));
  Value r = ir::scatter_rows(g, ir::transpose(g, x, perm), idx, ir::transpose(g, source, perm), combiner);
  return ir::transpose(g, r, inverse(perm));
}

ir::Shape advanced_index_shape(const ir::Shape& x, const std::vector<bool>& indexed, const ir::Shape& index) {
  std::vector<int64_t> on, rest;
  for (size_t d = 0; d < x.size(); ++d) (d < indexed.size() && indexed[d] ? on : rest).push_back(d);
  bool adjacent = !on.empty() && on.back() - on.front() + 1 == static_cast<int64_t>(on.size());
  ir::Shape out;
  int64_t before = adjacent ? on.front() : 0;
  for (int64_t i = 0; i < before; ++i) out.push_back(x[rest[i]]);
  out.insert(out.end(), index.begin(), index.end());
  for (size_t i = before; i < rest.size(); ++i) out.push_back(x[rest[i]]);
  return out;
}

Value advanced_index(ir::Graph& g, Value x, const std::vector<std::optional<Value>>& indices) {
  Plan p = plan_index(g, g.type(x).shape, indices, /*clamp=*/true);  // unchecked: see the header
  Value xt = ir::reshape(g, ir::transpose(g, x, p.perm), p.collapsed);
  Value r = ir::gather_rows(g, xt, p.flat);
  return ir::transpose(g, r, p.result_perm);
}

Value advanced_index_put(ir::Graph& g, Value x, const std::vector<std::optional<Value>>& indices, Value values,
                         bool accumulate) {
  ir::Shape xshape = g.type(x).shape;
  Plan p = plan_index(g, xshape, indices, /*clamp=*/false);
  Value xt = ir::reshape(g, ir::transpose(g, x, p.perm), p.collapsed);
  Value updates = ir::transpose(g, values, inverse(p.result_perm));
  Value rows = drop_invalid(g, p.flat, p.valid);
  Value r = ir::scatter_rows(g, xt, rows, updates, accumulate ? ir::Combiner::Add : ir::Combiner::Replace);
  ir::Shape transposed;
  for (int64_t d : p.perm) transposed.push_back(xshape[d]);
  return ir::transpose(g, ir::reshape(g, r, transposed), inverse(p.perm));
}

Value count_nonzero(ir::Graph& g, Value x) {
  const ir::Type& t = g.type(x);
  Value nz = ir::compare(g, x, ir::full(g, t.dtype, 0, t.shape), ir::Compare::NE);
  ir::Dims all;
  for (int64_t d = 0; d < t.rank(); ++d) all.push_back(d);
  return ir::reduce(g, ir::convert(g, nz, DType::S64), ir::constant_int(g, DType::S64, 0), all, ir::Combiner::Add);
}

Value prefix_sum(ir::Graph& g, Value x) {
  const ir::Type& t = g.type(x);
  int64_t n = t.shape.at(0);
  Value zero = ir::constant(g, t.dtype, 0);
  // Hillis-Steele: after the step with shift s, each element holds the sum of
  // the 2s elements ending at it.
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Value shifted = ir::pad(g, ir::slice(g, x, {0}, {n - shift}), zero, {shift}, {0});
    x = add(g, x, shifted);
  }
  return x;
}

namespace {

// Where each selected element of the flat predicate goes in the compacted
// result: its rank among the selected ones; unselected ones go nowhere (-1).
Value compact_positions(ir::Graph& g, Value mask_flat) {
  ir::Shape shape = g.type(mask_flat).shape;
  Value inclusive = prefix_sum(g, ir::convert(g, mask_flat, DType::S64));
  Value pos = add(g, inclusive, s64_full(g, -1, shape));
  return ir::select(g, mask_flat, pos, s64_full(g, -1, shape));
}

}  // namespace

namespace {

// Row-major coordinates [count, rank] of the flat positions `where` (s64,
// [count]) in a tensor of `shape`.
Value coordinates(ir::Graph& g, Value where, const ir::Shape& shape) {
  int64_t count = g.type(where).shape.at(0);
  std::vector<int64_t> strides = row_major_strides(shape);
  std::vector<Value> coords;
  for (size_t d = 0; d < shape.size(); ++d) {
    Value c = ir::binary(g, ir::Op::Divide, where, s64_full(g, strides[d], {count}));
    if (d > 0) c = ir::binary(g, ir::Op::Remainder, c, s64_full(g, shape[d], {count}));
    coords.push_back(ir::reshape(g, c, {count, 1}));
  }
  return coords.size() == 1 ? coords[0] : ir::concatenate(g, coords, 1);
}

}  // namespace

Value nonzero(ir::Graph& g, Value x, int64_t count) {
  const ir::Type& t = g.type(x);
  ir::Shape shape = t.shape;
  int64_t rank = static_cast<int64_t>(shape.size());
  if (count == 0 || rank == 0) return s64_full(g, 0, {count, rank});  // no coordinates to compute
  int64_t n = ir::numel(shape);
  Value flat = ir::reshape(g, x, {n});
  Value mask = ir::compare(g, flat, ir::full(g, t.dtype, 0, {n}), ir::Compare::NE);
  Value where = ir::scatter_rows(g, s64_full(g, 0, {count}), compact_positions(g, mask),
                                 ir::iota(g, DType::S64, {n}, 0), ir::Combiner::Replace);
  return coordinates(g, where, shape);
}

Value nonzero_static(ir::Graph& g, Value x, int64_t size, Value fill) {
  const ir::Type& t = g.type(x);
  ir::Shape shape = t.shape;
  int64_t rank = static_cast<int64_t>(shape.size());
  if (size == 0 || rank == 0) return s64_full(g, 0, {size, rank});
  int64_t n = ir::numel(shape);
  Value flat = ir::reshape(g, x, {n});
  Value mask = ir::compare(g, flat, ir::full(g, t.dtype, 0, {n}), ir::Compare::NE);
  // Positions past `size` fall outside the result and are dropped by the scatter.
  Value where = ir::scatter_rows(g, s64_full(g, -1, {size}), compact_positions(g, mask),
                                 ir::iota(g, DType::S64, {n}, 0), ir::Combiner::Replace);
  Value unused = ir::compare(g, where, s64_full(g, -1, {size}), ir::Compare::EQ);
  Value coords = coordinates(g, ir::select(g, unused, s64_full(g, 0, {size}), where), shape);
  return ir::select(g, ir::broadcast_in_dim(g, unused, {size, rank}, {0}),
                    ir::broadcast_in_dim(g, fill, {size, rank}, {}), coords);
}

Value masked_select(ir::Graph& g, Value x, Value mask, int64_t count) {
  const ir::Type& t = g.type(x);
  if (count == 0) return ir::full(g, t.dtype, 0, {0});
  int64_t n = ir::numel(t.shape);
  Value flat = ir::reshape(g, x, {n});
  Value m = ir::reshape(g, mask, {n});
  return ir::scatter_rows(g, ir::full(g, t.dtype, 0, {count}), compact_positions(g, m), flat,
                          ir::Combiner::Replace);
}

Value embedding_backward(ir::Graph& g, Value grad, Value indices, int64_t num_weights, int64_t padding_idx,
                         bool scale_grad_by_freq) {
  const ir::Type& tg = g.type(grad);
  int64_t n = ir::numel(g.type(indices).shape);
  int64_t width = tg.shape.empty() ? 1 : tg.shape.back();
  Value rows = ir::reshape(g, grad, {n, width});
  Value idx = ir::reshape(g, ir::convert(g, indices, DType::S64), {n});
  Value valid = in_range(g, idx, num_weights);
  if (padding_idx >= 0) {  // padding_idx is already wrapped by the caller
    Value pad = ir::compare(g, idx, s64_full(g, padding_idx, {n}), ir::Compare::NE);
    valid = ir::binary(g, ir::Op::And, valid, pad);
  }
  idx = drop_invalid(g, idx, valid);
  if (scale_grad_by_freq) {
    Value counts = ir::scatter_rows(g, ir::full(g, tg.dtype, 0, {num_weights}), idx, ir::full(g, tg.dtype, 1, {n}),
                                    ir::Combiner::Add);
    Value freq = ir::gather_rows(g, counts, clamp_index(g, idx, num_weights));
    rows = ir::binary(g, ir::Op::Divide, rows, ir::broadcast_in_dim(g, freq, {n, width}, {0}));
  }
  return ir::scatter_rows(g, ir::full(g, tg.dtype, 0, {num_weights, width}), idx, rows, ir::Combiner::Add);
}

}  // namespace tpu::lowering
