#include "lowering/view.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "ir/ops.h"

namespace tpu::lowering {
namespace {

using ir::Value;

// How a strided view sits in its storage. When `chain` holds, the view is the
// leading corner of a reshaped window of the storage: dims sorted by stride
// each fit inside the next larger stride.
struct Layout {
  std::vector<int> real;   // dims with size > 1 and stride > 0, in view order
  std::vector<int> order;  // the same dims by decreasing stride
  bool chain = true;
  bool broadcasts = false;  // some dim of size > 1 has stride 0
  int64_t span = 1;         // elements from the first to the last one touched
  int64_t total = 1;        // elements of the reshaped window (>= span)
  ir::Shape container{1};
};

Layout analyze(const StridedView& v) {
  Layout l;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] <= 1) continue;
    if (v.strides[d] == 0) {
      l.broadcasts = true;
      continue;
    }
    l.real.push_back(static_cast<int>(d));
    l.span += (v.sizes[d] - 1) * v.strides[d];
  }
  l.order = l.real;
  std::stable_sort(l.order.begin(), l.order.end(),
                   [&](int a, int b) { return v.strides[a] > v.strides[b]; });
  if (l.order.empty()) return l;
  for (size_t k = 0; k + 1 < l.order.size(); ++k) {
    int64_t outer = v.strides[l.order[k]], inner = v.strides[l.order[k + 1]];
    if (outer % inner != 0 || outer < inner * v.sizes[l.order[k + 1]]) l.chain = false;
  }
  if (!l.chain) return l;
  l.container.clear();
  l.container.push_back(v.sizes[l.order[0]]);
  for (size_t k = 1; k < l.order.size(); ++k)
    l.container.push_back(v.strides[l.order[k - 1]] / v.strides[l.order[k]]);
  l.container.push_back(v.strides[l.order.back()]);
  l.total = v.sizes[l.order[0]] * v.strides[l.order[0]];
  return l;
}

Value zero_index(ir::Graph& g) { return ir::constant_int(g, ir::DType::S64, 0); }

Value offset_value(ir::Graph& g, const StridedView& v, std::optional<Value> dynamic_offset) {
  return dynamic_offset ? *dynamic_offset : ir::constant_int(g, ir::DType::S64, v.offset);
}

// The storage elements [offset, offset + span); the offset is `dynamic_offset`
// when given (ir::slice returns the storage itself when that is all of it).
Value storage_span(ir::Graph& g, Value storage, int64_t offset, int64_t span, std::optional<Value> dynamic_offset) {
  if (dynamic_offset) return ir::dynamic_slice(g, storage, {*dynamic_offset}, {span});
  return ir::slice(g, storage, {offset}, {offset + span});
}

// The storage elements [offset, offset + span), padded to `total`.
Value window(ir::Graph& g, Value storage, const StridedView& v, const Layout& l,
             std::optional<Value> dynamic_offset, bool* whole) {
  *whole = !dynamic_offset && v.offset == 0 && l.span == g.type(storage).shape[0];
  Value w = storage_span(g, storage, v.offset, l.span, dynamic_offset);
  if (l.total > l.span)
    w = ir::pad(g, w, ir::constant(g, g.type(storage).dtype, 0), {0}, {l.total - l.span});
  return w;
}

// The whole storage (n elements) reshaped to the view's container dims, the
// outermost one extended to cover the storage, and where the view's corner
// lies in it. Absent when the storage does not reshape so, or the view would
// wrap around a container dim from its offset.
struct StorageBox {
  ir::Shape shape;
  ir::Dims start;
  std::vector<int64_t> strides;  // element stride of each container dim
};

std::optional<StorageBox> container_of_storage(int64_t n, const StridedView& v, const Layout& l) {
  if (l.order.empty()) return std::nullopt;
  int64_t outer = v.strides[l.order[0]];
  if (n % outer != 0) return std::nullopt;
  StorageBox box;
  box.shape = l.container;
  box.shape[0] = n / outer;
  int64_t stride = outer;
  for (size_t i = 0; i < box.shape.size(); ++i) {
    if (i > 0) stride /= box.shape[i];
    box.strides.push_back(stride);
  }
  int64_t rest = v.offset;
  for (size_t i = 0; i < box.shape.size(); ++i) {
    int64_t c = rest / box.strides[i];
    rest %= box.strides[i];
    int64_t extent = i < l.order.size() ? v.sizes[l.order[i]] : 1;
    if (c + extent > box.shape[i]) return std::nullopt;
    box.start.push_back(c);
  }
  return box;
}

// The box's start indices from a runtime offset (the same decomposition).
std::vector<Value> box_start(ir::Graph& g, const StorageBox& box, Value offset) {
  std::vector<Value> start;
  Value rest = offset;
  for (int64_t stride : box.strides) {
    if (stride == 1) {  // takes the rest: dims after it (size 1) start at 0
      start.push_back(rest);
      rest = ir::constant_int(g, ir::DType::S64, 0);
      continue;
    }
    Value s = ir::constant_int(g, ir::DType::S64, stride);
    start.push_back(ir::binary(g, ir::Op::Divide, rest, s));
    rest = ir::binary(g, ir::Op::Remainder, rest, s);
  }
  return start;
}

ir::Dims add(const ir::Dims& a, const ir::Shape& b) {
  ir::Dims sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  return sum;
}

