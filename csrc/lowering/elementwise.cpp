#include "lowering/elementwise.h"

#include <cmath>
#include <stdexcept>

#include "lowering/formula.h"

namespace tpu::lowering {

using ir::Value;

namespace {

using Ops = Formula;

Value lt_zero(ir::Graph& g, Value x) { return ir::compare(g, x, splat(g, x, 0), ir::Compare::LT); }

// Python's floor division, matching ATen's div_floor for both integer and
// floating operands (including its rounding of the quotient).
Value floor_divide(ir::Graph& g, Value a, Value b) {
  Ops o{g};
  Value zero = o.c(a, 0);
  if (!o.is_float(a)) {
    Value q = o.div(a, b);
    Value r = ir::binary(g, ir::Op::Remainder, a, b);
    Value inexact = o.ne(r, zero);
    Value signs_differ = o.ne(lt_zero(g, a), lt_zero(g, b));
    return o.sel(o.and_(inexact, signs_differ), o.sub(q, o.c(q, 1)), q);
  }
  Value mod = ir::binary(g, ir::Op::Remainder, a, b);
  Value div = o.div(o.sub(a, mod), b);
  Value mod_nonzero = o.ne(mod, zero);
  Value signs_differ = o.ne(lt_zero(g, b), lt_zero(g, mod));
  div = o.sel(o.and_(mod_nonzero, signs_differ), o.sub(div, o.c(div, 1)), div);
  Value floored = o.un(ir::Op::Floor, div);
  Value round_up = o.gt(o.sub(div, floored), o.c(a, 0.5));
  floored = o.sel(round_up, o.add(floored, o.c(floored, 1)), floored);
  // A zero quotient takes the sign of the true quotient.
  Value true_quotient = o.div(a, b);
  Value signed_zero = o.sel(lt_zero(g, true_quotient), o.c(a, -0.0), zero);
  Value result = o.sel(o.eq(div, zero), signed_zero, floored);
  // Division by zero: IEEE result of a / b.
  return o.sel(o.eq(b, zero), true_quotient, result);
}

// Python's remainder: the result takes the divisor's sign.
Value python_remainder(ir::Graph& g, Value a, Value b) {
  Ops o{g};
  Value r = ir::binary(g, ir::Op::Remainder, a, b);
  Value nonzero = o.ne(r, o.c(a, 0));
  Value signs_differ = o.ne(lt_zero(g, r), lt_zero(g, b));
  return o.sel(o.and_(nonzero, signs_differ), o.add(r, b), r);
}

// C's pow for floats (pow(x, 0) == pow(1, y) == pow(-1, +-inf) == 1, also for
// NaN), and ATen's integer pow: negative exponents give 0 except for bases 1
// and -1; overflow wraps.
Value power(ir::Graph& g, Value a, Value b) {
  Ops o{g};
  Value p = ir::binary(g, ir::Op::Power, a, b);
  ir::DType dtype = g.type(a).dtype;
  Value one = o.c(a, 1);
  if (ir::is_floating(dtype)) {
    Value exact_one = o.or_(o.eq(b, o.c(b, 0)), o.eq(a, one));
    Value minus_one_inf = o.and_(o.eq(a, o.c(a, -1)), o.eq(o.abs(b), o.c(b, INFINITY)));
    return o.sel(o.or_(exact_one, minus_one_inf), one, p);
  }
  if (ir::is_unsigned(dtype)) return p;
  Value odd = o.ne(o.and_(b, o.c(b, 1)), o.c(b, 0));
  Value minus_one = o.c(a, -1);
  Value negative_power = o.sel(o.eq(a, one), one, o.sel(o.eq(a, minus_one), o.sel(odd, minus_one, one), o.c(a, 0)));
  return o.sel(lt_zero(g, b), negative_power, p);
}

// fmax/fmin: a NaN operand yields the other one.
Value ignore_nan(ir::Graph& g, Value a, Value b, Value m) {
  Ops o{g};
  if (g.type(a).dtype == ir::DType::Pred) return m;
  if (!o.is_float(a)) return m;
  return o.sel(is_nan(g, a), b, o.sel(is_nan(g, b), a, m));
}

Value hypot(ir::Graph& g, Value a, Value b) {
  // Scaled to avoid overflow of a*a + b*b; infinities win over NaN, as in C.
  Ops o{g};
  Value ax = o.abs(a), ay = o.abs(b);
  Value m = nan_max(g, ax, ay), n = nan_min(g, ax, ay);
  Value r = o.div(n, m);
  Value h = o.mul(m, o.un(ir::Op::Sqrt, o.add(o.c(a, 1), o.mul(r, r))));
  Value zero = o.c(a, 0), inf = o.c(a, INFINITY);
  h = o.sel(o.eq(m, zero), zero, h);
  return o.sel(o.or_(o.eq(ax, inf), o.eq(ay, inf)), inf, h);
}

Value to_pred(ir::Graph& g, Value x) {
  Ops o{g};
  if (g.type(x).dtype == ir::DType::Pred) return x;
  return o.ne(x, o.c(x, 0));
}

// exp2/log2/log10 through natural exp/log, which every backend has.
constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLn10 = 2.30258509299404568402;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

// XLA's erf_inv (a few ulp off, ~50 near +-1) refined by one Newton step on
// erf(y) = |x|. Near 1 the residual is taken as (1 - |x|) - erfc(y), which
// keeps its digits: about half an ulp, as ATen's.
Value erfinv(ir::Graph& g, Value x) {
  Ops o{g};
  Value a = o.abs(x);
  Value y = o.un(ir::Op::ErfInv, a);
  auto newton = [&](Value y) {  // a second step gains nothing measurable in float32
    Value residual = o.sel(o.gt(a, 0.5), o.sub(o.sub(o.c(a, 1), a), o.un(ir::Op::Erfc, y)),
                           o.sub(o.un(ir::Op::Erf, y), a));
    Value slope = o.mul(o.c(y, kTwoOverSqrtPi), o.exp(o.neg(o.mul(y, y))));
    return o.sub(y, o.div(residual, slope));
  };
  // |x| >= 1 (y infinite) and NaN keep XLA's value; sign(x) restores the sign, -0 included.
  Value magnitude = o.sel(o.lt(a, 1), newton(y), y);
  return o.mul(magnitude, o.un(ir::Op::Sign, x));
}

}  // namespace

// ------------------------------------------------------------ dtype rules

c10::ScalarType opmath_type(c10::ScalarType t) {
  return (t == c10::kHalf || t == c10::kBFloat16) ? c10::kFloat : t;
}

// ------------------------------------------------------------ building blocks

Value splat(ir::Graph& g, Value like, double value) {
  const ir::Type& t = g.type(like);
  return ir::full(g, t.dtype, value, t.shape);
}

Value is_nan(ir::Graph& g, Value x) {
  Ops o{g};
  if (!o.is_float(x)) return o.pred(x, false);
  return o.ne(x, x);
}

Value signbit(ir::Graph& g, Value x) {
  Ops o{g};
  const ir::Type& t = g.type(x);
  if (ir::is_floating(t.dtype)) {
    // The sign bit itself: true for -0.0 and negative NaNs too.
    ir::DType as_int = ir::byte_width(t.dtype) == 8 ? ir::DType::S64
                       : ir::byte_width(t.dtype) == 4 ? ir::DType::S32
                                                      : ir::DType::S16;
    Value bits = ir::bitcast_convert(g, x, as_int, t.shape);
    return lt_zero(g, bits);
  }
  if (ir::is_unsigned(t.dtype) || t.dtype == ir::DType::Pred) return o.pred(x, false);
  return lt_zero(g, x);
}

Value trunc(ir::Graph& g, Value x) {
  Ops o{g};
  if (!o.is_float(x)) return x;
  return o.sel(lt_zero(g, x), o.un(ir::Op::Ceil, x), o.un(ir::Op::Floor, x));
}

// XLA's maximum/minimum keep NaN only from some operand positions (XLA:CPU
// returns the other operand when the second one is NaN), so NaNs are
// propagated explicitly.
Value propagate_nan(ir::Graph& g, Value a, Value b, Value m) {
  Ops o{g};
  if (!o.is_float(a)) return m;
  return o.sel(is_nan(g, a), a, o.sel(is_nan(g, b), b, m));
}

Value nan_max(ir::Graph& g, Value a, Value b) {
  if (g.type(a).dtype == ir::DType::Pred) return ir::binary(g, ir::Op::Or, a, b);
  return propagate_nan(g, a, b, ir::binary(g, ir::Op::Maximum, a, b));
}

Value nan_min(ir::Graph& g, Value a, Value b) {
  if (g.type(a).dtype == ir::DType::Pred) return ir::binary(g, ir::Op::And, a, b);
  return propagate_nan(g, a, b, ir::binary(g, ir::Op::Minimum, a, b));
}

// ------------------------------------------------------------ unary / binary tables

Value binary(ir::Graph& g, Binary op, Value a, Value b) {
  Ops o{g};
  bool is_bool = g.type(a).dtype == ir::DType::Pred;
  switch (op) {
    case Binary::Add: return ir::binary(g, is_bool ? ir::Op::Or : ir::Op::Add, a, b);
    case Binary::Sub: return o.sub(a, b);
    case Binary::Mul: return ir::binary(g, is_bool ? ir::Op::And : ir::Op::Multiply, a, b);
    case Binary::Div: return o.div(a, b);
    case Binary::TruncDiv: return trunc(g, o.div(a, b));  // integer division already truncates
    case Binary::FloorDiv: return floor_divide(g, a, b);
    case Binary::Max: return nan_max(g, a, b);
    case Binary::Min: return nan_min(g, a, b);
    case Binary::Pow: return power(g, a, b);
    case Binary::Remainder: return python_remainder(g, a, b);
    case Binary::FMax: return ignore_nan(g, a, b, ir::binary(g, ir::Op::Maximum, a, b));
    case Binary::FMin: return ignore_nan(g, a, b, ir::binary(g, ir::Op::Minimum, a, b));
    case Binary::FMod: return ir::binary(g, ir::Op::Remainder, a, b);  // C fmod: truncated
    case Binary::Atan2: return ir::binary(g, ir::Op::Atan2, a, b);
    case Binary::CopySign: {
      Value magnitude = o.abs(a);
      return o.sel(signbit(g, b), o.neg(magnitude), magnitude);
    }
    case Binary::Hypot: return hypot(g, a, b);
    case Binary::BitAnd: return ir::binary(g, ir::Op::And, a, b);
    case Binary::BitOr: return ir::binary(g, ir::Op::Or, a, b);
    case Binary::BitXor: return ir::binary(g, ir::Op::Xor, a, b);
    // Shift counts outside [0, bits) give 0 (or the sign fill), as in ATen.
    case Binary::ShiftLeft: return ir::binary(g, ir::Op::ShiftLeft, a, b);
    case Binary::ShiftRight:
      return ir::binary(g, ir::is_unsigned(g.type(a).dtype) ? ir::Op::ShiftRightLogical
                                                             : ir::Op::ShiftRightArithmetic,
                        a, b);
    case Binary::LogicalAnd: return o.and_(to_pred(g, a), to_pred(g, b));
    case Binary::LogicalOr: return o.or_(to_pred(g, a), to_pred(g, b));
    case Binary::LogicalXor: return ir::binary(g, ir::Op::Xor, to_pred(g, a), to_pred(g, b));
  }
  throw std::logic_error("unknown binary op");
}

bool binary_is_predicate(Binary op) {
  return op == Binary::LogicalAnd || op == Binary::LogicalOr || op == Binary::LogicalXor;
}

bool unary_needs_float(Unary op) {
  switch (op) {
    case Unary::Neg: case Unary::Abs: case Unary::Relu:
    case Unary::Floor: case Unary::Ceil: case Unary::Round: case Unary::Trunc: case Unary::Frac:
    case Unary::Sign: case Unary::BitwiseNot:
    case Unary::LogicalNot: case Unary::IsNan: case Unary::IsPosInf: case Unary::IsNegInf: case Unary::SignBit:
      return false;
    default: return true;
  }
}

bool unary_is_predicate(Unary op) {
  return op == Unary::LogicalNot || op == Unary::IsNan || op == Unary::IsPosInf || op == Unary::IsNegInf ||
         op == Unary::SignBit;
}

Value unary(ir::Graph& g, Unary op, Value x) {
  Ops o{g};
  bool fp = o.is_float(x);
  switch (op) {
    // StableHLO's negate/abs take no unsigned (or bool) operands: wrap as C does.
    case Unary::Neg: return ir::is_unsigned(g.type(x).dtype) ? o.sub(o.c(x, 0), x) : o.neg(x);
    case Unary::Abs:
      if (ir::is_complex(g.type(x).dtype)) return ir::complex_abs(g, x);
      return ir::is_unsigned(g.type(x).dtype) || g.type(x).dtype == ir::DType::Pred ? x : o.abs(x);
    case Unary::Exp: return o.exp(x);
    case Unary::Log: return o.un(ir::Op::Log, x);
    case Unary::Sqrt: return o.un(ir::Op::Sqrt, x);
    case Unary::Rsqrt: return o.un(ir::Op::Rsqrt, x);
    case Unary::Tanh: return o.tanh(x);
    case Unary::Sigmoid: return o.un(ir::Op::Logistic, x);
    case Unary::Relu: {
      // NaN stays NaN, as in ATen's clamp_min(0).
      Value zero = o.c(x, 0);
      return o.sel(o.lt(x, zero), zero, x);
    }
    case Unary::Sin: return o.un(ir::Op::Sine, x);
    case Unary::Cos: return o.un(ir::Op::Cosine, x);
    case Unary::Tan: return o.un(ir::Op::Tan, x);
    // CHLO ops: XLA expands them into accurate StableHLO (as JAX uses them).
    case Unary::Asin: return o.un(ir::Op::Asin, x);
    case Unary::Acos: return o.un(ir::Op::Acos, x);
    case Unary::Atan: return o.un(ir::Op::Atan, x);
    case Unary::Sinh: return o.un(ir::Op::Sinh, x);
    case Unary::Cosh: return o.un(ir::Op::Cosh, x);
    case Unary::Asinh: return o.un(ir::Op::Asinh, x);
    case Unary::Acosh: return o.un(ir::Op::Acosh, x);
    case Unary::Atanh: return o.un(ir::Op::Atanh, x);
    case Unary::Erf: return o.un(ir::Op::Erf, x);
    case Unary::Erfinv: return erfinv(g, x);
    case Unary::Log1p: return o.un(ir::Op::LogPlusOne, x);
    case Unary::Expm1: return o.un(ir::Op::ExponentialMinusOne, x);
    case Unary::Log2: return o.div(o.un(ir::Op::Log, x), o.c(x, kLn2));
    case Unary::Log10: return o.div(o.un(ir::Op::Log, x), o.c(x, kLn10));
    case Unary::Exp2: return power(g, o.c(x, 2), x);
    case Unary::Reciprocal: return o.div(o.c(x, 1), x);
    case Unary::Floor: return fp ? o.un(ir::Op::Floor, x) : x;
    case Unary::Ceil: return fp ? o.un(ir::Op::Ceil, x) : x;
    case Unary::Round: return fp ? o.un(ir::Op::RoundNearestEven, x) : x;
    case Unary::Trunc: return trunc(g, x);
    case Unary::Frac: return o.sub(x, trunc(g, x));
    case Unary::Sign: {
      // (0 < x) - (x < 0): NaN and -0.0 give +0, bool is unchanged.
      if (g.type(x).dtype == ir::DType::Pred) return x;
      if (ir::is_complex(g.type(x).dtype)) return complex_sgn(g, x);
      Value zero = o.c(x, 0);
      Value positive = o.sel(o.gt(x, zero), o.c(x, 1), zero);
      if (ir::is_unsigned(g.type(x).dtype)) return positive;
      return o.sel(o.lt(x, zero), o.c(x, -1), positive);
    }
    case Unary::BitwiseNot: return o.un(ir::Op::Not, x);
    case Unary::LogicalNot: return g.type(x).dtype == ir::DType::Pred ? o.un(ir::Op::Not, x) : o.eq(x, o.c(x, 0));
    case Unary::IsNan: return is_nan(g, x);
    case Unary::IsPosInf: return fp ? o.eq(x, o.c(x, INFINITY)) : o.pred(x, false);
    case Unary::IsNegInf: return fp ? o.eq(x, o.c(x, -INFINITY)) : o.pred(x, false);
    case Unary::SignBit: return signbit(g, x);
  }
  throw std::logic_error("unknown unary op");
}

// ------------------------------------------------------------ complex

Value conj(ir::Graph& g, Value x) {
  if (!ir::is_complex(g.type(x).dtype)) return x;
  return ir::complex(g, ir::real(g, x), ir::unary(g, ir::Op::Negate, ir::imag(g, x)));
}

Value complex_sgn(ir::Graph& g, Value x) {
  Ops o{g};
  Value magnitude = ir::complex_abs(g, x);
  Value zero = o.c(magnitude, 0);
  Value is_zero = o.eq(magnitude, zero);
  // Divide by a safe magnitude so that x == 0 gives 0, not NaN.
  Value safe = o.sel(is_zero, o.c(magnitude, 1), magnitude);
  Value r = ir::complex(g, o.div(ir::real(g, x), safe), o.div(ir::imag(g, x), safe));
  return o.sel(is_zero, o.c(r, 0), r);
}

Value polar(ir::Graph& g, Value abs, Value angle) {
  Ops o{g};
  return ir::complex(g, o.mul(abs, o.cos(angle)), o.mul(abs, o.sin(angle)));
}

Value compare(ir::Graph& g, ir::Compare op, Value a, Value b) { return ir::compare(g, a, b, op); }

Value where(ir::Graph& g, Value cond, Value a, Value b) { return ir::select(g, cond, a, b); }

Value scale(ir::Graph& g, Value x, Value s) {
  const ir::Type& t = g.type(x);
  return binary(g, Binary::Mul, x, ir::broadcast_in_dim(g, s, t.shape, {}));
}

// ------------------------------------------------------------ composite math

Value round_decimals(ir::Graph& g, Value x, int64_t decimals) {
  Ops o{g};
  Value ten_pow = o.c(x, std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals)));
  Value scaled = decimals < 0 ? o.div(x, ten_pow) : o.mul(x, ten_pow);
  Value r = o.un(ir::Op::RoundNearestEven, scaled);
  return decimals < 0 ? o.mul(r, ten_pow) : o.div(r, ten_pow);
}

