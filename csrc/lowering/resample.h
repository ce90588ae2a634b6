// Resampling along spatial dims: reflection/replication padding,
// interpolation (nearest, linear, cubic, antialiased), im2col/col2im.
// Every one is, per spatial dim, a gather of a few "taps" with host-computed
// index and weight tables (exactly ATen's arithmetic), so the backward pass is
// the matching scatter-add and NaN/inf stay local as on CPU.
#pragma once

#include <optional>
#include <vector>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// For each output position o of one dim: taps input positions index[o*count+t]
// with weights weight[o*count+t] (empty weight: a single unweighted tap).
struct Taps {
  int64_t in = 0, out = 0, count = 1;
  std::vector<int64_t> index;
  std::vector<double> weight;
};

// Applies `taps` along `dim` of x (weights in x's dtype, which must be
// floating when weighted).
ir::Value apply_taps(ir::Graph& g, ir::Value x, int64_t dim, const Taps& taps);
// The transpose of apply_taps: scatters-adds gy (dim of size taps.out) back to taps.in.
ir::Value apply_taps_backward(ir::Graph& g, ir::Value gy, int64_t dim, const Taps& taps);

// Padding modes of reflection_pad / replication_pad; pads may be negative.
enum class PadMode { Reflect, Replicate };
Taps pad_taps(PadMode mode, int64_t in, int64_t before, int64_t after);

// Interpolation modes of the upsample_* ops.
enum class Interp { Nearest, NearestExact, Linear, Cubic, LinearAA, CubicAA };
// Taps of one dim; `scale` is the user's scale factor (output/input) when
// given, `double_precision` whether the op computes in double (f64 inputs).
Taps interp_taps(Interp mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale,
                 bool double_precision);

// im2col of x [N, C, H, W] -> [N, C*kh*kw, L] and col2im back to [N, C, H, W] (summing overlaps).
struct Im2ColParams {
  ir::Dims kernel, dilation, padding, stride;
};
ir::Value im2col(ir::Graph& g, ir::Value x, const Im2ColParams& p);
ir::Value col2im(ir::Graph& g, ir::Value cols, const ir::Dims& output_size, const Im2ColParams& p);

}  // namespace tpu::lowering

namespace tpu::lowering {

// grid_sampler_2d/3d: input [N, C, spatial...] sampled at grid [N, out..., k]
// (x, y[, z] in [-1, 1]); interpolation 0 bilinear, 1 nearest, 2 bicubic (2d);
// padding 0 zeros, 1 border, 2 reflection. Computed in `acc` (a float dtype).
struct GridSampleParams {
  int64_t interpolation = 0, padding = 0;
  bool align_corners = false;
};
ir::Value grid_sample(ir::Graph& g, ir::Value input, ir::Value grid, const GridSampleParams& p, ir::DType acc);
struct GridSampleGrads {
  ir::Value input, grid;  // invalid where not asked for
};
GridSampleGrads grid_sample_backward(ir::Graph& g, ir::Value grad, ir::Value input, ir::Value grid,
                                     const GridSampleParams& p, bool input_grad, bool grid_grad, ir::DType acc);

}  // namespace tpu::lowering