// Flat element indices of every view element (for overlapping layouts).
Value element_indices(ir::Graph& g, const StridedView& v, std::optional<Value> dynamic_offset) {
  ir::Shape shape(v.sizes.begin(), v.sizes.end());
  Value index = ir::broadcast_in_dim(g, offset_value(g, v, dynamic_offset), shape, {});
  for (size_t d = 0; d < shape.size(); ++d) {
    if (v.sizes[d] <= 1 || v.strides[d] == 0) continue;
    Value term = ir::binary(g, ir::Op::Multiply, ir::iota(g, ir::DType::S64, shape, d),
                            ir::full(g, ir::DType::S64, static_cast<double>(v.strides[d]), shape));
    index = ir::binary(g, ir::Op::Add, index, term);
  }
  return index;
}

// Permutation taking dims in `from` order to dims in `to` order.
ir::Dims permutation(const std::vector<int>& from, const std::vector<int>& to) {
  ir::Dims perm;
  for (int d : to) perm.push_back(std::find(from.begin(), from.end(), d) - from.begin());
  return perm;
}

}  // namespace

Value read_contiguous(ir::Graph& g, Value storage, const ir::Shape& sizes, int64_t offset,
                      std::optional<Value> dynamic_offset) {
  int64_t n = ir::numel(sizes);
  if (n == 0) return ir::full(g, g.type(storage).dtype, 0, sizes);
  return ir::reshape(g, storage_span(g, storage, offset, n, dynamic_offset), sizes);
}

Value read_strided(ir::Graph& g, Value storage, const StridedView& v, std::optional<Value> dynamic_offset) {
  ir::DType dtype = g.type(storage).dtype;
  ir::Shape sizes(v.sizes.begin(), v.sizes.end());
  if (ir::numel(sizes) == 0) return ir::full(g, dtype, 0, sizes);
  bool contiguous = true;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1, expected = 1; d >= 0 && contiguous; --d) {
    contiguous = sizes[d] == 1 || v.strides[d] == expected;
    expected *= sizes[d];
  }
  if (contiguous) return read_contiguous(g, storage, sizes, v.offset, dynamic_offset);
  Layout l = analyze(v);
  if (!l.chain) return ir::gather_1d(g, storage, element_indices(g, v, dynamic_offset));

  ir::Shape sorted_sizes;
  for (int d : l.order) sorted_sizes.push_back(v.sizes[d]);
  ir::Shape corner = sorted_sizes;
  corner.push_back(1);
  Value r;
  if (auto in_place = container_of_storage(g.type(storage).shape[0], v, l)) {
    // The view is a box of the storage seen as `in_place->shape`: slice it out
    // where it lies, so XLA can fuse the slice into the view's consumers.
    r = ir::reshape(g, storage, in_place->shape);
    r = dynamic_offset ? ir::dynamic_slice(g, r, box_start(g, *in_place, *dynamic_offset), corner)
                       : ir::slice(g, r, in_place->start, add(in_place->start, corner));
  } else {
    bool whole;
    r = ir::reshape(g, window(g, storage, v, l, dynamic_offset, &whole), l.container);
    r = ir::slice(g, r, ir::Dims(l.container.size(), 0), corner);
  }
  r = ir::reshape(g, r, sorted_sizes);
  r = ir::transpose(g, r, permutation(l.order, l.real));
  // Re-insert size-1 dims, then broadcast the stride-0 ones.
  ir::Shape unbroadcast;
  ir::Dims kept;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1 && v.strides[d] == 0) continue;
    unbroadcast.push_back(sizes[d]);
    kept.push_back(static_cast<int64_t>(d));
  }
  r = ir::reshape(g, r, unbroadcast);
  return ir::broadcast_in_dim(g, r, sizes, kept);
}

Value write_strided(ir::Graph& g, Value storage, Value update, const StridedView& v,
                    std::optional<Value> dynamic_offset) {
  ir::Shape sizes(v.sizes.begin(), v.sizes.end());
  if (ir::numel(sizes) == 0) return storage;
  Layout l = analyze(v);
  if (l.broadcasts) throw std::invalid_argument("write through a view that overlaps itself");
  if (!l.chain) return ir::scatter_1d(g, storage, element_indices(g, v, dynamic_offset), update);

  ir::Shape real_sizes, sorted_sizes;
  for (int d : l.real) real_sizes.push_back(v.sizes[d]);
  for (int d : l.order) sorted_sizes.push_back(v.sizes[d]);
  Value u = ir::reshape(g, update, real_sizes);
  u = ir::transpose(g, u, permutation(l.real, l.order));
  ir::Shape corner = sorted_sizes;
  corner.push_back(1);
  u = ir::reshape(g, u, corner);

  bool whole;
  Value w = window(g, storage, v, l, dynamic_offset, &whole);
  if (whole && l.total == l.span && ir::Shape(l.container) == corner) {
    return ir::reshape(g, u, {l.span});  // the view is the whole storage, in order
  }
  w = ir::reshape(g, w, l.container);
  std::vector<Value> zeros(l.container.size(), zero_index(g));
  w = ir::dynamic_update_slice(g, w, u, zeros);
  w = ir::reshape(g, w, {l.total});
  w = ir::slice(g, w, {0}, {l.span});
  if (whole) return w;
  return ir::dynamic_update_slice(g, storage, w, {offset_value(g, v, dynamic_offset)});
}

}  // namespace tpu::lowering
