// Matrix products.
#pragma once

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// dot_general accumulated in `accumulate` and returned in it. Half-type
// operands are widened to `accumulate` first when it differs: a bf16 x bf16
// -> f32 dot is not supported by every backend (XLA:CPU rejects it), and the
// widened product is exact, so the result is the same.
ir::Value contract(ir::Graph& g, ir::Value a, ir::Value b, const ir::Dims& batch_a, const ir::Dims& batch_b,
                   const ir::Dims& contract_a, const ir::Dims& contract_b, ir::DType accumulate);
// [n, k] x [k, m] -> [n, m], accumulated in `accumulate`, returned in the operands' dtype.
ir::Value matmul_2d(ir::Graph& g, ir::Value a, ir::Value b, ir::DType accumulate);
// [b, n, k] x [b, k, m] -> [b, n, m], likewise.
ir::Value matmul_batched(ir::Graph& g, ir::Value a, ir::Value b, ir::DType accumulate);
// Cross product of a and b (same shape) along `dim` (of size 3).
ir::Value cross(ir::Graph& g, ir::Value a, ir::Value b, int64_t dim);

}  // namespace tpu::lowering