Value nan_to_num(ir::Graph& g, Value x, Value nan, Value posinf, Value neginf) {
  Ops o{g};
  if (!o.is_float(x)) return x;
  Value r = o.sel(o.eq(x, o.c(x, INFINITY)), posinf, x);
  r = o.sel(o.eq(x, o.c(x, -INFINITY)), neginf, r);
  return o.sel(is_nan(g, x), nan, r);
}

Value clamp(ir::Graph& g, Value x, std::optional<Value> lo, std::optional<Value> hi) {
  if (lo) x = nan_max(g, x, *lo);
  if (hi) x = nan_min(g, x, *hi);
  return x;
}

Value lerp(ir::Graph& g, Value self, Value end, Value weight, std::optional<bool> weight_is_small) {
  Ops o{g};
  Value diff = o.sub(end, self);
  auto from_self = [&] { return o.add(self, o.mul(weight, diff)); };
  auto from_end = [&] { return o.sub(end, o.mul(diff, o.sub(o.c(weight, 1), weight))); };
  if (weight_is_small) return *weight_is_small ? from_self() : from_end();
  return o.sel(o.lt(o.abs(weight), o.c(weight, 0.5)), from_self(), from_end());
}

Value logit(ir::Graph& g, Value x, std::optional<Value> eps) {
  Ops o{g};
  if (eps) x = clamp(g, x, *eps, o.sub(o.c(x, 1), *eps));
  return o.un(ir::Op::Log, o.div(x, o.sub(o.c(x, 1), x)));
}

