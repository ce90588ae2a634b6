// Terse, same-typed arithmetic on IR values, so composite lowerings read like
// the formulas of ATen's CPU kernels they reproduce.
#pragma once

#include <cmath>

#include "lowering/elementwise.h"

namespace tpu::lowering {

struct Formula {
  ir::Graph& g;
  using Value = ir::Value;

  Value add(Value a, Value b) { return ir::binary(g, ir::Op::Add, a, b); }
  Value sub(Value a, Value b) { return ir::binary(g, ir::Op::Subtract, a, b); }
  Value mul(Value a, Value b) { return ir::binary(g, ir::Op::Multiply, a, b); }
  Value div(Value a, Value b) { return ir::binary(g, ir::Op::Divide, a, b); }
  Value pow(Value a, Value b) { return ir::binary(g, ir::Op::Power, a, b); }
  Value rem(Value a, Value b) { return ir::binary(g, ir::Op::Remainder, a, b); }
  Value max(Value a, Value b) { return nan_max(g, a, b); }  // NaN-propagating, as ATen
  Value min(Value a, Value b) { return nan_min(g, a, b); }
  Value un(ir::Op op, Value x) { return ir::unary(g, op, x); }
  Value exp(Value x) { return un(ir::Op::Exponential, x); }
  Value log(Value x) { return un(ir::Op::Log, x); }
  Value log1p(Value x) { return un(ir::Op::LogPlusOne, x); }
  Value sqrt(Value x) { return un(ir::Op::Sqrt, x); }
  Value tanh(Value x) { return un(ir::Op::Tanh, x); }
  Value abs(Value x) { return un(ir::Op::Abs, x); }
  Value neg(Value x) { return un(ir::Op::Negate, x); }
  Value sin(Value x) { return un(ir::Op::Sine, x); }
  Value cos(Value x) { return un(ir::Op::Cosine, x); }
  Value tan(Value x) { return un(ir::Op::Tan, x); }
  Value floor(Value x) { return un(ir::Op::Floor, x); }
  Value c(Value like, double v) { return splat(g, like, v); }
  Value cmp(Value a, Value b, ir::Compare d) { return ir::compare(g, a, b, d); }
  Value lt(Value a, Value b) { return cmp(a, b, ir::Compare::LT); }
  Value le(Value a, Value b) { return cmp(a, b, ir::Compare::LE); }
  Value gt(Value a, Value b) { return cmp(a, b, ir::Compare::GT); }
  Value ge(Value a, Value b) { return cmp(a, b, ir::Compare::GE); }
  Value eq(Value a, Value b) { return cmp(a, b, ir::Compare::EQ); }
  Value ne(Value a, Value b) { return cmp(a, b, ir::Compare::NE); }
  Value lt(Value a, double b) { return lt(a, c(a, b)); }
  Value le(Value a, double b) { return le(a, c(a, b)); }
  Value gt(Value a, double b) { return gt(a, c(a, b)); }
  Value ge(Value a, double b) { return ge(a, c(a, b)); }
  Value eq(Value a, double b) { return eq(a, c(a, b)); }
  Value ne(Value a, double b) { return ne(a, c(a, b)); }
  Value and_(Value a, Value b) { return ir::binary(g, ir::Op::And, a, b); }
  Value or_(Value a, Value b) { return ir::binary(g, ir::Op::Or, a, b); }
  Value not_(Value a) { return un(ir::Op::Not, a); }
  Value sel(Value p, Value a, Value b) { return ir::select(g, p, a, b); }
  Value sel(Value p, double a, Value b) { return sel(p, c(b, a), b); }
  Value pred(Value like, bool v) { return ir::full(g, ir::DType::Pred, v ? 1 : 0, g.type(like).shape); }
  Value isnan(Value x) { return ne(x, x); }
  Value isinf(Value x) { return eq(abs(x), INFINITY); }
  bool is_float(Value x) { return ir::is_floating(g.type(x).dtype); }
};

}  // namespace tpu::lowering
