// Convolutions and pooling, channels-first ([N, C, spatial...]) as ATen lays
// them out. Backward passes are convolutions/windows too, so one program per
// op serves forward and backward alike.
#pragma once

#include <optional>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

// Stride, padding and dilation per spatial dimension; padding is symmetric.
struct ConvParams {
  ir::Dims stride, padding, dilation;
  int64_t groups = 1;
};

// x [N, C, in...] * w [O, C/groups, k...] -> [N, O, out...], in `result`
// (operands are computed in their dtype with `result` precision).
ir::Value conv_forward(ir::Graph& g, ir::Value x, ir::Value w, const ConvParams& p, ir::DType result);
// Gradient of conv_forward with respect to x (also the transposed convolution):
// gy [N, O, out...], w [O, C/groups, k...] -> [N, C, input_spatial...].
ir::Value conv_input_grad(ir::Graph& g, ir::Value gy, ir::Value w, const ConvParams& p,
                          const ir::Dims& input_spatial, ir::DType result);
// Gradient of conv_forward with respect to w: x [N, C, in...], gy [N, O, out...]
// -> [O, C/groups, kernel_spatial...].
ir::Value conv_weight_grad(ir::Graph& g, ir::Value x, ir::Value gy, const ConvParams& p,
                           const ir::Dims& kernel_spatial, ir::DType result);

// Pooling over the trailing kernel.size() dimensions of x; leading dims are
// independent planes.
struct PoolParams {
  ir::Dims kernel, stride, padding, dilation;
  bool ceil_mode = false;
};
// ATen's pooling_output_shape (ceil_mode never starts a window in the right padding).
int64_t pooling_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                            bool ceil_mode);
struct MaxPoolResult {
  ir::Value values, indices;  // indices: s64 flat positions within each input plane
};
// Max and its position, as ATen picks it: the first maximum of a window in
// row-major order, or its last NaN.
MaxPoolResult max_pool(ir::Graph& g, ir::Value x, const PoolParams& p);
// Scatters gy [planes..., out...] into the input positions `indices`, summing duplicates.
ir::Value max_pool_backward(ir::Graph& g, ir::Value gy, ir::Value indices, const ir::Shape& input_shape,
                            int64_t spatial_rank, ir::DType accumulate);
// Average pooling (dilation must be 1) with ATen's divisor rules.
ir::Value avg_pool(ir::Graph& g, ir::Value x, const PoolParams& p, bool count_include_pad,
                   std::optional<int64_t> divisor_override, ir::DType accumulate);
ir::Value avg_pool_backward(ir::Graph& g, ir::Value gy, const ir::Shape& input_shape, const PoolParams& p,
                            bool count_include_pad, std::optional<int64_t> divisor_override,
                            ir::DType accumulate);
// Adaptive average pooling to `output` sizes of the trailing dims: cell i of
// a dim of size n covers [floor(i*n/out), ceil((i+1)*n/out)).
ir::Value adaptive_avg_pool(ir::Graph& g, ir::Value x, const ir::Dims& output, ir::DType accumulate);
ir::Value adaptive_avg_pool_backward(ir::Graph& g, ir::Value gy, const ir::Shape& input_shape,
                                     int64_t spatial_rank, ir::DType accumulate);

// Adaptive max pooling to `output` sizes of the trailing dims (cells as in
// adaptive_avg_pool), with ATen's pick: the first maximum of a cell in
// row-major order, or its last NaN.
MaxPoolResult adaptive_max_pool(ir::Graph& g, ir::Value x, const ir::Dims& output);
// Fractional max pooling of x [P, spatial...]: windows of `kernel` whose
// starts come from samples [P, k] (x's dtype; spatial dim d uses sample
// column sample_column[d]) as ATen's generate_intervals draws them.
MaxPoolResult fractional_max_pool(ir::Graph& g, ir::Value x, ir::Value samples, const ir::Dims& kernel,
                                  const ir::Dims& output, const ir::Dims& sample_column);
// max_unpool: x and indices [P, L] (plane-local flat positions) scattered into zeros [P, size].
ir::Value max_unpool(ir::Graph& g, ir::Value x, ir::Value indices, int64_t size);

}  // namespace tpu::lowering