Value logit_backward(ir::Graph& g, Value grad, Value x, std::optional<Value> eps) {
  Ops o{g};
  Value one = o.c(x, 1);
  Value dx = o.div(grad, o.mul(x, o.sub(one, x)));
  if (!eps) return o.sel(o.or_(o.lt(x, o.c(x, 0)), o.gt(x, one)), o.c(x, NAN), dx);
  Value outside = o.or_(o.lt(x, *eps), o.gt(x, o.sub(one, *eps)));
  return o.sel(outside, o.c(x, 0), dx);
}

// ------------------------------------------------------------ activations and their gradients

namespace {
constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kKappa = 0.044715;
}  // namespace

Value gelu(ir::Graph& g, Value x, bool tanh_approximation) {
  Ops o{g};
  if (tanh_approximation) {
    double beta = kSqrt2 * kTwoOverSqrtPi * 0.5;
    Value cube = o.mul(o.mul(x, x), x);
    Value inner = o.mul(o.c(x, beta), o.add(x, o.mul(o.c(x, kKappa), cube)));
    return o.mul(o.mul(o.c(x, 0.5), x), o.add(o.c(x, 1), o.tanh(inner)));
  }
  // 1 + erf(x/sqrt2) as erfc(-x/sqrt2): no cancellation for negative x, and
  // exactly 0 at -inf (gelu(-inf) is NaN, as on CPU).
  Value cdf = o.un(ir::Op::Erfc, o.mul(x, o.c(x, -kSqrt1_2)));
  return o.mul(o.mul(x, o.c(x, 0.5)), cdf);
}

