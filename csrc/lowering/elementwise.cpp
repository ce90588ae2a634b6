#include "lowering/elementwise.h"

#include <stdexcept>

namespace tpu::lowering {
namespace {

using ir::Value;

Value zeros_like(ir::Graph& g, Value x) { return ir::full(g, g.type(x).dtype, 0, g.type(x).shape); }
Value ones_like(ir::Graph& g, Value x) { return ir::full(g, g.type(x).dtype, 1, g.type(x).shape); }
Value lt_zero(ir::Graph& g, Value x) { return ir::compare(g, x, zeros_like(g, x), ir::Compare::LT); }

// Python's floor division, matching ATen's div_floor for both integer and
// floating operands (including its rounding of the quotient).
Value floor_divide(ir::Graph& g, Value a, Value b) {
  ir::DType dtype = g.type(a).dtype;
  Value zero = zeros_like(g, a);
  if (!ir::is_floating(dtype)) {
    Value q = ir::binary(g, "stablehlo.divide", a, b);
    Value r = ir::binary(g, "stablehlo.remainder", a, b);
    Value inexact = ir::compare(g, r, zero, ir::Compare::NE);
    Value signs_differ = ir::compare(g, lt_zero(g, a), lt_zero(g, b), ir::Compare::NE);
    Value adjust = ir::binary(g, "stablehlo.and", inexact, signs_differ);
    return ir::select(g, adjust, ir::binary(g, "stablehlo.subtract", q, ones_like(g, q)), q);
  }
  Value mod = ir::binary(g, "stablehlo.remainder", a, b);
  Value div = ir::binary(g, "stablehlo.divide", ir::binary(g, "stablehlo.subtract", a, mod), b);
  Value mod_nonzero = ir::compare(g, mod, zero, ir::Compare::NE);
  Value signs_differ = ir::compare(g, lt_zero(g, b), lt_zero(g, mod), ir::Compare::NE);
  div = ir::select(g, ir::binary(g, "stablehlo.and", mod_nonzero, signs_differ),
                   ir::binary(g, "stablehlo.subtract", div, ones_like(g, div)), div);
  Value floored = ir::unary(g, "stablehlo.floor", div);
  Value half = ir::full(g, dtype, 0.5, g.type(a).shape);
  Value round_up = ir::compare(g, ir::binary(g, "stablehlo.subtract", div, floored), half, ir::Compare::GT);
  floored = ir::select(g, round_up, ir::binary(g, "stablehlo.add", floored, ones_like(g, floored)), floored);
  // A zero quotient takes the sign of the true quotient.
  Value true_quotient = ir::binary(g, "stablehlo.divide", a, b);
  Value signed_zero = ir::select(g, lt_zero(g, true_quotient), ir::full(g, dtype, -0.0, g.type(a).shape), zero);
  Value div_is_zero = ir::compare(g, div, zero, ir::Compare::EQ);
  Value result = ir::select(g, div_is_zero, signed_zero, floored);
  // Division by zero: IEEE result of a / b.
  Value b_zero = ir::compare(g, b, zero, ir::Compare::EQ);
  return ir::select(g, b_zero, true_quotient, result);
}

// Python's remainder: the result takes the divisor's sign.
Value python_remainder(ir::Graph& g, Value a, Value b) {
  Value r = ir::binary(g, "stablehlo.remainder", a, b);
  Value zero = zeros_like(g, a);
  Value nonzero = ir::compare(g, r, zero, ir::Compare::NE);
  Value signs_differ = ir::compare(g, lt_zero(g, r), lt_zero(g, b), ir::Compare::NE);
  return ir::select(g, ir::binary(g, "stablehlo.and", nonzero, signs_differ), ir::binary(g, "stablehlo.add", r, b), r);
}

}  // namespace

Value binary(ir::Graph& g, Binary op, Value a, Value b) {
  bool is_bool = g.type(a).dtype == ir::DType::Pred;
  switch (op) {
    case Binary::Add: return ir::binary(g, is_bool ? "stablehlo.or" : "stablehlo.add", a, b);
    case Binary::Sub: return ir::binary(g, "stablehlo.subtract", a, b);
    case Binary::Mul: return ir::binary(g, is_bool ? "stablehlo.and" : "stablehlo.multiply", a, b);
    case Binary::Div: return ir::binary(g, "stablehlo.divide", a, b);
    case Binary::TruncDiv: {
      Value q = ir::binary(g, "stablehlo.divide", a, b);
      if (!ir::is_floating(g.type(a).dtype)) return q;  // integer division truncates
      return ir::select(g, lt_zero(g, q), ir::unary(g, "stablehlo.ceil", q), ir::unary(g, "stablehlo.floor", q));
    }
    case Binary::FloorDiv: return floor_divide(g, a, b);
    case Binary::Max: return ir::binary(g, is_bool ? "stablehlo.or" : "stablehlo.maximum", a, b);
    case Binary::Min: return ir::binary(g, is_bool ? "stablehlo.and" : "stablehlo.minimum", a, b);
    case Binary::Pow: return ir::binary(g, "stablehlo.power", a, b);
    case Binary::Remainder: return python_remainder(g, a, b);
  }
  throw std::logic_error("unknown binary op");
}

bool unary_needs_float(Unary op) {
  return op != Unary::Neg && op != Unary::Abs && op != Unary::Relu;
}

Value unary(ir::Graph& g, Unary op, Value x) {
  switch (op) {
    case Unary::Neg: return ir::unary(g, "stablehlo.negate", x);
    case Unary::Abs: return ir::unary(g, "stablehlo.abs", x);
    case Unary::Exp: return ir::unary(g, "stablehlo.exponential", x);
    case Unary::Log: return ir::unary(g, "stablehlo.log", x);
    case Unary::Sqrt: return ir::unary(g, "stablehlo.sqrt", x);
    case Unary::Rsqrt: return ir::unary(g, "stablehlo.rsqrt", x);
    case Unary::Tanh: return ir::unary(g, "stablehlo.tanh", x);
    case Unary::Sigmoid: return ir::unary(g, "stablehlo.logistic", x);
    case Unary::Relu: {
      // NaN stays NaN, as in ATen's clamp_min(0).
      Value zero = zeros_like(g, x);
      return ir::select(g, ir::compare(g, x, zero, ir::Compare::LT), zero, x);
    }
  }
  throw std::logic_error("unknown unary op");
}

Value compare(ir::Graph& g, ir::Compare op, Value a, Value b) { return ir::compare(g, a, b, op); }

Value where(ir::Graph& g, Value cond, Value a, Value b) { return ir::select(g, cond, a, b); }

Value scale(ir::Graph& g, Value x, Value s) {
  const ir::Type& t = g.type(x);
  return binary(g, Binary::Mul, x, ir::broadcast_in_dim(g, s, t.shape, {}));
}

}  // namespace tpu::lowering
