// Elementwise ops, by section: arithmetic, comparisons, unary math, binary
// math, clamp/lerp/addc*/masked_fill, activations and their gradients,
// where and fill. The math is in lowering/elementwise.*; here are ATen's
// dtype rules, checks and overloads.
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/ones_like.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/complex.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>
#include <string>

#include "aten/debug_checks.h"
#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/types.h"
#include "lowering/elementwise.h"

namespace tpu::aten {
namespace {

using lowering::Binary;
using lowering::Unary;

// ------------------------------------------------------------ binary arithmetic

// add/sub with alpha, mul: the three variants share one body.
at::Tensor arith(const char* name, Binary op, const at::Tensor& self, const at::Tensor& other,
                 const c10::Scalar& alpha, const at::Tensor* out, bool inplace) {
  c10::ScalarType compute = at::result_type(self, other);
  if (op == Binary::Sub) {  // ATen's sub_check
    bool self_bool = self.scalar_type() == c10::kBool, other_bool = other.scalar_type() == c10::kBool;
    TORCH_CHECK(!self_bool || !other_bool,
                "Subtraction, the `-` operator, with two bool tensors is not supported. "
                "Use the `^` or `logical_xor()` operator instead.");
    TORCH_CHECK(!self_bool && !other_bool,
                "Subtraction, the `-` operator, with a bool tensor is not supported. "
                "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  }
  // ATen's alpha rules: no float alpha for integers, no bool alpha for non-bools.
  TORCH_CHECK(!alpha.isBoolean() || compute == c10::kBool, "Boolean alpha only supported for Boolean results.");
  TORCH_CHECK(c10::isFloatingType(compute) || c10::isComplexType(compute) || alpha.isIntegral(true),
              "For integral input tensors, argument alpha must not be a floating point number.");
  // alpha travels as a third (scalar) operand so that it is a runtime parameter.
  TensorRefs inputs{self, other};
  bool scaled = alpha.isComplex() || !scalar_is(alpha, 1);
  at::Tensor alpha_operand;
  if (scaled) {
    alpha_operand = at::scalar_tensor(alpha, at::TensorOptions().dtype(compute));
    inputs.push_back(alpha_operand);
  }
  // Half types compute in float32 and round once, as ATen's kernels do (a
  // Python scalar such as 0.3 is not rounded to bfloat16 first).
  return elementwise(name, inputs, lowering::opmath_type(compute), compute,
                     [op, scaled](ir::Graph& g, const std::vector<ir::Value>& v) {
                       ir::Value rhs = scaled ? lowering::binary(g, Binary::Mul, v[1], v[2]) : v[1];
                       return lowering::binary(g, op, v[0], rhs);
                     },
                     out, inplace, static_cast<uint64_t>(op) | static_cast<uint64_t>(scaled) << 8);
}

template <Binary kOp>
at::Tensor arith_kernel(Overload o, const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  return arith(variant(o).c_str(), kOp, self, other, alpha, o.out, o.inplace);
}
at::Tensor mul_kernel(Overload o, const at::Tensor& self, const at::Tensor& other) {
  return arith(variant(o).c_str(), Binary::Mul, self, other, 1, o.out, o.inplace);
}

// `t` as ATen's kernels of a rounding op (remainder, fmod, floor and trunc division) see it:
// cast to the common dtype. For a half type they compute in float32 too, but from operands
// rounded to that type first, which a discontinuous op tells apart (float32 1.7801 %
// bfloat16 1.78125 is 0 in bfloat16 on CPU, not 1.7801).
at::Tensor rounded_to_common(const at::Tensor& t, c10::ScalarType common) {
  if (t.scalar_type() == common || lowering::opmath_type(common) == common) return t;
  return t.to(common);
}

// div with rounding_mode None (true division), "trunc" or "floor".
at::Tensor divide(const char* name, const at::Tensor& self, const at::Tensor& other,
                  std::optional<c10::string_view> mode, const at::Tensor* out, bool inplace) {
  c10::ScalarType common = at::result_type(self, other);
  Binary op = Binary::Div;
  c10::ScalarType compute = float_type_for(common);
  if (mode.has_value()) {
    TORCH_CHECK(*mode == "trunc" || *mode == "floor",
                "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *mode, "'");
    op = *mode == "trunc" ? Binary::TruncDiv : Binary::FloorDiv;
    compute = common;
    at::infer_size_dimvector(self.sizes(), other.sizes());  // CPU names a shape mismatch before a Bool
    TORCH_CHECK_NOT_IMPLEMENTED(compute != c10::kBool, "\"div_", *mode, "\" not implemented for 'Bool'");  // as CPU
    check_integer_divisor(name, self, other, common);
  }
  return elementwise(name, {mode ? rounded_to_common(self, common) : self, mode ? rounded_to_common(other, common) : other},
                     lowering::opmath_type(compute), compute,
                     [op](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::binary(g, op, v[0], v[1]);
                     },
                     out, inplace, static_cast<uint64_t>(op));
}

at::Tensor div_kernel(Overload o, const at::Tensor& self, const at::Tensor& other) {
  return divide(variant(o).c_str(), self, other, std::nullopt, o.out, o.inplace);
}
at::Tensor div_mode_kernel(Overload o, const at::Tensor& self, const at::Tensor& other,
                           std::optional<c10::string_view> mode) {
  return divide(variant(o).c_str(), self, other, mode, o.out, o.inplace);
}

// rsub: other - alpha * self.
at::Tensor rsub_tensor(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  return arith("rsub", Binary::Sub, other, self, alpha, nullptr, false);
}

// floor_divide is div with rounding_mode "floor".
at::Tensor floor_divide_kernel(Overload o, const at::Tensor& self, const at::Tensor& other) {
  return divide(variant(o).c_str(), self, other, "floor", o.out, o.inplace);
}

// ------------------------------------------------------------ comparisons

at::Tensor comparison(const char* name, ir::Compare op, const at::Tensor& self, const at::Tensor& other,
                      const at::Tensor* out, bool inplace) {
  c10::ScalarType compute = at::result_type(self, other);
  return elementwise(name, {self, other}, compute, inplace ? self.scalar_type() : c10::kBool,
                     [op](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::compare(g, op, v[0], v[1]);
                     },
                     out, inplace, static_cast<uint64_t>(op));
}


template <ir::Compare kOp>
at::Tensor compare_kernel(Overload o, const at::Tensor& a, const at::Tensor& b) {
  return comparison(variant(o).c_str(), kOp, a, b, o.out, o.inplace);
}
template <ir::Compare kOp>
at::Tensor compare_scalar_kernel(Overload o, const at::Tensor& a, const c10::Scalar& b) {
  return compare_kernel<kOp>(o, a, scalar_operand(b));
}

// ------------------------------------------------------------ dtype checks

// Which input dtypes an op's CPU kernel accepts; others raise as ATen does.
enum class Accepts { Any, NoBool, Floating, Integral /* and bool */, IntegralNoBool };

void check_accepts(const char* op, Accepts accepts, c10::ScalarType t) {
  bool ok = true;
  switch (accepts) {
    case Accepts::Any: break;
    case Accepts::NoBool: ok = t != c10::kBool; break;
    case Accepts::Floating: ok = c10::isFloatingType(t); break;
    case Accepts::Integral: ok = c10::isIntegralType(t, /*includeBool=*/true); break;
    case Accepts::IntegralNoBool: ok = c10::isIntegralType(t, /*includeBool=*/false); break;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(ok, "\"", op, "\" not implemented for '", c10::toString(t), "'");
}

// ------------------------------------------------------------ unary

at::Tensor unary_op(const char* op_name, Unary op, Accepts accepts, const at::Tensor& self, const at::Tensor* out,
                    bool inplace) {
  c10::ScalarType in = self.scalar_type();
  if (op == Unary::Neg)
    TORCH_CHECK(in != c10::kBool,
                "Negation, the `-` operator, on a bool tensor is not supported. "
                "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  check_accepts(op_name, accepts, in);
  TORCH_CHECK(!(op == Unary::Sign && c10::isComplexType(in) && std::string(op_name) == "sign"),
              "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead.");
  c10::ScalarType result = lowering::unary_is_predicate(op) ? c10::kBool
                           : lowering::unary_needs_float(op) ? float_type_for(in)
                                                             : in;
  // |z| of a complex z is real.
  bool complex_abs = op == Unary::Abs && c10::isComplexType(in);
  if (complex_abs) result = c10::toRealValueType(in);
  c10::ScalarType compute = lowering::unary_is_predicate(op) || complex_abs ? in : lowering::opmath_type(result);
  std::string name = variant(op_name, out, inplace);
  return elementwise(name.c_str(), {self}, compute, result,
                     [op](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::unary(g, op, v[0]); },
                     out, inplace, static_cast<uint64_t>(op));
}

template <Unary kOp, Accepts kAccepts>
at::Tensor unary_kernel(Overload o, const at::Tensor& self) {
  return unary_op(o.name, kOp, kAccepts, self, o.out, o.inplace);
}
#define UNARY_OPS(X)                                 \
  X(neg, Unary::Neg, Accepts::Any)                   \
  X(abs, Unary::Abs, Accepts::NoBool)                \
  X(exp, Unary::Exp, Accepts::Any)                   \
  X(log, Unary::Log, Accepts::Any)                   \
  X(sqrt, Unary::Sqrt, Accepts::Any)                 \
  X(rsqrt, Unary::Rsqrt, Accepts::Any)               \
  X(tanh, Unary::Tanh, Accepts::Any)                 \
  X(sigmoid, Unary::Sigmoid, Accepts::Any)           \
  X(sin, Unary::Sin, Accepts::Any)                   \
  X(cos, Unary::Cos, Accepts::Any)                   \
  X(tan, Unary::Tan, Accepts::Any)                   \
  X(asin, Unary::Asin, Accepts::Any)                 \
  X(acos, Unary::Acos, Accepts::Any)                 \
  X(atan, Unary::Atan, Accepts::Any)                 \
  X(sinh, Unary::Sinh, Accepts::Any)                 \
  X(cosh, Unary::Cosh, Accepts::Any)                 \
  X(asinh, Unary::Asinh, Accepts::Any)               \
  X(acosh, Unary::Acosh, Accepts::Any)               \
  X(atanh, Unary::Atanh, Accepts::Any)               \
  X(log1p, Unary::Log1p, Accepts::Any)               \
  X(expm1, Unary::Expm1, Accepts::Any)               \
  X(log2, Unary::Log2, Accepts::Any)                 \
  X(log10, Unary::Log10, Accepts::Any)               \
  X(exp2, Unary::Exp2, Accepts::Any)                 \
  X(erf, Unary::Erf, Accepts::Any)                   \
  X(erfinv, Unary::Erfinv, Accepts::Any)             \
  X(reciprocal, Unary::Reciprocal, Accepts::Any)     \
  X(floor, Unary::Floor, Accepts::NoBool)            \
  X(ceil, Unary::Ceil, Accepts::NoBool)              \
  X(round, Unary::Round, Accepts::NoBool)            \
  X(trunc, Unary::Trunc, Accepts::NoBool)            \
  X(frac, Unary::Frac, Accepts::Floating)            \
  X(sign, Unary::Sign, Accepts::Any)                 \
  X(sgn, Unary::Sign, Accepts::Any)                  \
  X(bitwise_not, Unary::BitwiseNot, Accepts::Integral) \
  X(logical_not, Unary::LogicalNot, Accepts::Any)

at::Tensor relu_kernel(Overload o, const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != c10::kBool, "Boolean inputs not supported for relu");
  return unary_op(o.name, Unary::Relu, Accepts::Any, self, o.out, o.inplace);
}

at::Tensor threshold_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& threshold) {
  c10::ScalarType compute = at::result_type(grad, self);
  at::Tensor t = scalar_operand(threshold);
  // self first: ATen's TensorIterator for this op takes (self, grad), and the result's
  // layout follows the first operand's (as torch.compile's fake tensors say it).
  return elementwise("threshold_backward", {self, grad, t}, compute, compute,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       ir::Value below = ir::compare(g, v[0], v[2], ir::Compare::LE);
                       ir::Value zero = ir::full(g, g.type(v[1]).dtype, 0, g.type(v[1]).shape);
                       return ir::select(g, below, zero, v[1]);
                     });
}

// round(decimals=): decimals is part of the program (it is an int attribute).
at::Tensor round_decimals_op(const at::Tensor& self, int64_t decimals, const at::Tensor* out, bool inplace) {
  if (decimals == 0) return unary_op("round", Unary::Round, Accepts::NoBool, self, out, inplace);
  check_accepts("round", Accepts::Floating, self.scalar_type());
  c10::ScalarType result = self.scalar_type();
  std::string name = variant("round", out, inplace);
  return elementwise(name.c_str(), {self}, lowering::opmath_type(result), result,
                     [decimals](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::round_decimals(g, v[0], decimals);
                     },
                     out, inplace);
}
at::Tensor round_decimals_kernel(Overload o, const at::Tensor& self, int64_t decimals) {
  return round_decimals_op(self, decimals, o.out, o.inplace);
}

// nan_to_num: replacements default to 0 and the dtype's largest finite values.
double largest_finite(c10::ScalarType t) {
  switch (t) {
    case c10::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::max());
    case c10::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
    case c10::kFloat: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}

at::Tensor nan_to_num_op(const at::Tensor& self, std::optional<double> nan, std::optional<double> posinf,
                         std::optional<double> neginf, const at::Tensor* out, bool inplace) {
  c10::ScalarType t = self.scalar_type();
  std::string name = variant("nan_to_num", out, inplace);
  if (!c10::isFloatingType(t))
    return elementwise(name.c_str(), {self}, t, t, [](ir::Graph&, const std::vector<ir::Value>& v) { return v[0]; },
                       out, inplace);
  double big = largest_finite(t);
  std::vector<at::Tensor> inputs{self, scalar_operand(nan.value_or(0.0)), scalar_operand(posinf.value_or(big)),
                                 scalar_operand(neginf.value_or(-big))};
  return elementwise(name.c_str(), inputs, t, t,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::nan_to_num(g, v[0], v[1], v[2], v[3]);
                     },
                     out, inplace);
}
at::Tensor nan_to_num_kernel(Overload o, const at::Tensor& self, std::optional<double> nan,
                             std::optional<double> posinf, std::optional<double> neginf) {
  return nan_to_num_op(self, nan, posinf, neginf, o.out, o.inplace);
}

// ------------------------------------------------------------ binary math

// The dtype rules of each binary op, after ATen's common-dtype promotion.
struct BinaryTypes {
  c10::ScalarType compute, result;
};
BinaryTypes binary_types(const char* op_name, Binary op, c10::ScalarType common) {
  switch (op) {
    case Binary::Atan2:
    case Binary::CopySign: {
      c10::ScalarType f = float_type_for(common);
      return {lowering::opmath_type(f), f};
    }
    case Binary::Hypot: check_accepts(op_name, Accepts::Floating, common); break;
    case Binary::Pow:
    case Binary::Remainder:
    case Binary::FMod: check_accepts(op_name, Accepts::NoBool, common); break;
    case Binary::BitAnd:
    case Binary::BitOr:
    case Binary::BitXor: check_accepts(op_name, Accepts::Integral, common); break;
    case Binary::ShiftLeft:
    case Binary::ShiftRight: check_accepts(op_name, Accepts::IntegralNoBool, common); return {common, common};
    case Binary::LogicalAnd:
    case Binary::LogicalOr:
    case Binary::LogicalXor: return {common, c10::kBool};
    default: break;
  }
  return {lowering::opmath_type(common), common};
}

at::Tensor binary_op(const char* op_name, Binary op, const at::Tensor& self, const at::Tensor& other,
                     const at::Tensor* out, bool inplace) {
  at::infer_size_dimvector(self.sizes(), other.sizes());  // CPU reports a shape mismatch before a dtype
  c10::ScalarType common = at::result_type(self, other);
  BinaryTypes types = binary_types(op_name, op, common);
  std::string name = variant(op_name, out, inplace);
  bool rounding = op == Binary::Remainder || op == Binary::FMod;
  if (rounding) check_integer_divisor(name.c_str(), self, other, common);
  return elementwise(name.c_str(),
                     {rounding ? rounded_to_common(self, common) : self, rounding ? rounded_to_common(other, common) : other},
                     types.compute, types.result,
                     [op](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::binary(g, op, v[0], v[1]); },
                     out, inplace, static_cast<uint64_t>(op));
}

template <Binary kOp>
at::Tensor binary_kernel(Overload o, const at::Tensor& self, const at::Tensor& other) {
  return binary_op(o.name, kOp, self, other, o.out, o.inplace);
}
template <Binary kOp>
at::Tensor binary_scalar_kernel(Overload o, const at::Tensor& self, const c10::Scalar& other) {
  return binary_kernel<kOp>(o, self, scalar_operand(other));
}

// pow(Tensor, Scalar): numpy's rule against negative integer powers of integers.
void check_integer_power(const at::Tensor& base, const c10::Scalar& exponent) {
  TORCH_CHECK(!(c10::isIntegralType(base.scalar_type(), true) && exponent.isIntegral(true) && exponent.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
}
// A bool tensor to a bool power, which CPU allows (a ** True is a, a ** False is all
// True) although pow has no bool kernel.
bool is_bool_power(const at::Tensor& self, const c10::Scalar& exponent) {
  return self.scalar_type() == c10::kBool && exponent.isBoolean();
}
at::Tensor pow_tensor_scalar(const at::Tensor& self, const c10::Scalar& exponent) {
  check_integer_power(self, exponent);
  if (is_bool_power(self, exponent)) return exponent.toBool() ? self.clone() : at::ones_like(self);
  return binary_op("pow", Binary::Pow, self, scalar_operand(exponent), nullptr, false);
}
at::Tensor& pow_tensor_scalar_inplace(at::Tensor& self, const c10::Scalar& exponent) {
  check_integer_power(self, exponent);
  if (is_bool_power(self, exponent)) return exponent.toBool() ? self : self.fill_(true);
  binary_op("pow", Binary::Pow, self, scalar_operand(exponent), &self, true);
  return self;
}
at::Tensor& pow_tensor_scalar_out(const at::Tensor& self, const c10::Scalar& exponent, at::Tensor& out) {
  check_integer_power(self, exponent);
  if (is_bool_power(self, exponent)) {
    at::native::resize_output(out, self.sizes());
    return out.copy_(pow_tensor_scalar(self, exponent));
  }
  binary_op("pow", Binary::Pow, self, scalar_operand(exponent), &out, false);
  return out;
}
at::Tensor pow_scalar_tensor(const c10::Scalar& self, const at::Tensor& exponent) {
  return binary_op("pow", Binary::Pow, scalar_operand(self), exponent, nullptr, false);
}
at::Tensor& pow_scalar_tensor_out(const c10::Scalar& self, const at::Tensor& exponent, at::Tensor& out) {
  binary_op("pow", Binary::Pow, scalar_operand(self), exponent, &out, false);
  return out;
}
at::Tensor remainder_scalar_tensor(const c10::Scalar& self, const at::Tensor& other) {
  return binary_op("remainder", Binary::Remainder, scalar_operand(self), other, nullptr, false);
}

// ------------------------------------------------------------ clamp, lerp, addcmul/addcdiv, masked_fill

// clamp's result dtype: floats keep theirs; integers promote with the bounds
// (ATen promotes clamp's scalar bounds like wrapped numbers).
c10::ScalarType clamp_type(const at::Tensor& self, const std::optional<c10::Scalar>& lo,
                           const std::optional<c10::Scalar>& hi) {
  if (c10::isFloatingType(self.scalar_type())) return self.scalar_type();
  at::native::ResultTypeState state{};
  state = at::native::update_result_type_state(self, state);
  if (lo) state = at::native::update_result_type_state(*lo, state);
  if (hi) state = at::native::update_result_type_state(*hi, state);
  return at::native::result_type(state);
}

// `tensor_bounds`: the bounds are tensors; with only one of them ATen runs
// maximum/minimum, which accept bool (Scalar bounds and two bounds do not).
at::Tensor clamp_op(const char* op_name, const at::Tensor& self, const std::optional<at::Tensor>& lo,
                    const std::optional<at::Tensor>& hi, c10::ScalarType common, const at::Tensor* out,
                    bool inplace, bool tensor_bounds = false) {
  bool has_lo = lo.has_value() && lo->defined(), has_hi = hi.has_value() && hi->defined();
  TORCH_CHECK(has_lo || has_hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  if (!(tensor_bounds && has_lo != has_hi)) check_accepts(op_name, Accepts::NoBool, common);
  std::vector<at::Tensor> inputs{self};
  if (has_lo) inputs.push_back(*lo);
  if (has_hi) inputs.push_back(*hi);
  std::string name = variant(op_name, out, inplace);
  return elementwise(name.c_str(), inputs, common, common,
                     [has_lo, has_hi](ir::Graph& g, const std::vector<ir::Value>& v) {
                       std::optional<ir::Value> l, h;
                       if (has_lo) l = v[1];
                       if (has_hi) h = v[has_lo ? 2 : 1];
                       return lowering::clamp(g, v[0], l, h);
                     },
                     out, inplace);
}

std::optional<at::Tensor> bound(const std::optional<c10::Scalar>& s) {
  if (!s.has_value()) return std::nullopt;
  return scalar_operand(*s);
}

using OptScalar = std::optional<c10::Scalar>;

// clamp's kernels, one per kind of bounds; o.name is the op's base name.
at::Tensor clamp_scalar(Overload o, const at::Tensor& self, const OptScalar& lo, const OptScalar& hi) {
  return clamp_op(o.name, self, bound(lo), bound(hi), clamp_type(self, lo, hi), o.out, o.inplace);
}
at::Tensor clamp_tensor(Overload o, const at::Tensor& self, const OptTensor& lo, const OptTensor& hi) {
  // The common dtype of all tensor operands, as TensorIterator computes it.
  at::native::ResultTypeState state = at::native::update_result_type_state(self, {});
  if (defined(lo)) state = at::native::update_result_type_state(*lo, state);
  if (defined(hi)) state = at::native::update_result_type_state(*hi, state);
  c10::ScalarType common = at::native::result_type(state);
  return clamp_op(o.name, self, lo, hi, common, o.out, o.inplace, /*tensor_bounds=*/true);
}
// clamp_min / clamp_max: one bound, Scalar or Tensor.
template <bool kLower, typename Bound>
at::Tensor clamp_one(Overload o, const at::Tensor& self, const Bound& b) {
  if constexpr (std::is_same_v<Bound, at::Tensor>)
    return kLower ? clamp_tensor(o, self, b, std::nullopt) : clamp_tensor(o, self, std::nullopt, b);
  else
    return kLower ? clamp_scalar(o, self, b, std::nullopt) : clamp_scalar(o, self, std::nullopt, b);
}

// lerp: self, end (and a tensor weight) share one floating dtype.
// A Scalar weight picks its formula on the host (`small`), so a program holds one
// formula, not both and a select; a weight crossing |0.5| makes a second program.
at::Tensor lerp_op(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight, bool weight_is_tensor,
                   const at::Tensor* out, bool inplace, std::optional<bool> small = std::nullopt) {
  TORCH_CHECK(self.dtype() == end.dtype(), "expected dtype ", self.dtype(), " for `end` but got dtype ", end.dtype());
  if (weight_is_tensor)
    TORCH_CHECK(self.dtype() == weight.dtype(), "expected dtype ", self.dtype(), " for `weight` but got dtype ",
                weight.dtype());
  check_accepts("lerp", Accepts::Floating, self.scalar_type());
  c10::ScalarType t = self.scalar_type();
  std::string name = variant("lerp", out, inplace);
  return elementwise(name.c_str(), {self, end, weight}, lowering::opmath_type(t), t,
                     [small](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::lerp(g, v[0], v[1], v[2], small);
                     },
                     out, inplace, small ? 1u + *small : 0u);
}
at::Tensor lerp_scalar_kernel(Overload o, const at::Tensor& self, const at::Tensor& end, const c10::Scalar& w) {
  return lerp_op(self, end, scalar_operand(w), false, o.out, o.inplace, std::abs(w.toComplexDouble()) < 0.5);
}
at::Tensor lerp_tensor_kernel(Overload o, const at::Tensor& self, const at::Tensor& end, const at::Tensor& w) {
  return lerp_op(self, end, w, true, o.out, o.inplace);
}

// addcmul: self + value * t1 * t2; addcdiv: self + value * t1 / t2 (ATen's
// evaluation order). value is a runtime parameter.
at::Tensor addc_op(const char* op_name, bool divide, const at::Tensor& self, const at::Tensor& t1,
                   const at::Tensor& t2, const c10::Scalar& value, const at::Tensor* out, bool inplace) {
  if (divide)
    TORCH_CHECK(!(c10::isIntegralType(t1.scalar_type(), true) && c10::isIntegralType(t2.scalar_type(), true)),
                "Integer division with addcdiv is no longer supported, and in a future  ",
                "release addcdiv will perform a true division of tensor1 and tensor2. ",
                "The historic addcdiv behavior can be implemented as ",
                "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) ",
                "for integer inputs and as ",
                "(input + value * tensor1 / tensor2) for float inputs. ",
                "The future addcdiv behavior is just the latter implementation: ",
                "(input + value * tensor1 / tensor2), for all dtypes.");
  c10::ScalarType common = at::native::result_type(at::native::update_result_type_state(
      t2, at::native::update_result_type_state(t1, at::native::update_result_type_state(self, {}))));
  c10::ScalarType compute = lowering::opmath_type(common);
  std::string name = variant(op_name, out, inplace);
  return elementwise(name.c_str(), {self, t1, t2, scalar_operand(value)}, compute, common,
                     [divide](ir::Graph& g, const std::vector<ir::Value>& v) {
                       ir::Value scaled = lowering::binary(g, Binary::Mul, v[3], v[1]);
                       ir::Value term = lowering::binary(g, divide ? Binary::Div : Binary::Mul, scaled, v[2]);
                       return lowering::binary(g, Binary::Add, v[0], term);
                     },
                     out, inplace, static_cast<uint64_t>(divide));
}
template <bool kDivide>
at::Tensor addc_kernel(Overload o, const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                       const c10::Scalar& value) {
  return addc_op(o.name, kDivide, self, t1, t2, value, o.out, o.inplace);
}

// masked_fill_: in place only (the functional forms are ATen composites).
at::Tensor& masked_fill_op(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(mask.scalar_type() == c10::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  c10::ScalarType t = self.scalar_type();
  elementwise("masked_fill_", {self, mask, value}, t, t,
              [](ir::Graph& g, const std::vector<ir::Value>& v) {
                return lowering::where(g, ir::convert(g, v[1], ir::DType::Pred), v[2], v[0]);
              },
              &self, true, 0);
  return self;
}
at::Tensor& masked_fill_scalar(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
  return masked_fill_op(self, mask, scalar_operand(value));
}
at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return masked_fill_op(self, mask, value);
}

// ------------------------------------------------------------ activations

// An activation (or its gradient) of floating tensors: computed in opmath,
// result in the common dtype of the tensor operands; Scalar parameters are
// runtime parameters (a new slope does not recompile).
at::Tensor activation(const char* op_name, std::vector<at::Tensor> tensors, const std::vector<c10::Scalar>& params,
                      const Build& build, const at::Tensor* out = nullptr, bool inplace = false) {
  c10::ScalarType common = tensors.size() == 1 ? tensors[0].scalar_type() : at::result_type(tensors[0], tensors[1]);
  // tanh's gradient is also defined for complex (autograd of complex tanh).
  if (!(c10::isComplexType(common) && std::string(op_name) == "tanh_backward"))
    check_accepts(op_name, Accepts::Floating, common);
  for (const c10::Scalar& s : params) tensors.push_back(scalar_operand(s));
  std::string name = variant(op_name, out, inplace);
  return elementwise(name.c_str(), tensors, lowering::opmath_type(common), common, build, out, inplace);
}

// The Build that applies lowering kLowering to an op's first kArity inputs (the first
// two swapped with kSwapFirstTwo: a gradient given (x, grad), see gradient_kernel_as_x).
template <auto kLowering, size_t kArity, bool kSwapFirstTwo = false>
Build lowering_build() {
  return [](ir::Graph& g, const std::vector<ir::Value>& v) {
    auto input = [&](size_t i) -> const ir::Value& { return v[kSwapFirstTwo && i < 2 ? 1 - i : i]; };
    auto apply = [&]<size_t... I>(std::index_sequence<I...>) { return kLowering(g, input(I)...); };
    return apply(std::make_index_sequence<kArity>{});
  };
}

// An activation and its gradient with Scalar parameters (runtime parameters,
// after the tensors): kLowering(g, self, params...) and
// kGradient(g, grad, x, params...).
using ScalarArg = const c10::Scalar&;
template <auto kLowering, typename... Params>
at::Tensor activation_kernel(Overload o, const at::Tensor& self, Params... params) {
  return activation(o.name, {self}, {params...}, lowering_build<kLowering, 1 + sizeof...(Params)>(), o.out, o.inplace);
}
template <auto kGradient, typename... Params>
at::Tensor gradient_kernel(Overload o, const at::Tensor& grad, const at::Tensor& x, Params... params) {
  return activation(o.name, {grad, x}, {params...}, lowering_build<kGradient, 2 + sizeof...(Params)>(), o.out);
}
// The same for a gradient whose result PyTorch's meta kernel lays out as x when grad is
// laid out otherwise (x is its first operand): torch.compile's fake tensors say so, and a
// compiled backward's views rely on it. A new result follows its first input's layout.
template <auto kGradient, typename... Params>
at::Tensor gradient_kernel_as_x(Overload o, const at::Tensor& grad, const at::Tensor& x, Params... params) {
  return activation(o.name, {x, grad}, {params...}, lowering_build<kGradient, 2 + sizeof...(Params), true>(), o.out);
}

bool gelu_uses_tanh(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "approximate argument must be either none or tanh.");
  return approximate == "tanh";
}
Build gelu_build(c10::string_view approximate) {
  bool tanh = gelu_uses_tanh(approximate);
  return [tanh](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::gelu(g, v[0], tanh); };
}
at::Tensor gelu(Overload o, const at::Tensor& self, c10::string_view approximate) {
  return activation(o.name, {self}, {}, gelu_build(approximate), o.out, o.inplace);
}

// hardtanh is clamp with Scalar bounds (integers allowed, bool not).
at::Tensor hardtanh(Overload o, const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
  TORCH_CHECK(self.scalar_type() != c10::kBool, "Bool inputs not supported for hardtanh");
  if (c10::isIntegralType(self.scalar_type(), /*includeBool=*/false)) {
    // ATen's legacy rule: integer inputs truncate the bounds instead of promoting.
    TORCH_CHECK(self.scalar_type() != c10::kByte || (lo.toLong() >= 0 && hi.toLong() >= 0),
                "cannot do hardtanh on an unsigned type with negative limits");
    return clamp_scalar(o, self, c10::Scalar(lo.toLong()), c10::Scalar(hi.toLong()));
  }
  return clamp_scalar(o, self, lo, hi);
}

// logit(eps=None): eps is a runtime parameter when given.
at::Tensor logit_op(const at::Tensor& self, std::optional<double> eps, const at::Tensor* out, bool inplace) {
  c10::ScalarType result = float_type_for(self.scalar_type());
  std::vector<at::Tensor> inputs{self};
  if (eps) inputs.push_back(scalar_operand(*eps));
  std::string name = variant("logit", out, inplace);
  return elementwise(name.c_str(), inputs, lowering::opmath_type(result), result,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::logit(g, v[0], v.size() > 1 ? std::optional<ir::Value>(v[1]) : std::nullopt);
                     },
                     out, inplace);
}
at::Tensor logit_kernel(Overload o, const at::Tensor& self, std::optional<double> eps) {
  return logit_op(self, eps, o.out, o.inplace);
}


Build gelu_backward_build(c10::string_view approximate) {
  bool tanh = gelu_uses_tanh(approximate);
  return [tanh](ir::Graph& g, const std::vector<ir::Value>& v) {
    return lowering::gelu_backward(g, v[0], v[1], tanh);
  };
}
at::Tensor gelu_backward(Overload o, const at::Tensor& grad, const at::Tensor& x, c10::string_view approximate) {
  return activation(o.name, {grad, x}, {}, gelu_backward_build(approximate), o.out);
}

at::Tensor leaky_relu_backward(Overload o, const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& slope,
                               bool self_is_result) {
  TORCH_CHECK(!self_is_result || slope.to<double>() >= 0.0,
              "In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. "
              "This is caused by calling in-place forward function with a negative slope, "
              "please call out-of-place version instead. File an issue at https://github.com/pytorch/pytorch if you "
              "do require supporting in-place leakRelu backward calculation with negative slope");
  return activation(o.name, {x, grad}, {slope},  // laid out as x (as gradient_kernel_as_x)
                    [](ir::Graph& g, const std::vector<ir::Value>& v) {
                      return lowering::leaky_relu_backward(g, v[1], v[0], v[2]);
                    },
                    o.out);
}

at::Tensor elu_backward(Overload o, const at::Tensor& grad, const c10::Scalar& alpha, const c10::Scalar& scale,
                        const c10::Scalar& input_scale, bool is_result, const at::Tensor& x_or_result) {
  TORCH_CHECK(!is_result || alpha.to<double>() >= 0.0,
              "In-place elu backward calculation is triggered with a negative slope which is not supported. "
              "This is caused by calling in-place forward function with a negative slope, "
              "please call out-of-place version instead.");
  return activation(o.name, {x_or_result, grad}, {alpha, scale, input_scale},  // laid out as x (as gradient_kernel_as_x)
                    [is_result](ir::Graph& g, const std::vector<ir::Value>& v) {
                      return lowering::elu_backward(g, v[1], v[0], v[2], v[3], v[4], is_result);
                    },
                    o.out);
}

at::Tensor logit_backward(Overload o, const at::Tensor& grad, const at::Tensor& x, std::optional<double> eps) {
  std::vector<c10::Scalar> params;
  if (eps) params.push_back(*eps);
  bool has_eps = eps.has_value();
  return activation(o.name, {x, grad}, params,  // laid out as x (as gradient_kernel_as_x)
                    [has_eps](ir::Graph& g, const std::vector<ir::Value>& v) {
                      return lowering::logit_backward(g, v[1], v[0],
                                                      has_eps ? std::optional<ir::Value>(v[2]) : std::nullopt);
                    },
                    o.out);
}

// ------------------------------------------------------------ where / fill

at::Tensor where_self(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
  c10::ScalarType compute = at::result_type(self, other);
  return elementwise("where", {cond.to(c10::kBool), self, other}, compute, compute,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::where(g, ir::convert(g, v[0], ir::DType::Pred), v[1], v[2]);
                     },
                     nullptr, false, 0);
}

at::Tensor& where_out(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  c10::ScalarType compute = at::result_type(self, other);
  elementwise("where.out", {cond, self, other}, compute, compute,
              [](ir::Graph& g, const std::vector<ir::Value>& v) {
                return lowering::where(g, ir::convert(g, v[0], ir::DType::Pred), v[1], v[2]);
              },
              &out, false, 0);
  return out;
}

// The elements fill_(Scalar) and zero_ write: `self` without its broadcast (stride-0)
// dimensions, which repeat elements; CPU fills an expanded tensor so.
at::Tensor fill_target(const at::Tensor& self) {
  c10::DimVector sizes(self.sizes().begin(), self.sizes().end());
  bool repeats = false;
  for (int64_t d = 0; d < self.dim(); ++d)
    if (self.stride(d) == 0 && sizes[d] > 1) sizes[d] = 1, repeats = true;
  return repeats ? self.as_strided(sizes, self.strides(), self.storage_offset()) : self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  c10::DeviceGuard guard(self.device());
  Program p("fill_", self.device());
  ir::Value v = read_operand(p, value, self.scalar_type());  // CPU refuses an expanded self here
  p.write(self, ir::broadcast_in_dim(p.graph(), v, to_shape(self.sizes()), {}));
  p.run();
  return self;
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  c10::DeviceGuard guard(self.device());
  Program p("fill_", self.device());
  ir::Value v = scalar_value(p, value, lowering::to_ir(self.scalar_type()));
  at::Tensor target = fill_target(self);
  p.write(target, ir::broadcast_in_dim(p.graph(), v, to_shape(target.sizes()), {}));
  p.run();
  return self;
}

at::Tensor& zero_(at::Tensor& self) {
  if (self.scalar_type() == c10::kComplexHalf) {  // stored as float16 pairs (memory.cpp)
    at::view_as_real(self).zero_();
    return self;
  }
  c10::DeviceGuard guard(self.device());
  Program p("zero_", self.device());
  at::Tensor target = fill_target(self);
  p.write(target, ir::full(p.graph(), lowering::to_ir(self.scalar_type()), 0, to_shape(target.sizes())));
  p.run();
  return self;
}

// ------------------------------------------------------------ complex

// torch.complex(real, imag) and torch.polar(abs, angle) take two floating
// tensors of one dtype: that dtype.
c10::ScalarType complex_parts_dtype(const at::Tensor& a, const at::Tensor& b) {
  c10::ScalarType t = a.scalar_type();
  TORCH_CHECK(c10::isFloatingType(t) && t == b.scalar_type(),
              "Expected both inputs to be Half, Float or Double tensors but got ", t, " and ", b.scalar_type());
  return t;
}

at::Tensor& complex_out(const at::Tensor& re, const at::Tensor& im, at::Tensor& out) {
  c10::ScalarType t = complex_parts_dtype(re, im);
  if (t == c10::kHalf) {
    // A complex32 result: built in complex64, stored as chalf's float16 pairs by the copy.
    TORCH_CHECK(out.scalar_type() == c10::kComplexHalf, "Expected object of scalar type ComplexHalf but got scalar type ",
                out.scalar_type(), " for argument 'out'");
    at::Tensor wide = at::complex(re.to(c10::kFloat), im.to(c10::kFloat));
    at::native::resize_output(out, wide.sizes());
    out.copy_(wide);
    return out;
  }
  TORCH_CHECK(t == c10::kFloat || t == c10::kDouble, "\"complex\" not implemented for '", c10::toString(t), "' on tpu");
  elementwise("complex.out", {re, im}, t, c10::toComplexType(t),
              [](ir::Graph& g, const std::vector<ir::Value>& v) { return ir::complex(g, v[0], v[1]); }, &out, false);
  return out;
}

at::Tensor& polar_out(const at::Tensor& abs, const at::Tensor& angle, at::Tensor& out) {
  c10::ScalarType t = complex_parts_dtype(abs, angle);
  TORCH_CHECK(t == c10::kFloat || t == c10::kDouble, "\"polar\" not implemented for '", c10::toString(t),
              "' on tpu (complex32 is not supported)");
  elementwise("polar.out", {abs, angle}, t, c10::toComplexType(t),
              [](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::polar(g, v[0], v[1]); }, &out,
              false);
  return out;
}

at::Tensor& conj_physical_out(const at::Tensor& self, at::Tensor& out) {
  c10::ScalarType t = self.scalar_type();
  elementwise("conj_physical.out", {self}, t, t,
              [](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::conj(g, v[0]); }, &out, false);
  return out;
}

at::Tensor& conj_physical_inplace(at::Tensor& self) {
  if (!self.is_complex()) return self;
  c10::ScalarType t = self.scalar_type();
  elementwise("conj_physical_", {self}, t, t,
              [](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::conj(g, v[0]); }, &self, true);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("complex.out", complex_out);
  m.impl("polar.out", polar_out);
  m.impl("conj_physical.out", conj_physical_out);
  m.impl("conj_physical_", conj_physical_inplace);
  // Tensor-suffixed functional and in-place overloads, a plain out= (add, sub, mul, div, copysign).
  constexpr OverloadNames kTensorWithOut{".Tensor", "_.Tensor", ".out"};
  impl_variants<arith_kernel<Binary::Add>, "add">(m, kTensorWithOut);
  impl_variants<arith_kernel<Binary::Sub>, "sub">(m, kTensorWithOut);
  impl_variants<mul_kernel, "mul">(m, kTensorWithOut);
  impl_variants<div_kernel, "div">(m, kTensorWithOut);
  impl_variants<div_mode_kernel, "div">(m, {".Tensor_mode", "_.Tensor_mode", ".out_mode"});
  m.impl("rsub.Tensor", rsub_tensor);
  impl_variants<floor_divide_kernel, "floor_divide">(m, {"", "_.Tensor", ".out"});
#define REGISTER_COMPARE(NAME, OP)                                  \
  impl_variants<compare_kernel<OP>, #NAME>(m, kTensorOverloads); \
  impl_variants<compare_scalar_kernel<OP>, #NAME>(m, kScalarOverloads);
  REGISTER_COMPARE(eq, ir::Compare::EQ)
  REGISTER_COMPARE(ne, ir::Compare::NE)
  REGISTER_COMPARE(lt, ir::Compare::LT)
  REGISTER_COMPARE(le, ir::Compare::LE)
  REGISTER_COMPARE(gt, ir::Compare::GT)
  REGISTER_COMPARE(ge, ir::Compare::GE)
#undef REGISTER_COMPARE
#define REGISTER_UNARY(NAME, OP, ACCEPTS) impl_variants<unary_kernel<OP, ACCEPTS>, #NAME>(m);
  UNARY_OPS(REGISTER_UNARY)
#undef REGISTER_UNARY
  impl_variants<round_decimals_kernel, "round">(m, {".decimals", "_.decimals", ".decimals_out"});
  impl_variants<unary_kernel<Unary::IsNan, Accepts::Any>, "isnan">(m, {"", nullptr, nullptr});
  impl_variants<unary_kernel<Unary::IsPosInf, Accepts::Any>, "isposinf">(m, kFunctionalAndOut);
  impl_variants<unary_kernel<Unary::IsNegInf, Accepts::Any>, "isneginf">(m, kFunctionalAndOut);
  impl_variants<unary_kernel<Unary::SignBit, Accepts::Any>, "signbit">(m, kFunctionalAndOut);
  impl_variants<nan_to_num_kernel, "nan_to_num">(m);
  impl_variants<relu_kernel, "relu">(m, {"", "_", nullptr});
  m.impl("threshold_backward", threshold_backward);

  // binary math
  impl_variants<binary_kernel<Binary::Pow>, "pow">(m, {".Tensor_Tensor", "_.Tensor", ".Tensor_Tensor_out"});
  m.impl("pow.Tensor_Scalar", pow_tensor_scalar);
  m.impl("pow_.Scalar", pow_tensor_scalar_inplace);
  m.impl("pow.Tensor_Scalar_out", pow_tensor_scalar_out);
  m.impl("pow.Scalar", pow_scalar_tensor);
  m.impl("pow.Scalar_out", pow_scalar_tensor_out);
  impl_variants<binary_kernel<Binary::Atan2>, "atan2">(m);
  impl_variants<binary_kernel<Binary::Remainder>, "remainder">(m, kTensorOverloads);
  impl_variants<binary_kernel<Binary::FMod>, "fmod">(m, kTensorOverloads);
  impl_variants<binary_kernel<Binary::LogicalAnd>, "logical_and">(m);
  impl_variants<binary_kernel<Binary::LogicalOr>, "logical_or">(m);
  impl_variants<binary_kernel<Binary::LogicalXor>, "logical_xor">(m);
  impl_variants<binary_kernel<Binary::BitAnd>, "bitwise_and">(m, kTensorOverloads);
  impl_variants<binary_kernel<Binary::BitOr>, "bitwise_or">(m, kTensorOverloads);
  impl_variants<binary_kernel<Binary::BitXor>, "bitwise_xor">(m, kTensorOverloads);
  impl_variants<binary_kernel<Binary::ShiftLeft>, "bitwise_left_shift">(m, kTensorOverloads);
  impl_variants<binary_kernel<Binary::ShiftRight>, "bitwise_right_shift">(m, kTensorOverloads);
  impl_variants<binary_kernel<Binary::CopySign>, "copysign">(m, kTensorWithOut);
  impl_variants<binary_kernel<Binary::Hypot>, "hypot">(m);
  m.impl("remainder.Scalar_Tensor", remainder_scalar_tensor);
  impl_variants<binary_kernel<Binary::Max>, "maximum">(m, kFunctionalAndOut);
  impl_variants<binary_kernel<Binary::Min>, "minimum">(m, kFunctionalAndOut);
  impl_variants<binary_kernel<Binary::FMax>, "fmax">(m, kFunctionalAndOut);
  impl_variants<binary_kernel<Binary::FMin>, "fmin">(m, kFunctionalAndOut);
  // Python's shift operators: bitwise_left_shift / bitwise_right_shift under other names.
  m.impl("__lshift__.Tensor", functional_overload<binary_kernel<Binary::ShiftLeft>, "bitwise_left_shift">);
  m.impl("__lshift__.Scalar", functional_overload<binary_scalar_kernel<Binary::ShiftLeft>, "bitwise_left_shift">);
  m.impl("__ilshift__.Tensor", inplace_overload<binary_kernel<Binary::ShiftLeft>, "bitwise_left_shift">);
  m.impl("__ilshift__.Scalar", inplace_overload<binary_scalar_kernel<Binary::ShiftLeft>, "bitwise_left_shift">);
  m.impl("__rshift__.Tensor", functional_overload<binary_kernel<Binary::ShiftRight>, "bitwise_right_shift">);
  m.impl("__rshift__.Scalar", functional_overload<binary_scalar_kernel<Binary::ShiftRight>, "bitwise_right_shift">);
  m.impl("__irshift__.Tensor", inplace_overload<binary_kernel<Binary::ShiftRight>, "bitwise_right_shift">);
  m.impl("__irshift__.Scalar", inplace_overload<binary_scalar_kernel<Binary::ShiftRight>, "bitwise_right_shift">);

  // clamp, lerp, addcmul/addcdiv, masked_fill
  impl_variants<clamp_scalar, "clamp">(m);
  impl_variants<clamp_tensor, "clamp">(m, kTensorOverloads);
  impl_variants<clamp_one<true, c10::Scalar>, "clamp_min">(m);
  impl_variants<clamp_one<true, at::Tensor>, "clamp_min">(m, kTensorOverloads);
  impl_variants<clamp_one<false, c10::Scalar>, "clamp_max">(m);
  impl_variants<clamp_one<false, at::Tensor>, "clamp_max">(m, kTensorOverloads);
  impl_variants<lerp_scalar_kernel, "lerp">(m, kScalarOverloads);
  impl_variants<lerp_tensor_kernel, "lerp">(m, kTensorOverloads);
  impl_variants<addc_kernel<false>, "addcmul">(m);
  impl_variants<addc_kernel<true>, "addcdiv">(m);
  m.impl("masked_fill_.Scalar", masked_fill_scalar);
  m.impl("masked_fill_.Tensor", masked_fill_tensor);

  // activations
  impl_variants<activation_kernel<lowering::silu>, "silu">(m);
  impl_variants<activation_kernel<lowering::leaky_relu, ScalarArg>, "leaky_relu">(m);
  impl_variants<activation_kernel<lowering::elu, ScalarArg, ScalarArg, ScalarArg>, "elu">(m);
  impl_variants<activation_kernel<lowering::hardswish>, "hardswish">(m);
  impl_variants<activation_kernel<lowering::hardsigmoid>, "hardsigmoid">(m);
  impl_variants<activation_kernel<lowering::mish>, "mish">(m);
  impl_variants<activation_kernel<lowering::softplus, ScalarArg, ScalarArg>, "softplus">(m, kFunctionalAndOut);
  impl_variants<logit_kernel, "logit">(m);
  impl_variants<gelu, "gelu">(m);
  impl_variants<hardtanh, "hardtanh">(m);
  constexpr OverloadNames kGradient{"", nullptr, ".grad_input"};
  impl_variants<gelu_backward, "gelu_backward">(m, kGradient);
  impl_variants<gradient_kernel<lowering::sigmoid_backward>, "sigmoid_backward">(m, kGradient);
  impl_variants<gradient_kernel<lowering::tanh_backward>, "tanh_backward">(m, kGradient);
  impl_variants<gradient_kernel_as_x<lowering::hardtanh_backward, ScalarArg, ScalarArg>, "hardtanh_backward">(m, kGradient);
  impl_variants<leaky_relu_backward, "leaky_relu_backward">(m, kGradient);
  impl_variants<elu_backward, "elu_backward">(m, kGradient);
  impl_variants<gradient_kernel_as_x<lowering::softplus_backward, ScalarArg, ScalarArg>, "softplus_backward">(m, kGradient);
  impl_variants<gradient_kernel_as_x<lowering::hardswish_backward>, "hardswish_backward">(m, kFunctionalAndOut);
  impl_variants<gradient_kernel_as_x<lowering::hardsigmoid_backward>, "hardsigmoid_backward">(m, kGradient);
  impl_variants<logit_backward, "logit_backward">(m, kGradient);
  // silu_backward and mish_backward keep ATen's differentiable composites
  // (a tpu kernel would hide them from double backward); only out= is ours.
  impl_variants<gradient_kernel<lowering::silu_backward>, "silu_backward">(m, {nullptr, nullptr, ".grad_input"});

  // where / fill
  m.impl("where.self", where_self);
  m.impl("where.self_out", where_out);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("fill_.Tensor", fill_tensor);
  m.impl("zero_", zero_);
}

}  // namespace tpu::aten
