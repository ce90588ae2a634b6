// Reductions over a set of dimensions. Dims normalisation, keepdim handling
// and accumulation dtypes live here, in one place, for every op family that
// reduces (reductions, norms, softmax, normalisation layers, losses).
#pragma once

#include <optional>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// Accumulation dtype of sums, products and moments: float32 for half types,
// as ATen does on CPU and CUDA; other dtypes accumulate in themselves.
ir::DType accumulate_dtype(ir::DType t);

// `dim` wrapped into [0, rank) (a 0-dim tensor accepts 0 and -1); throws
// c10::IndexError with ATen's message when out of range.
int64_t wrap_dim(int64_t dim, int64_t rank);
// Normalised, sorted, de-duplicated dims; an empty `dims` means all of them.
// Throws c10::IndexError when a dim is out of range.
ir::Dims reduction_dims(const ir::Dims& dims, int64_t rank);
// The shape of `input` reduced over `dims`.
ir::Shape reduced_shape(const ir::Shape& input, const ir::Dims& dims, bool keepdim);
// Number of elements reduced over.
int64_t reduced_count(const ir::Shape& input, const ir::Dims& dims);
// Re-inserts reduced dims as size 1.
ir::Value keep_dims(ir::Graph& g, ir::Value reduced, const ir::Shape& input_shape, const ir::Dims& dims);
// Broadcasts a value reduced over `dims` (kept or not) back to `shape`.
ir::Value expand_reduced(ir::Graph& g, ir::Value reduced, const ir::Shape& shape, const ir::Dims& dims);

// Sum of `x` over `dims`, accumulated in `accumulate` and returned in `result`.
ir::Value sum(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim, ir::DType accumulate,
              ir::DType result);
ir::Value mean(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim, ir::DType accumulate,
               ir::DType result);
ir::Value prod(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim, ir::DType accumulate,
               ir::DType result);
// Max/min in x's dtype; NaN propagates. Empty reductions give the identity
// (-inf/+inf, the integer limits): callers reject them where ATen does.
ir::Value amax(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim);
// The max over dims as a shift before exp (softmax): a NaN in the slice need
// not survive here (it poisons the sum anyway), which saves amax's NaN scan.
ir::Value shift_max(ir::Graph& g, ir::Value x, const ir::Dims& dims);
ir::Value amin(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim);
// Index (s64) of the first max/min along `dim`; the first NaN wins, as in
// ATen. With `dim` empty the index is into the flattened tensor.
ir::Value arg_extreme(ir::Graph& g, ir::Value x, std::optional<int64_t> dim, bool keepdim, bool is_max);
// all/any: truth of x's elements (x != 0) combined with and/or; a pred result.
ir::Value all(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim);
ir::Value any(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim);

struct Moments {
  ir::Value var;
  ir::Value mean;
};
// Variance with `correction` (1 = unbiased) and mean, in `result`; two-pass
// in the accumulation dtype.
Moments moments(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim, double correction,
                ir::DType result);
// log(sum(exp(x))) over dims, stabilised by the max (infinite maxima are not
// subtracted, as in ATen).
ir::Value logsumexp(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim, ir::DType result);
// Vector p-norm (ord 0, +-inf, 1, 2 or any p) of a floating x, in `result`.
ir::Value vector_norm(ir::Graph& g, ir::Value x, double ord, const ir::Dims& dims, bool keepdim,
                      ir::DType result);
// Inclusive scan (Add or Mul) along `dim` in log2(n) shifted combines,
// computed in accumulate_dtype(result) and returned in `result`.
ir::Value cumulative(ir::Graph& g, ir::Value x, int64_t dim, ir::Combiner combiner, ir::DType result);

// Whether every element of x is finite: a 0-dim pred.
ir::Value all_finite(ir::Graph& g, ir::Value x);

}  // namespace tpu::lowering
