// Shape-family lowerings: triangular masks, roll, constant padding, repeat,
// and the values of range factories (arange, linspace).
#pragma once


#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// tril (lower) / triu of the last two dims: elements with col - row > diagonal
// (tril) or col - row < diagonal (triu) become zero.
ir::Value triangular(ir::Graph& g, ir::Value x, int64_t diagonal, bool lower);
// torch.roll over `dims` (shifts already wrapped into [0, size)); for no dims,
// the flattened tensor is rolled by shifts[0].
ir::Value roll(ir::Graph& g, ir::Value x, const ir::Dims& shifts, const ir::Dims& dims);
// constant_pad_nd: `low`/`high` per dim (negative values crop), filled with `value` (a scalar of x's dtype).
ir::Value pad_constant(ir::Graph& g, ir::Value x, const ir::Dims& low, const ir::Dims& high, ir::Value value);
// Tensor.repeat: x (already viewed with rank == repeats.size()) tiled `repeats` times per dim.
ir::Value repeat(ir::Graph& g, ir::Value x, const ir::Dims& repeats);
// start + step * i for i in [0, size), computed in `compute` (scalars of that type), converted to `result`.
ir::Value arange(ir::Graph& g, ir::Value start, ir::Value step, int64_t size, ir::DType compute, ir::DType result);
// ATen's linspace: start + step * i in the first half, end - step * (size - 1 - i) in the second.
ir::Value linspace(ir::Graph& g, ir::Value start, ir::Value end, ir::Value step, int64_t size, ir::DType compute,
                   ir::DType result);

}  // namespace tpu::lowering