Value gelu_backward(ir::Graph& g, Value grad, Value x, bool tanh_approximation) {
  Ops o{g};
  Value one = o.c(x, 1), half = o.c(x, 0.5);
  if (tanh_approximation) {
    double beta = kSqrt2 * kTwoOverSqrtPi * 0.5;
    Value x_sq = o.mul(x, x);
    Value inner = o.mul(o.c(x, beta), o.add(x, o.mul(o.c(x, kKappa), o.mul(x_sq, x))));
    Value t = o.tanh(inner);
    Value left = o.mul(half, x);
    Value right = o.add(one, t);
    Value left_derivative = o.mul(half, right);
    Value tanh_derivative = o.sub(one, o.mul(t, t));
    Value inner_derivative = o.mul(o.c(x, beta), o.add(one, o.mul(o.c(x, 3 * kKappa), x_sq)));
    Value right_derivative = o.mul(o.mul(left, tanh_derivative), inner_derivative);
    return o.mul(grad, o.add(left_derivative, right_derivative));
  }
  double beta = kTwoOverSqrtPi * kSqrt1_2 * 0.5;
  Value cdf = o.mul(half, o.un(ir::Op::Erfc, o.mul(x, o.c(x, -kSqrt1_2))));
  Value pdf = o.mul(o.c(x, beta), o.exp(o.mul(o.mul(x, x), o.c(x, -0.5))));
  return o.mul(grad, o.add(cdf, o.mul(x, pdf)));
}

