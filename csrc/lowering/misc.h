// Pairwise distances (cdist, pdist) and segment reductions, forward and
// backward, reproducing ATen's CPU kernels' formulas (including their
// conventions for zero distances, ties and empty segments).
#pragma once

#include <optional>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// ------------------------------------------------------------ distances

// The p-norm of `diff` (x_i - y_j) over its last dim, as ATen's distance
// kernels: p = 0 counts nonzero differences, p = inf takes the largest |diff|.
ir::Value pnorm_last(ir::Graph& g, ir::Value diff, double p);
// d dist / d x_i for one pair, elementwise: `diff` [..., M] and `grad`,
// `dist` broadcast to it; 0 where the distance is 0 (and for p = 0).
ir::Value pnorm_grad(ir::Graph& g, ir::Value diff, ir::Value grad, ir::Value dist, double p);

// cdist of x1 [B, P, M] and x2 [B, R, M] -> [B, P, R].
ir::Value cdist(ir::Graph& g, ir::Value x1, ir::Value x2, double p);
// The Euclidean distance through a matrix product (ATen's mm path for p = 2):
// sqrt(max(|a|^2 - 2 a.b + |b|^2, 0)).
ir::Value cdist_euclidean_mm(ir::Graph& g, ir::Value x1, ir::Value x2);
// Gradient of x1 [B, P, M] from grad and dist [B, P, R].
ir::Value cdist_backward(ir::Graph& g, ir::Value grad, ir::Value x1, ir::Value x2, double p, ir::Value dist);

// The row pairs (i < j) of pdist in ATen's order, each s64 [N (N - 1) / 2].
struct Pairs {
  ir::Value i, j;
};
Pairs pdist_pairs(ir::Graph& g, int64_t n);
// pdist of x [N, M] -> [N (N - 1) / 2]; its gradient [N, M] from grad and dist.
ir::Value pdist(ir::Graph& g, ir::Value x, double p);
ir::Value pdist_backward(ir::Graph& g, ir::Value grad, ir::Value x, double p, ir::Value dist);

// ------------------------------------------------------------ segment reductions

enum class SegmentReduce { Max, Mean, Min, Sum, Prod };
// data [B, L, I] reduced along L over the segments [offsets[b, s],
// offsets[b, s + 1]) (offsets s64 [B, S + 1], non-decreasing) -> [B, S, I].
// Empty segments give `initial` (a scalar of data's dtype) when given, else
// the reduction's identity (NaN for mean). Elements outside every segment
// are ignored (ATen's unsafe mode).
ir::Value segment_reduce(ir::Graph& g, ir::Value data, ir::Value offsets, SegmentReduce kind,
                         std::optional<ir::Value> initial);
// Gradient of data [B, L, I] from grad and output [B, S, I]. Max/min share
// the gradient among tied extrema (dividing only positive gradients, as ATen's
// CPU kernel); prod divides by the element, or takes the product of the
// others for zeros and NaNs.
ir::Value segment_reduce_backward(ir::Graph& g, ir::Value grad, ir::Value output, ir::Value data, ir::Value offsets,
                                  SegmentReduce kind, std::optional<ir::Value> initial);

}  // namespace tpu::lowering
