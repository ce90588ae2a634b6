// Special math functions: the gamma family, Bessel/Airy functions, error
// function relatives, orthogonal polynomials, xlogy/logaddexp/nextafter/
// frexp/heaviside/angle. The math is in lowering/special.*; here are
// ATen's dtype rules (integers promote to the default float dtype, half
// types compute in float32), checks and overloads.
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/max.h>
#include <ATen/ops/mvlgamma.h>
#include <ATen/ops/nan_to_num.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <string>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/elementwise.h"
#include "lowering/special.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

namespace sp = lowering::special;
using Fn1 = ir::Value (*)(ir::Graph&, ir::Value);
using Fn2 = ir::Value (*)(ir::Graph&, ir::Value, ir::Value);

std::string variant(const char* op, const at::Tensor* out, bool inplace) {
  return std::string(op) + (inplace ? "_" : out != nullptr ? ".out" : "");
}

bool is_half(c10::ScalarType t) { return t == c10::kHalf || t == c10::kBFloat16; }

// ATen's CPU kernels of the newer special functions have no half types.
void check_no_half(const char* op, c10::ScalarType t) {
  TORCH_CHECK_NOT_IMPLEMENTED(!is_half(t), "\"", op, "\" not implemented for '", c10::toString(t), "'");
}

void check_floating(const char* op, c10::ScalarType t) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(t), "\"", op, "\" not implemented for '", c10::toString(t), "'");
}

// ------------------------------------------------------------ unary float functions

at::Tensor float_unary(const char* op, Fn1 fn, bool half_ok, const at::Tensor& self, const at::Tensor* out,
                       bool inplace) {
  c10::ScalarType result = float_type_for(self.scalar_type());
  if (!half_ok) check_no_half(op, result);
  std::string name = variant(op, out, inplace);
  return elementwise(name.c_str(), {self}, lowering::opmath_type(result), result,
                     [fn](ir::Graph& g, const std::vector<ir::Value>& v) { return fn(g, v[0]); }, out, inplace);
}

template <Fn1 kFn, bool kHalfOk>
at::Tensor float_unary_kernel(Overload o, const at::Tensor& self) {
  return float_unary(o.name, kFn, kHalfOk, self, o.out, o.inplace);
}

// Ops with an in-place variant.
#define INPLACE_UNARY_OPS(X) \
  X(digamma, sp::digamma, true) \
  X(lgamma, sp::lgamma, true)   \
  X(erfc, sp::erfc, true)       \
  X(i0, sp::i0, true)           \
  X(sinc, sp::sinc, true)
// Ops with functional and out= variants only.
#define PLAIN_UNARY_OPS(X)                                                          \
  X(special_i0e, sp::i0e, true)                                                     \
  X(special_i1, sp::i1, true)                                                       \
  X(special_i1e, sp::i1e, true)                                                     \
  X(special_entr, sp::entr, true)                                                   \
  X(special_erfcx, sp::erfcx, false)                                                \
  X(special_log_ndtr, sp::log_ndtr, false)                                          \
  X(special_ndtri, sp::ndtri, false)                                                \
  X(special_bessel_j0, sp::bessel_j0, false)                                        \
  X(special_bessel_j1, sp::bessel_j1, false)                                        \
  X(special_bessel_y0, sp::bessel_y0, false)                                        \
  X(special_bessel_y1, sp::bessel_y1, false)                                        \
  X(special_modified_bessel_i0, sp::i0, false)                                      \
  X(special_modified_bessel_i1, sp::i1, false)                                      \
  X(special_modified_bessel_k0, sp::modified_bessel_k0, false)                      \
  X(special_modified_bessel_k1, sp::modified_bessel_k1, false)                      \
  X(special_scaled_modified_bessel_k0, sp::scaled_modified_bessel_k0, false)        \
  X(special_scaled_modified_bessel_k1, sp::scaled_modified_bessel_k1, false)        \
  X(special_spherical_bessel_j0, sp::spherical_bessel_j0, false)                    \
  X(special_airy_ai, sp::airy_ai, false)

// ------------------------------------------------------------ polygamma, mvlgamma

at::Tensor polygamma(Overload o, int64_t n, const at::Tensor& self) {
  TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
  c10::ScalarType result = float_type_for(self.scalar_type());
  std::string name = o.name + std::to_string(n) + (o.out != nullptr ? ".out" : "");
  return elementwise(name.c_str(), {self}, lowering::opmath_type(result), result,
                     [n](ir::Graph& g, const std::vector<ir::Value>& v) { return sp::polygamma(g, n, v[0]); }, o.out,
                     false);
}

