// Counter-based random numbers: Threefry-2x32 (20 rounds) over (seed, offset + i).
// Pure integer arithmetic, so every plugin produces the same stream for the
// same generator state, and seed/offset are runtime parameters (no recompiles).
#pragma once

#include "ir/graph.h"

namespace tpu::lowering {

struct RandomBits {
  ir::Value word0;  // u32, shape [n]
  ir::Value word1;  // u32, shape [n]
};

// Two independent 32-bit words for each of `n` counters offset + 0 .. offset + n - 1.
// `seed` and `offset` are u64 scalars.
RandomBits random_bits(ir::Graph& g, ir::Value seed, ir::Value offset, int64_t n);
// Uniform floats in [0, 1) of `dtype` (f32 computation, 24 random bits).
ir::Value uniform_01(ir::Graph& g, ir::Value word, ir::DType dtype);
// Standard normal samples (Box-Muller) from two words, in `dtype`.
ir::Value standard_normal(ir::Graph& g, const RandomBits& bits, ir::DType dtype);

// The samplers, each a transformation of the draws as ATen's CPU kernels make it.
// Operands are flat [n] values in the compute dtype unless said otherwise.
// Uniform in [lo, lo + range) rounded to `out`; a draw that rounds up to `hi` is
// folded back to lo (ATen's rule), so the range stays [lo, hi).
ir::Value uniform(ir::Graph& g, const RandomBits& bits, ir::Value lo, ir::Value range, ir::Value hi, ir::DType out);
// mean + std * z for standard normal z.
ir::Value normal(ir::Graph& g, const RandomBits& bits, ir::Value mean, ir::Value std);
// True where a uniform draw falls below p.
ir::Value bernoulli(ir::Graph& g, const RandomBits& bits, ir::Value p);
// from + (the 64 bits of both words mod range): s64 integers in [from, from + range);
// from is s64, range u64.
ir::Value random_integers(ir::Graph& g, const RandomBits& bits, ir::Value from, ir::Value range);
// Dropout's x * mask * scale (forward, and backward with the gradient as x).
ir::Value dropout_scale(ir::Graph& g, ir::Value x, ir::Value mask, ir::Value scale);

}  // namespace tpu::lowering
