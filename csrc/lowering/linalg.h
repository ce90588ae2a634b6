// Matrix products.
#pragma once

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// [n, k] x [k, m] -> [n, m], accumulated in `accumulate`, returned in the operands' dtype.
ir::Value matmul_2d(ir::Graph& g, ir::Value a, ir::Value b, ir::DType accumulate);

}  // namespace tpu::lowering
