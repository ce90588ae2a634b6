// Indexing lowerings: gather/scatter along a dim, rows picked by an index
// vector, advanced (NumPy) indexing and its put, data-dependent compaction
// (nonzero, masked_select) once the host knows the result size.
//
// Out-of-range indices are NOT checked on the device (that would need a host
// sync per op): reads clamp them into range (XLA gather semantics) and writes
// drop them (XLA scatter semantics), where CPU PyTorch raises an IndexError.
#pragma once

#include <optional>
#include <vector>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// `index` (any integer type) as s64, negative values wrapped by `size` (ATen's
// advanced indexing accepts -size <= i < size).
ir::Value wrap_negative(ir::Graph& g, ir::Value index, int64_t size);
// Whether 0 <= index < size, elementwise.
ir::Value in_range(ir::Graph& g, ir::Value index, int64_t size);
// index clamped into [0, size - 1].
ir::Value clamp_index(ir::Graph& g, ir::Value index, int64_t size);

// torch.gather: out[i] = x[i with i[dim] = index[i]] (index has x's rank).
ir::Value gather_dim(ir::Graph& g, ir::Value x, int64_t dim, ir::Value index);
// torch.scatter family: x[i with i[dim] = index[i]] (op)= src[i], src cut to index's shape.
ir::Value scatter_dim(ir::Graph& g, ir::Value x, int64_t dim, ir::Value index, ir::Value src,
                      ir::Combiner combiner);

// torch.scatter_reduce (reduce "sum", "prod", "amax", "amin" via `combiner`,
// or "mean" when `mean`): `identity` (a scalar of x's dtype) is the
// combiner's neutral element; without include_self, positions that receive
// values start from it instead of from x.
ir::Value scatter_reduce_dim(ir::Graph& g, ir::Value x, int64_t dim, ir::Value index, ir::Value src,
                             ir::Combiner combiner, bool mean, bool include_self, ir::Value identity);

// index_select: x's slices along `dim` picked by the rank-1 `index`.
ir::Value select_rows(ir::Graph& g, ir::Value x, int64_t dim, ir::Value index);
// index_add/index_copy: slices of `source` combined into x along `dim` at `index`.
ir::Value combine_rows(ir::Graph& g, ir::Value x, int64_t dim, ir::Value index, ir::Value source,
                       ir::Combiner combiner);

// Advanced indexing. `indices` has one entry per leading dim of x (missing
// entries and trailing dims are taken whole); present entries are integer
// tensors already broadcast to one shape. The result layout is ATen's: the
// index shape replaces the indexed dims when they are adjacent, else leads.
ir::Shape advanced_index_shape(const ir::Shape& x, const std::vector<bool>& indexed, const ir::Shape& index);
ir::Value advanced_index(ir::Graph& g, ir::Value x, const std::vector<std::optional<ir::Value>>& indices);
// x with `values` (shape advanced_index_shape(...)) written (or added) at the indices.
ir::Value advanced_index_put(ir::Graph& g, ir::Value x, const std::vector<std::optional<ir::Value>>& indices,
                             ir::Value values, bool accumulate);

// Number of nonzero elements of x, as an s64 scalar.
ir::Value count_nonzero(ir::Graph& g, ir::Value x);
// Inclusive prefix sum of a rank-1 value (log-depth, static shapes).
ir::Value prefix_sum(ir::Graph& g, ir::Value x);
// Coordinates (s64, [count, rank]) of the nonzero elements in row-major order;
// `count` is the host-known number of them.
ir::Value nonzero(ir::Graph& g, ir::Value x, int64_t count);
// nonzero_static: the first `size` coordinates, rows past the nonzero count
// filled with `fill` (an s64 scalar).
ir::Value nonzero_static(ir::Graph& g, ir::Value x, int64_t size, ir::Value fill);
// The elements of x where the predicate `mask` (x's shape) holds, row-major.
ir::Value masked_select(ir::Graph& g, ir::Value x, ir::Value mask, int64_t count);

// embedding_dense_backward: grad [..., D] summed into [num_weights, D] rows by
// `indices`; rows equal to padding_idx get nothing; scale_grad_by_freq divides
// each contribution by its index's frequency.
ir::Value embedding_backward(ir::Graph& g, ir::Value grad, ir::Value indices, int64_t num_weights,
                             int64_t padding_idx, bool scale_grad_by_freq);

}  // namespace tpu::lowering