// mvlgamma itself is composite (lgamma of shifted copies, summed); out= is not.
at::Tensor& mvlgamma_out(const at::Tensor& self, int64_t p, at::Tensor& out) {
  at::Tensor r = at::mvlgamma(self, p);
  TORCH_CHECK(c10::canCast(r.scalar_type(), out.scalar_type()), "mvlgamma: result type ", self.scalar_type(),
              " can't be cast to the desired output type ", r.scalar_type());
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

// ------------------------------------------------------------ binary float functions

enum class Kind { PromoteToFloat, FloatingOnly, SameType };

at::Tensor binary_special(const char* op, Fn2 fn, Kind kind, bool half_ok, const at::Tensor& a, const at::Tensor& b,
                          const at::Tensor* out, bool inplace, bool opmath = true) {
  c10::ScalarType common = at::result_type(a, b);
  c10::ScalarType result = common;
  if (kind == Kind::PromoteToFloat) result = float_type_for(common);
  if (kind == Kind::FloatingOnly) check_floating(op, common);
  if (!half_ok) check_no_half(op, result);
  c10::ScalarType compute = opmath ? lowering::opmath_type(result) : result;
  std::string name = variant(op, out, inplace);
  return elementwise(name.c_str(), {a, b}, compute, result,
                     [fn](ir::Graph& g, const std::vector<ir::Value>& v) { return fn(g, v[0], v[1]); }, out, inplace);
}

template <Fn2 kFn, Kind kKind, bool kHalfOk, bool kOpmath = true>
at::Tensor binary_special_kernel(Overload o, const at::Tensor& a, const at::Tensor& b) {
  return binary_special(o.name, kFn, kKind, kHalfOk, a, b, o.out, o.inplace, kOpmath);
}

void check_heaviside(const at::Tensor& self, const at::Tensor& values) {
  TORCH_CHECK(!self.is_complex() && !values.is_complex(),
              "heaviside is not yet implemented for complex tensors.");
  TORCH_CHECK(self.dtype() == values.dtype(),
              "heaviside is not yet implemented for tensors with different dtypes.");
}
at::Tensor heaviside(Overload o, const at::Tensor& self, const at::Tensor& values) {
  check_heaviside(self, values);
  return binary_special(o.name, sp::heaviside, Kind::SameType, true, self, values, o.out, o.inplace);
}

// ------------------------------------------------------------ angle, frexp

// angle: the argument of a complex value (atan2 of its parts, as std::arg); 0 or pi
// for a real one, NaN kept.
at::Tensor angle(Overload o, const at::Tensor& self) {
  const std::string name = variant(o);
  if (self.is_complex()) {
    return elementwise(name.c_str(), {self}, self.scalar_type(), c10::toRealValueType(self.scalar_type()),
                       [](ir::Graph& g, const std::vector<ir::Value>& v) {
                         return ir::binary(g, ir::Op::Atan2, ir::imag(g, v[0]), ir::real(g, v[0]));
                       },
                       o.out);
  }
  c10::ScalarType result = float_type_for(self.scalar_type());
  return elementwise(name.c_str(), {self}, lowering::opmath_type(result), result,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) { return sp::angle_real(g, v[0]); }, o.out);
}

std::tuple<at::Tensor&, at::Tensor&> frexp_out(const at::Tensor& self, at::Tensor& mantissa, at::Tensor& exponent) {
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "torch.frexp() only supports floating-point dtypes");
  TORCH_CHECK(mantissa.dtype() == self.dtype(), "torch.frexp() expects mantissa to have dtype ", self.dtype(),
              " but got ", mantissa.dtype());
  TORCH_CHECK(exponent.dtype() == at::kInt, "torch.frexp() expects exponent to have int dtype but got ",
              exponent.dtype());
  c10::DeviceGuard guard(self.device());
  at::native::resize_output(mantissa, self.sizes());
  at::native::resize_output(exponent, self.sizes());
  Program p("frexp.Tensor_out", self.device());
  ir::Graph& g = p.graph();
  // Half types decompose exactly in float32 (their subnormals are normal there).
  ir::Value x = p.read_as(self, lowering::opmath_type(self.scalar_type()));
  p.write(mantissa, sp::frexp_mantissa(g, x));
  p.write(exponent, sp::frexp_exponent(g, x));
  p.run();
  return {mantissa, exponent};
}

// ------------------------------------------------------------ orthogonal polynomials

// The recurrence is unrolled to the largest degree present, read on the
// host (rounded up to a power of two so that programs are shared); degrees
// beyond kMaxDegree are refused rather than computed wrongly.
constexpr int64_t kMaxDegree = 4096;