Value silu(ir::Graph& g, Value x) {
  Ops o{g};
  return o.div(x, o.add(o.c(x, 1), o.exp(o.neg(x))));
}

Value silu_backward(ir::Graph& g, Value grad, Value x) {
  Ops o{g};
  Value one = o.c(x, 1);
  Value s = o.div(one, o.add(one, o.exp(o.neg(x))));
  return o.mul(o.mul(grad, s), o.add(one, o.mul(x, o.sub(one, s))));
}

Value sigmoid_backward(ir::Graph& g, Value grad, Value output) {
  Ops o{g};
  return o.mul(o.mul(grad, o.sub(o.c(output, 1), output)), output);
}

Value tanh_backward(ir::Graph& g, Value grad, Value output) {
  Ops o{g};
  // Complex autograd takes the conjugate derivative (identity for real values).
  return o.mul(grad, conj(g, o.sub(o.c(output, 1), o.mul(output, output))));
}

Value hardtanh_backward(ir::Graph& g, Value grad, Value x, Value lo, Value hi) {
  Ops o{g};
  return o.sel(o.or_(o.le(x, lo), o.ge(x, hi)), o.c(grad, 0), grad);
}

Value leaky_relu(ir::Graph& g, Value x, Value slope) {
  Ops o{g};
  return o.sel(o.gt(x, o.c(x, 0)), x, o.mul(x, slope));
}

