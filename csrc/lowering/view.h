// Reading and writing a strided view (sizes, strides, storage offset) of a
// flat storage value: PyTorch's aliasing semantics expressed as slices,
// reshapes and transposes (a gather/scatter only for overlapping layouts).
#pragma once

#include <optional>

#include "ir/graph.h"

namespace tpu::lowering {

struct StridedView {
  ir::Shape sizes;
  ir::Shape strides;
  int64_t offset = 0;  // static offset, used when no dynamic offset is given
};

// `storage` is rank-1. `dynamic_offset` (an s64 scalar) replaces view.offset so
// that views at different offsets share one compiled program.
ir::Value read_strided(ir::Graph& g, ir::Value storage, const StridedView& view,
                       std::optional<ir::Value> dynamic_offset);
// The same for a contiguous view of `sizes` at `offset`: a window, reshaped.
ir::Value read_contiguous(ir::Graph& g, ir::Value storage, const ir::Shape& sizes, int64_t offset,
                          std::optional<ir::Value> dynamic_offset);
// Returns the new storage value with `update` (shape view.sizes) written
// through the view. The view must not overlap itself.
ir::Value write_strided(ir::Graph& g, ir::Value storage, ir::Value update, const StridedView& view,
                        std::optional<ir::Value> dynamic_offset);

}  // namespace tpu::lowering