int64_t recurrence_steps(const char* op, const at::Tensor& n, sp::Poly kind, c10::ScalarType compute) {
  if (n.numel() == 0) return 0;
  at::Tensor finite = c10::isFloatingType(n.scalar_type()) ? at::nan_to_num(n, 0.0, 0.0, 0.0) : n;
  double nmax = at::max(finite).item<double>();
  int64_t limit = kMaxDegree;
  if (kind == sp::Poly::HermiteH || kind == sp::Poly::HermiteHe)
    limit = sp::hermite_limit(lowering::to_ir(compute));  // ATen gives NaN above this degree
  else
    TORCH_CHECK(nmax <= static_cast<double>(kMaxDegree), op, ": polynomial degrees above ", kMaxDegree,
                " are not supported on tpu (got ", nmax, ")");
  if (nmax <= 1) return 0;
  int64_t needed = std::min(static_cast<int64_t>(nmax) - 1, limit - 1);
  int64_t steps = 8;
  while (steps < needed) steps *= 2;
  return std::min(steps, limit - 1);
}

template <sp::Poly kKind>
at::Tensor polynomial(Overload o, const at::Tensor& x, const at::Tensor& n) {
  c10::ScalarType result = float_type_for(at::result_type(x, n));
  check_no_half(o.name, result);
  int64_t steps = recurrence_steps(o.name, n, kKind, result);
  std::string name = variant(o) + "/" + std::to_string(steps);
  return elementwise(name.c_str(), {x, n}, result, result,
                     [steps](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return sp::polynomial(g, kKind, v[0], v[1], steps);
                     },
                     o.out);
}

#define POLYNOMIAL_OPS(X)                                                               \
  X(special_chebyshev_polynomial_t, sp::Poly::ChebyshevT)                               \
  X(special_chebyshev_polynomial_u, sp::Poly::ChebyshevU)                               \
  X(special_chebyshev_polynomial_v, sp::Poly::ChebyshevV)                               \
  X(special_chebyshev_polynomial_w, sp::Poly::ChebyshevW)                               \
  X(special_shifted_chebyshev_polynomial_t, sp::Poly::ShiftedChebyshevT)                \
  X(special_shifted_chebyshev_polynomial_u, sp::Poly::ShiftedChebyshevU)                \
  X(special_shifted_chebyshev_polynomial_v, sp::Poly::ShiftedChebyshevV)                \
  X(special_shifted_chebyshev_polynomial_w, sp::Poly::ShiftedChebyshevW)                \
  X(special_hermite_polynomial_h, sp::Poly::HermiteH)                                   \
  X(special_hermite_polynomial_he, sp::Poly::HermiteHe)                                 \
  X(special_laguerre_polynomial_l, sp::Poly::Laguerre)                                  \
  X(special_legendre_polynomial_p, sp::Poly::Legendre)

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define REGISTER_INPLACE(NAME, FN, HALF_OK) impl_variants<float_unary_kernel<FN, HALF_OK>, #NAME>(m);
#define REGISTER_PLAIN(NAME, FN, HALF_OK) impl_variants<float_unary_kernel<FN, HALF_OK>, #NAME>(m, kFunctionalAndOut);
  INPLACE_UNARY_OPS(REGISTER_INPLACE)
  PLAIN_UNARY_OPS(REGISTER_PLAIN)
#undef REGISTER_PLAIN
#undef REGISTER_INPLACE
  impl_variants<polygamma, "polygamma">(m, kFunctionalAndOut);
  m.impl("mvlgamma.out", mvlgamma_out);
  impl_variants<binary_special_kernel<sp::xlogy, Kind::PromoteToFloat, true>, "xlogy">(
      m, {".Tensor", "_.Tensor", ".OutTensor"});
  impl_variants<binary_special_kernel<sp::nextafter, Kind::FloatingOnly, true, false>, "nextafter">(m);
  impl_variants<binary_special_kernel<sp::igamma, Kind::FloatingOnly, true>, "igamma">(m);
  impl_variants<binary_special_kernel<sp::igammac, Kind::FloatingOnly, true>, "igammac">(m);
  impl_variants<heaviside, "heaviside">(m);
  impl_variants<binary_special_kernel<sp::xlog1py, Kind::PromoteToFloat, true>, "special_xlog1py">(
      m, kFunctionalAndOut);
  impl_variants<binary_special_kernel<sp::logaddexp, Kind::FloatingOnly, true>, "logaddexp">(m, kFunctionalAndOut);
  impl_variants<binary_special_kernel<sp::logaddexp2, Kind::FloatingOnly, true>, "logaddexp2">(m, kFunctionalAndOut);
  impl_variants<binary_special_kernel<sp::zeta, Kind::PromoteToFloat, false>, "special_zeta">(m, kFunctionalAndOut);
  impl_variants<angle, "angle">(m, kFunctionalAndOut);
  m.impl("frexp.Tensor_out", frexp_out);
#define REGISTER_POLYNOMIAL(NAME, KIND) impl_variants<polynomial<KIND>, #NAME>(m, kFunctionalAndOut);
  POLYNOMIAL_OPS(REGISTER_POLYNOMIAL)
#undef REGISTER_POLYNOMIAL
}

}  // namespace tpu::aten
