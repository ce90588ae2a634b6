// Sorting and order statistics: stable sorts with indices, top-k, k-th value,
// median, mode, unique, running extrema (cummax/cummin), logcumsumexp and
// binary search (searchsorted/bucketize).
//
// StableHLO's sort has one operand here (ir::sort), so a sort that needs the
// permutation sorts 64-bit words (key << 32 | position): the key is the
// element mapped to an unsigned 32-bit integer whose order is the element
// order (floats: sign-flipped bits, -0.0 folded onto +0.0, every NaN one
// largest key, so NaN sorts last ascending and first descending, as on CPU).
// 64-bit elements have two such digits and are sorted least significant digit
// first (an LSD radix sort of two stable passes): exact, no fallback.
#pragma once

#include <optional>
#include <vector>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

struct ValuesIndices {
  ir::Value values;
  ir::Value indices;  // s64
};

// The order-preserving u32 digits of x (most significant first): one for
// dtypes of up to 32 bits, two for 64-bit ones.
std::vector<ir::Value> sort_digits(ir::Graph& g, ir::Value x);
// The permutation (s64, x's shape) that stably sorts x along `dim`.
ir::Value sort_indices(ir::Graph& g, ir::Value x, int64_t dim, bool descending);
// Sorted values (gathered from x, so bit-exact) and their source indices.
ValuesIndices sort(ir::Graph& g, ir::Value x, int64_t dim, bool descending);

// The k largest (or smallest) along dim, in sorted order.
ValuesIndices topk(ir::Graph& g, ir::Value x, int64_t k, int64_t dim, bool largest);
// The k-th smallest (1-based) along dim; dim removed.
ValuesIndices kthvalue(ir::Graph& g, ir::Value x, int64_t k, int64_t dim);
// Lower median along dim (dim removed). NaN propagates (the first NaN's
// index) unless `ignore_nan` (nanmedian: the median of the non-NaN values).
ValuesIndices median(ir::Graph& g, ir::Value x, int64_t dim, bool ignore_nan);
// Most frequent value along dim (dim removed): the smallest of equally
// frequent ones, with the index of its last occurrence (as ATen's CPU kernel).
ValuesIndices mode(ir::Graph& g, ir::Value x, int64_t dim);

// Running max (or min) along dim and the index where it was last attained;
// a NaN wins and propagates (ATen's cummax/cummin).
ValuesIndices cum_extreme(ir::Graph& g, ir::Value x, int64_t dim, bool is_max);
// log(cumsum(exp(x))) along dim, computed as a scan of log-add-exp.
ir::Value logcumsumexp(ir::Graph& g, ir::Value x, int64_t dim);

// For each element of `values` (shape [..., N]), its insertion position in
// the sorted last dim of `sorted` (shape [..., M] with the same leading dims,
// or [M] shared by all): the first position whose boundary is >= (right:
// >) the value, by ATen's own comparisons (so NaNs land where CPU puts them).
ir::Value search_sorted(ir::Graph& g, ir::Value sorted, ir::Value values, bool right);

// unique over a flat (rank-1) x: x sorted (when `sort`) or as is, the mask of
// each run's first element, and the permutation used (iota when unsorted).
struct Runs {
  ir::Value values;  // x in run order
  ir::Value order;   // s64: source position of each element of `values`
  ir::Value first;   // pred: starts a run (differs from its predecessor)
};
Runs runs(ir::Graph& g, ir::Value flat, bool sort);
// Number of runs (s64 scalar).
ir::Value run_count(ir::Graph& g, const Runs& r);
// The run results once the host knows `count`: each run's value, the run of
// every source element (s64, flat) and each run's length (s64).
struct RunResults {
  ir::Value values;
  ir::Value inverse;
  ir::Value counts;
};
RunResults run_results(ir::Graph& g, const Runs& r, int64_t count);

// Whether each element of `elements` occurs in `test` (any shapes).
ir::Value isin(ir::Graph& g, ir::Value elements, ir::Value test);

// ------------------------------------------------------------ histograms

// Sum of `weight` [n] (or count, when absent) per bin into [bins] of `dtype`;
// `bin` [n] s64 names each element's bin, -1 (or any index outside) skips it.
ir::Value bin_counts(ir::Graph& g, ir::Value bin, std::optional<ir::Value> weight, int64_t bins, ir::DType dtype);

// ATen's histc of flat x [n] (in its accumulation dtype, s64 for integers): `bins`
// equal-width bins over [lo, hi] (0-dim), or over x's range (NaNs ignored) when
// data_range, widened by 1 each way where it is a point; values outside and NaNs
// are not counted, hi itself lands in the last bin. Integer x bins with integer
// arithmetic, as CUDA's histc does.
ir::Value histc(ir::Graph& g, ir::Value x, int64_t bins, ir::Value lo, ir::Value hi, bool data_range);
// The bin of each element of x [n] among the E >= 2 edges [E] of x's dtype,
// as ATen's histogram kernels: the last edge <= x (upper bound - 1), the
// last bin closed on the right; -1 outside [edges[0], edges[E - 1]] and for NaN.
ir::Value edge_bin(ir::Graph& g, ir::Value x, ir::Value edges);

}  // namespace tpu::lowering