Value leaky_relu_backward(ir::Graph& g, Value grad, Value x, Value slope) {
  Ops o{g};
  return o.sel(o.gt(x, o.c(x, 0)), grad, o.mul(grad, slope));
}

Value elu(ir::Graph& g, Value x, Value alpha, Value scale, Value input_scale) {
  Ops o{g};
  Value negative = o.mul(o.un(ir::Op::ExponentialMinusOne, o.mul(x, input_scale)), o.mul(alpha, scale));
  return o.sel(o.le(x, o.c(x, 0)), negative, o.mul(x, scale));
}

Value elu_backward(ir::Graph& g, Value grad, Value b, Value alpha, Value scale, Value input_scale, bool is_result) {
  Ops o{g};
  Value negcoef = o.mul(alpha, scale);
  Value negative = is_result ? o.mul(o.mul(grad, input_scale), o.add(b, negcoef))
                             : o.mul(o.mul(o.mul(grad, input_scale), negcoef), o.exp(o.mul(b, input_scale)));
  return o.sel(o.le(b, o.c(b, 0)), negative, o.mul(grad, scale));
}

Value softplus(ir::Graph& g, Value x, Value beta, Value threshold) {
  Ops o{g};
  Value xb = o.mul(x, beta);
  Value soft = o.div(o.un(ir::Op::LogPlusOne, o.exp(xb)), beta);
  return o.sel(o.gt(xb, threshold), x, soft);
}

