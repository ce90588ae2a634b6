// Reductions over a set of dimensions, with keepdim handled in one place.
#pragma once

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// Normalised, sorted, de-duplicated dims; an empty `dims` means all of them.
ir::Dims reduction_dims(const std::vector<int64_t>& dims, int64_t rank);
// Sum of `x` over `dims`, accumulated in `accumulate` and returned in `result`.
ir::Value sum(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim, ir::DType accumulate,
              ir::DType result);
ir::Value mean(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim, ir::DType accumulate,
               ir::DType result);
// Re-inserts reduced dims as size 1.
ir::Value keep_dims(ir::Graph& g, ir::Value reduced, const ir::Shape& input_shape, const ir::Dims& dims);

}  // namespace tpu::lowering
