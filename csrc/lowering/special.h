// Special math functions (gamma family, Bessel functions, error-function
// relatives, orthogonal polynomials, xlogy/logaddexp/...). Operands arrive
// broadcast to one shape in the computation dtype (f32 for half types, as
// ATen's CPU kernels compute them; f64 stays f64).
//
// StableHLO programs here have no loops: series and recurrences are unrolled
// to fixed counts chosen so that they reach ATen's CPU results; where a
// count depends on the data (polynomial degree) the caller passes a bound
// and elements beyond it are documented below.
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering::special {

using ir::Graph;
using ir::Value;

// Gamma family.
Value lgamma(Graph& g, Value x);
Value digamma(Graph& g, Value x);
Value trigamma(Graph& g, Value x);
// polygamma(n, x) for any n >= 0 (n is part of the program).
Value polygamma(Graph& g, int64_t n, Value x);
// Hurwitz zeta(x, q) as Cephes' zeta (ATen's CPU kernel): a direct sum up
// to q + i > 9, then Euler-Maclaurin. The direct sum is unrolled to
// kZetaTerms terms, which covers every q > 9 - kZetaTerms; smaller q (only
// reachable with an integer x) give NaN rather than a wrong value.
constexpr int kZetaTerms = 40;
Value zeta(Graph& g, Value x, Value q);

// Regularized incomplete gamma functions P(a, x) (igamma) and Q(a, x) =
// 1 - P (igammac), with ATen's boundary values and choice of method per
// region (power series, Legendre's continued fraction, the small-x series
// for Q). Each method is a fixed kIgammaTerms-term computation vectorised
// along an extra axis (cumulative products and a tree product of the
// continued fraction's 2x2 matrices), so programs stay small. Where ATen
// switches to Temme's uniform expansion (a > 20, x near a) the series /
// continued fraction are used instead; they converge there for a up to a few
// hundred and lose accuracy beyond.
constexpr int64_t kIgammaTerms = 64;
Value igamma(Graph& g, Value a, Value x);
Value igammac(Graph& g, Value a, Value x);

// Error function relatives.
Value erfc(Graph& g, Value x);
Value erfcx(Graph& g, Value x);
Value ndtri(Graph& g, Value x);
Value log_ndtr(Graph& g, Value x);

// Bessel and Airy functions.
Value i0(Graph& g, Value x);
Value i0e(Graph& g, Value x);
Value i1(Graph& g, Value x);
Value i1e(Graph& g, Value x);
Value bessel_j0(Graph& g, Value x);
Value bessel_j1(Graph& g, Value x);
Value bessel_y0(Graph& g, Value x);
Value bessel_y1(Graph& g, Value x);
Value modified_bessel_k0(Graph& g, Value x);
Value modified_bessel_k1(Graph& g, Value x);
Value scaled_modified_bessel_k0(Graph& g, Value x);
Value scaled_modified_bessel_k1(Graph& g, Value x);
Value spherical_bessel_j0(Graph& g, Value x);
Value airy_ai(Graph& g, Value x);

// Orthogonal polynomials p_n(x); n (x's dtype) is truncated toward zero as
// ATen does. The three-term recurrence is unrolled `steps` times: exact for
// every element with n <= steps + 1 (the caller bounds n on the host).
enum class Poly {
  ChebyshevT, ChebyshevU, ChebyshevV, ChebyshevW,
  ShiftedChebyshevT, ShiftedChebyshevU, ShiftedChebyshevV, ShiftedChebyshevW,
  HermiteH, HermiteHe, Laguerre, Legendre,
};
Value polynomial(Graph& g, Poly kind, Value x, Value n, int64_t steps);
// ATen's CPU kernel returns NaN for Hermite degrees above this (per dtype).
int64_t hermite_limit(ir::DType dtype);

// Elementwise odds and ends.
Value sinc(Graph& g, Value x);
Value entr(Graph& g, Value x);
Value xlogy(Graph& g, Value x, Value y);
Value xlog1py(Graph& g, Value x, Value y);
Value logaddexp(Graph& g, Value a, Value b);
Value logaddexp2(Graph& g, Value a, Value b);
// Computed in the operands' own dtype (steps of that dtype's ulp).
Value nextafter(Graph& g, Value a, Value b);
Value heaviside(Graph& g, Value x, Value values);
Value angle_real(Graph& g, Value x);  // x floating
// frexp of a floating x: mantissa (x's dtype) and exponent (s32).
Value frexp_mantissa(Graph& g, Value x);
Value frexp_exponent(Graph& g, Value x);

}  // namespace tpu::lowering::special
