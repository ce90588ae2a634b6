// Elementwise lowerings. Operands arrive already broadcast to one shape and
// converted to the computation dtype (see aten/kernels.h for promotion).
#pragma once

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

enum class Binary { Add, Sub, Mul, Div, FloorDiv, TruncDiv, Max, Min, Pow, Remainder };
enum class Unary { Neg, Abs, Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Relu };

ir::Value binary(ir::Graph& g, Binary op, ir::Value a, ir::Value b);
ir::Value unary(ir::Graph& g, Unary op, ir::Value x);
ir::Value compare(ir::Graph& g, ir::Compare op, ir::Value a, ir::Value b);
ir::Value where(ir::Graph& g, ir::Value cond, ir::Value a, ir::Value b);
// x * s for a scalar s (rank 0) of x's dtype.
ir::Value scale(ir::Graph& g, ir::Value x, ir::Value s);
// Whether `op` on integers of `dtype` is defined (true division always promotes).
bool unary_needs_float(Unary op);

}  // namespace tpu::lowering
