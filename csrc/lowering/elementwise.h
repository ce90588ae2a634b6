// Elementwise lowerings. Operands arrive already broadcast to one shape and
// converted to the computation dtype (see aten/op_helpers.h for the driver).
//
// Dtype rules live here too, in one place: which ops promote integers to
// float, which compute half types in float32 ("opmath", as ATen's CPU and
// CUDA kernels do), and the NaN-aware building blocks (is_nan, signbit,
// NaN-propagating max/min) that several ops share.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// ------------------------------------------------------------ dtype rules

// The dtype ATen computes in for results of `t`: float32 for half types.
c10::ScalarType opmath_type(c10::ScalarType t);

// ------------------------------------------------------------ building blocks

// A constant of x's dtype and shape.
ir::Value splat(ir::Graph& g, ir::Value like, double value);
ir::Value is_nan(ir::Graph& g, ir::Value x);           // pred; false for integers
ir::Value signbit(ir::Graph& g, ir::Value x);          // pred; sign bit of floats (-0.0, -NaN)
ir::Value trunc(ir::Graph& g, ir::Value x);            // round toward zero; identity on integers
// max/min that return NaN when either operand is NaN (torch.maximum, clamp).
ir::Value nan_max(ir::Graph& g, ir::Value a, ir::Value b);
ir::Value nan_min(ir::Graph& g, ir::Value a, ir::Value b);

// ------------------------------------------------------------ unary / binary tables

enum class Binary {
  Add, Sub, Mul, Div, FloorDiv, TruncDiv, Max, Min, Pow, Remainder,
  FMax, FMin, FMod, Atan2, CopySign, Hypot,
  BitAnd, BitOr, BitXor, ShiftLeft, ShiftRight,
  LogicalAnd, LogicalOr, LogicalXor,  // pred results
};
enum class Unary {
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Relu,
  // float math (integers promote to float)
  Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh,
  Log1p, Expm1, Log2, Log10, Exp2, Erf, Erfinv, Reciprocal,
  // dtype-preserving
  Floor, Ceil, Round, Trunc, Frac, Sign, BitwiseNot,
  // pred results
  LogicalNot, IsNan, IsPosInf, IsNegInf, SignBit,
};

ir::Value binary(ir::Graph& g, Binary op, ir::Value a, ir::Value b);
ir::Value unary(ir::Graph& g, Unary op, ir::Value x);
ir::Value compare(ir::Graph& g, ir::Compare op, ir::Value a, ir::Value b);
ir::Value where(ir::Graph& g, ir::Value cond, ir::Value a, ir::Value b);
// x * s for a scalar s (rank 0) of x's dtype.
ir::Value scale(ir::Graph& g, ir::Value x, ir::Value s);
// Whether `op` promotes integer (and bool) inputs to the default float dtype.
bool unary_needs_float(Unary op);
// Whether `op` yields a bool tensor.
bool unary_is_predicate(Unary op);
bool binary_is_predicate(Binary op);

// ------------------------------------------------------------ complex

// conj(x): negated imaginary part; identity on real values.
ir::Value conj(ir::Graph& g, ir::Value x);
// x / |x| (0 where x == 0): torch.sgn of a complex tensor.
ir::Value complex_sgn(ir::Graph& g, ir::Value x);
// torch.polar: abs * (cos(angle) + i sin(angle)).
ir::Value polar(ir::Graph& g, ir::Value abs, ir::Value angle);

// ------------------------------------------------------------ composite math

// round(x, decimals) as ATen: scale by 10^|decimals|, round half to even, unscale.
ir::Value round_decimals(ir::Graph& g, ir::Value x, int64_t decimals);
// nan_to_num with replacement values (scalars already of x's dtype and shape).
ir::Value nan_to_num(ir::Graph& g, ir::Value x, ir::Value nan, ir::Value posinf, ir::Value neginf);
// clamp with optional bounds; any NaN operand gives NaN, as ATen.
ir::Value clamp(ir::Graph& g, ir::Value x, std::optional<ir::Value> lo, std::optional<ir::Value> hi);
// ATen's lerp: exact at both ends (switches formula at |weight| = 0.5). A weight
// known on the host (`weight_is_small`: |weight| < 0.5) builds only its formula.
ir::Value lerp(ir::Graph& g, ir::Value self, ir::Value end, ir::Value weight,
               std::optional<bool> weight_is_small = std::nullopt);
ir::Value logit(ir::Graph& g, ir::Value x, std::optional<ir::Value> eps);
ir::Value logit_backward(ir::Graph& g, ir::Value grad, ir::Value x, std::optional<ir::Value> eps);

// ------------------------------------------------------------ activations and their gradients

ir::Value gelu(ir::Graph& g, ir::Value x, bool tanh_approximation);
ir::Value gelu_backward(ir::Graph& g, ir::Value grad, ir::Value x, bool tanh_approximation);
ir::Value silu(ir::Graph& g, ir::Value x);
ir::Value silu_backward(ir::Graph& g, ir::Value grad, ir::Value x);
ir::Value sigmoid_backward(ir::Graph& g, ir::Value grad, ir::Value output);
ir::Value tanh_backward(ir::Graph& g, ir::Value grad, ir::Value output);
ir::Value hardtanh_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value lo, ir::Value hi);
ir::Value leaky_relu(ir::Graph& g, ir::Value x, ir::Value slope);
ir::Value leaky_relu_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value slope);
ir::Value elu(ir::Graph& g, ir::Value x, ir::Value alpha, ir::Value scale, ir::Value input_scale);
// `x_or_result` is the input, or the forward's result when `is_result`.
ir::Value elu_backward(ir::Graph& g, ir::Value grad, ir::Value x_or_result, ir::Value alpha, ir::Value scale,
                       ir::Value input_scale, bool is_result);
ir::Value softplus(ir::Graph& g, ir::Value x, ir::Value beta, ir::Value threshold);
ir::Value softplus_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value beta, ir::Value threshold);
ir::Value hardswish(ir::Graph& g, ir::Value x);
ir::Value hardswish_backward(ir::Graph& g, ir::Value grad, ir::Value x);
ir::Value hardsigmoid(ir::Graph& g, ir::Value x);
ir::Value hardsigmoid_backward(ir::Graph& g, ir::Value grad, ir::Value x);
ir::Value mish(ir::Graph& g, ir::Value x);

}  // namespace tpu::lowering
