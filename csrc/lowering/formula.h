// Terse, same-typed arithmetic on IR values, so composite lowerings read like
// the formulas of ATen's CPU kernels they reproduce.
#pragma once

#include <cmath>

#include "lowering/elementwise.h"

namespace tpu::lowering {

struct Formula {
  ir::Graph& g;
  using Value = ir::Value;

  Value add(Value a, Value b) { return ir::binary(g, "stablehlo.add", a, b); }
  Value sub(Value a, Value b) { return ir::binary(g, "stablehlo.subtract", a, b); }
  Value mul(Value a, Value b) { return ir::binary(g, "stablehlo.multiply", a, b); }
  Value div(Value a, Value b) { return ir::binary(g, "stablehlo.divide", a, b); }
  Value pow(Value a, Value b) { return ir::binary(g, "stablehlo.power", a, b); }
  Value rem(Value a, Value b) { return ir::binary(g, "stablehlo.remainder", a, b); }
  Value max(Value a, Value b) { return nan_max(g, a, b); }  // NaN-propagating, as ATen
  Value min(Value a, Value b) { return nan_min(g, a, b); }
  Value un(const char* op, Value x) { return ir::unary(g, op, x); }
  Value exp(Value x) { return un("stablehlo.exponential", x); }
  Value log(Value x) { return un("stablehlo.log", x); }
  Value log1p(Value x) { return un("stablehlo.log_plus_one", x); }
  Value sqrt(Value x) { return un("stablehlo.sqrt", x); }
  Value tanh(Value x) { return un("stablehlo.tanh", x); }
  Value abs(Value x) { return un("stablehlo.abs", x); }
  Value neg(Value x) { return un("stablehlo.negate", x); }
  Value sin(Value x) { return un("stablehlo.sine", x); }
  Value cos(Value x) { return un("stablehlo.cosine", x); }
  Value tan(Value x) { return un("stablehlo.tan", x); }
  Value floor(Value x) { return un("stablehlo.floor", x); }
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
  Value and_(Value a, Value b) { return ir::binary(g, "stablehlo.and", a, b); }
  Value or_(Value a, Value b) { return ir::binary(g, "stablehlo.or", a, b); }
  Value not_(Value a) { return un("stablehlo.not", a); }
  Value sel(Value p, Value a, Value b) { return ir::select(g, p, a, b); }
  Value sel(Value p, double a, Value b) { return sel(p, c(b, a), b); }
  Value pred(Value like, bool v) { return ir::full(g, ir::DType::Pred, v ? 1 : 0, g.type(like).shape); }
  Value isnan(Value x) { return ne(x, x); }
  Value isinf(Value x) { return eq(abs(x), INFINITY); }
  bool is_float(Value x) { return ir::is_floating(g.type(x).dtype); }
};

}  // namespace tpu::lowering
