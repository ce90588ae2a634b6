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

}  // namespace tpu::lowering
