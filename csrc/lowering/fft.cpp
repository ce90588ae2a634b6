#include "lowering/fft.h"

#include <cmath>
#include <stdexcept>

#include "ir/ops.h"

namespace tpu::lowering {
namespace {

using ir::Value;

// stablehlo.fft of `type` over `dims` (at most three), which are moved
// innermost for it and back afterwards.
Value fft_over(ir::Graph& g, Value x, const ir::Dims& dims, ir::FftType type, int64_t irfft_length) {
  const ir::Type t = g.type(x);
  int64_t rank = t.rank();
  ir::Dims perm;
  for (int64_t d = 0; d < rank; ++d) {
    bool transformed = false;
    for (int64_t k : dims) transformed = transformed || k == d;
    if (!transformed) perm.push_back(d);
  }
  for (int64_t d : dims) perm.push_back(d);
  ir::Dims inverse(rank);
  for (int64_t i = 0; i < rank; ++i) inverse[perm[i]] = i;
  Value moved = ir::transpose(g, x, perm);
  ir::Dims lengths;
  for (int64_t d : dims) lengths.push_back(t.shape[d]);
  if (type == ir::FftType::IRFFT) lengths.back() = irfft_length;
  Value r = ir::fft(g, moved, type, lengths);
  return ir::transpose(g, r, inverse);
}

// Complex transforms over any number of dims, three at a time.
Value c2c_groups(ir::Graph& g, Value x, const ir::Dims& dims, bool forward) {
  for (size_t start = 0; start < dims.size(); start += 3) {
    ir::Dims group(dims.begin() + start, dims.begin() + std::min(dims.size(), start + 3));
    x = fft_over(g, x, group, forward ? ir::FftType::FFT : ir::FftType::IFFT, 0);
  }
  return x;
}

// Multiplies by `factor` (XLA's own 1/n of inverse transforms already undone by the caller's factor).
Value scale_by(ir::Graph& g, Value x, double factor) {
  if (factor == 1.0) return x;
  const ir::Type& t = g.type(x);
  return ir::binary(g, ir::Op::Multiply, x, ir::full(g, t.dtype, factor, t.shape));
}

// The factor turning XLA's result into ATen's: XLA divides inverse transforms by n.
double factor(FftNorm norm, double n, bool xla_divided) {
  double aten = norm == FftNorm::None ? 1.0 : norm == FftNorm::ByRootN ? 1.0 / std::sqrt(n) : 1.0 / n;
  return xla_divided ? aten * n : aten;
}

double signal_size(const ir::Shape& shape, const ir::Dims& dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(shape[d]);
  return n;
}

}  // namespace

Value fft_c2c(ir::Graph& g, Value x, const ir::Dims& dims, FftNorm norm, bool forward) {
  const ir::Type t = g.type(x);
  if (ir::numel(t.shape) == 0 || dims.empty()) return x;
  Value r = c2c_groups(g, x, dims, forward);
  return scale_by(g, r, factor(norm, signal_size(t.shape, dims), !forward));
}

Value fft_r2c(ir::Graph& g, Value x, const ir::Dims& dims, FftNorm norm, bool onesided) {
  const ir::Type t = g.type(x);
  ir::DType complex = ir::complex_of(t.dtype);
  ir::Shape shape = t.shape;
  if (onesided) shape[dims.back()] = shape[dims.back()] / 2 + 1;
  if (ir::numel(t.shape) == 0) return ir::full(g, complex, 0, shape);
  double n = signal_size(t.shape, dims);
  Value r;
  if (onesided) {
    r = fft_over(g, x, {dims.back()}, ir::FftType::RFFT, 0);
    r = c2c_groups(g, r, ir::Dims(dims.begin(), dims.end() - 1), true);
  } else {
    r = c2c_groups(g, ir::convert(g, x, complex), dims, true);
  }
  return scale_by(g, r, factor(norm, n, false));
}

Value fft_c2r(ir::Graph& g, Value x, const ir::Dims& dims, FftNorm norm, int64_t last_dim_size) {
  const ir::Type t = g.type(x);
  ir::DType real = ir::complex_part(t.dtype);
  ir::Shape shape = t.shape;
  int64_t last = dims.back();
  shape[last] = last_dim_size;
  if (ir::numel(shape) == 0) return ir::full(g, real, 0, shape);
  // IRFFT reads n/2+1 entries of the last dimension: trim or zero-pad to that.
  int64_t half = last_dim_size / 2 + 1;
  if (t.shape[last] > half) {
    ir::Dims start(t.rank(), 0), limit = t.shape;
    limit[last] = half;
    x = ir::slice(g, x, start, limit);
  } else if (t.shape[last] < half) {
    ir::Dims low(t.rank(), 0), high(t.rank(), 0);
    high[last] = half - t.shape[last];
    x = ir::pad(g, x, ir::constant(g, t.dtype, 0), low, high);
  }
  Value r = c2c_groups(g, x, ir::Dims(dims.begin(), dims.end() - 1), false);
  r = fft_over(g, r, {last}, ir::FftType::IRFFT, last_dim_size);
  return scale_by(g, r, factor(norm, signal_size(shape, dims), true));
}

}  // namespace tpu::lowering