Value softplus_backward(ir::Graph& g, Value grad, Value x, Value beta, Value threshold) {
  Ops o{g};
  Value xb = o.mul(x, beta);
  Value z = o.exp(xb);
  return o.sel(o.gt(xb, threshold), grad, o.div(o.mul(grad, z), o.add(z, o.c(z, 1))));
}

Value hardswish(ir::Graph& g, Value x) {
  Ops o{g};
  Value relu6 = o.min(o.max(o.add(x, o.c(x, 3)), o.c(x, 0)), o.c(x, 6));
  return o.div(o.mul(x, relu6), o.c(x, 6));
}

Value hardswish_backward(ir::Graph& g, Value grad, Value x) {
  Ops o{g};
  Value middle = o.mul(grad, o.add(o.div(x, o.c(x, 3)), o.c(x, 0.5)));
  return o.sel(o.le(x, o.c(x, -3)), o.c(grad, 0), o.sel(o.lt(x, o.c(x, 3)), middle, grad));
}

Value hardsigmoid(ir::Graph& g, Value x) {
  Ops o{g};
  return o.div(o.min(o.max(o.add(x, o.c(x, 3)), o.c(x, 0)), o.c(x, 6)), o.c(x, 6));
}

Value hardsigmoid_backward(ir::Graph& g, Value grad, Value x) {
  Ops o{g};
  Value inside = o.and_(o.gt(x, o.c(x, -3)), o.lt(x, o.c(x, 3)));
  return o.sel(inside, o.mul(grad, o.c(grad, 1.0 / 6.0)), o.c(grad, 0));
}

Value mish(ir::Graph& g, Value x) {
  Ops o{g};
  return o.mul(x, o.tanh(o.un(ir::Op::LogPlusOne, o.exp(x))));
}

}  // namespace tpu::lowering
