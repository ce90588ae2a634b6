// Discrete Fourier transforms (ATen's _fft_c2c, _fft_r2c, _fft_c2r) as
// stablehlo.fft over any set of dimensions: the transformed dimensions are
// moved innermost, at most three at a time, and the result is scaled to
// ATen's normalization.
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// ATen's fft_norm_mode: no scaling, 1/sqrt(n) or 1/n (n: the signal size).
enum class FftNorm : int64_t { None = 0, ByRootN = 1, ByN = 2 };

// Complex to complex over `dims` (distinct, non-negative), unnormalized
// inverse when !forward, then scaled by `norm`.
ir::Value fft_c2c(ir::Graph& g, ir::Value x, const ir::Dims& dims, FftNorm norm, bool forward);
// Real to complex (forward); `onesided` keeps n/2+1 entries of dims.back().
ir::Value fft_r2c(ir::Graph& g, ir::Value x, const ir::Dims& dims, FftNorm norm, bool onesided);
// Complex (Hermitian, onesided along dims.back()) to real (inverse); the last
// transformed dimension of the result has `last_dim_size` entries.
ir::Value fft_c2r(ir::Graph& g, ir::Value x, const ir::Dims& dims, FftNorm norm,
                  int64_t last_dim_size);

}  // namespace tpu::lowering
