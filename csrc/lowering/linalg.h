// Matrix products.
#pragma once

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// [n, k] x [k, m] -> [n, m], accumulated in `accumulate`, returned in the operands' dtype.
ir::Value matmul_2d(ir::Graph& g, ir::Value a, ir::Value b, ir::DType accumulate);
// [b, n, k] x [b, k, m] -> [b, n, m], likewise.
ir::Value matmul_batched(ir::Graph& g, ir::Value a, ir::Value b, ir::DType accumulate);

}  // namespace tpu::lowering
