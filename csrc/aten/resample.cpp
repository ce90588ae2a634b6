// Padding (reflection, replication), upsampling (nearest, linear, cubic,
// antialiased), im2col/col2im and channel_shuffle: ATen's checks, shapes and
// overloads around lowering/resample.*.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <sstream>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/resample.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using lowering::Interp;
using lowering::PadMode;
using lowering::Taps;

ir::Dims int_list(c10::SymIntArrayRef v) {
  ir::Dims out;
  for (const c10::SymInt& s : v) out.push_back(s.expect_int());
  return out;
}

// Runs `build` over `input` read in `compute`; the result (shape `shape`, dtype `dtype`, laid out in
// `format`) lands in out or a new tensor.
template <typename F>
at::Tensor run_op(const char* name, const at::Tensor& input, c10::IntArrayRef shape, c10::ScalarType dtype,
                  at::Tensor* out, c10::ScalarType compute, F build,
                  at::MemoryFormat format = at::MemoryFormat::Contiguous) {
  c10::DeviceGuard guard(input.device());
  at::Tensor output = prepare_output(name, out, shape, dtype, input.device(), false, format);
  if (output.numel() == 0) return output;
  if (input.numel() == 0) return output.zero_();
  Program p(name, input.device());
  p.write(output, build(p.graph(), p.read_as(input, compute)));
  p.run();
  return output;
}

c10::ScalarType compute_type(c10::ScalarType t) {
  return t == c10::kHalf || t == c10::kBFloat16 ? c10::kFloat : t;  // ATen's opmath type
}

// ------------------------------------------------------------ padding

// pads in ATen's order: (left, right) of the last dim, then of the one before, ...
at::Tensor pad_op(const char* name, PadMode mode, int64_t k, const at::Tensor& self, c10::SymIntArrayRef padding_,
                  at::Tensor* out) {
  ir::Dims pads = int_list(padding_);
  TORCH_CHECK(static_cast<int64_t>(pads.size()) == 2 * k, "padding size is expected to be ", 2 * k);
  TORCH_CHECK(self.dim() == k + 1 || self.dim() == k + 2, "Expected ", k + 1, "D or ", k + 2,
              "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
              self.sizes());
  for (int64_t i = self.dim() == k + 2 ? 1 : 0; i < self.dim(); ++i)
      TORCH_CHECK(self.size(i) != 0, "Expected ", k + 1, "D or ", k + 2,
                  "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
                  self.sizes());
  c10::DimVector shape(self.sizes().begin(), self.sizes().end());
  std::vector<Taps> taps(k);
  for (int64_t d = 0; d < k; ++d) {
    int64_t dim = self.dim() - 1 - d, in = self.size(dim), l = pads[2 * d], r = pads[2 * d + 1];
    if (mode == PadMode::Reflect)
      TORCH_CHECK(l < in && r < in, "Argument #4: Padding size should be less than the corresponding input dimension, "
                  "but got: padding (", l, ", ", r, ") at dimension ", dim, " of input ", self.sizes());
    TORCH_CHECK(in + l + r >= 1, "input (", self.sizes(), ") is too small. Calculated output size along dimension ",
                dim, ": ", in + l + r);
    shape[dim] = in + l + r;
    taps[d] = lowering::pad_taps(mode, in, l, r);
  }
  return run_op(name, self, shape, self.scalar_type(), out, self.scalar_type(), [&](ir::Graph& g, ir::Value x) {
    for (int64_t d = 0; d < k; ++d) x = lowering::apply_taps(g, x, self.dim() - 1 - d, taps[d]);
    return x;
  });
}

at::Tensor pad_backward_op(const char* name, PadMode mode, int64_t k, const at::Tensor& grad, const at::Tensor& self,
                           c10::SymIntArrayRef padding_, at::Tensor* out) {
  ir::Dims pads = int_list(padding_);
  TORCH_CHECK(static_cast<int64_t>(pads.size()) == 2 * k, "padding size is expected to be ", 2 * k);
  TORCH_CHECK(grad.dim() == self.dim(), name, ": grad_output of rank ", grad.dim(), " for input of rank ", self.dim());
  std::vector<Taps> taps(k);
  for (int64_t d = 0; d < k; ++d) {
    int64_t dim = self.dim() - 1 - d, in = self.size(dim);
    taps[d] = lowering::pad_taps(mode, in, pads[2 * d], pads[2 * d + 1]);
    TORCH_CHECK(grad.size(dim) == taps[d].out, name, ": grad_output width unexpected. Expected: ", taps[d].out,
                ", Got: ", grad.size(dim));
  }
  c10::ScalarType t = grad.scalar_type();
  return run_op(name, grad, self.sizes(), t, out, compute_type(t), [&](ir::Graph& g, ir::Value x) {
    for (int64_t d = 0; d < k; ++d) x = lowering::apply_taps_backward(g, x, self.dim() - 1 - d, taps[d]);
    return x;
  });
}

// Padding and its gradient over the last kDims dims.
template <PadMode kMode, int64_t kDims>
at::Tensor pad(Overload o, const at::Tensor& self, c10::SymIntArrayRef padding) {
  return pad_op(variant(o).c_str(), kMode, kDims, self, padding, o.out);
}
template <PadMode kMode, int64_t kDims>
at::Tensor pad_backward(Overload o, const at::Tensor& grad, const at::Tensor& self, c10::SymIntArrayRef padding) {
  return pad_backward_op(variant(o).c_str(), kMode, kDims, grad, self, padding, o.out);
}

// ------------------------------------------------------------ upsampling

using Scales = std::vector<std::optional<double>>;

std::vector<Taps> upsample_taps(const char* name, Interp mode, c10::IntArrayRef input_size, const ir::Dims& output,
                                bool align_corners, const Scales& scales, c10::ScalarType dtype) {
  int64_t k = static_cast<int64_t>(output.size());
  TORCH_CHECK(static_cast<int64_t>(input_size.size()) == k + 2, "It is expected input_size equals to ", k + 2,
              ", but got size ", input_size.size());
  bool ok = true;
  std::ostringstream in_ss, out_ss;
  const char* names[3] = {"D", "H", "W"};
  for (int64_t d = 0; d < k; ++d) {
    ok = ok && input_size[2 + d] > 0 && output[d] > 0;
    const char* sep = d ? ", " : "";
    in_ss << sep << names[3 - k + d] << ": " << input_size[2 + d];
    out_ss << sep << names[3 - k + d] << ": " << output[d];
  }
  TORCH_CHECK(ok, "Input and output sizes should be greater than 0, but got input (", in_ss.str(), ") output (",
              out_ss.str(), ")");
  std::vector<Taps> taps;
  for (int64_t d = 0; d < k; ++d)
    taps.push_back(lowering::interp_taps(mode, input_size[2 + d], output[d], align_corners, scales[d],
                                         dtype == c10::kDouble));
  return taps;
}

void check_upsample_dtype(const char* name, Interp mode, c10::ScalarType t) {
  bool nearest = mode == Interp::Nearest || mode == Interp::NearestExact;
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(t) || (nearest && t == c10::kByte), "\"", name, "\" not implemented for '",
              c10::toString(t), "'");
}

at::Tensor upsample_op(const char* name, Interp mode, const at::Tensor& self, c10::SymIntArrayRef output_size,
                       bool align_corners, const Scales& scales, at::Tensor* out) {
  ir::Dims output = int_list(output_size);
  int64_t k = static_cast<int64_t>(output.size());
  TORCH_CHECK(static_cast<int64_t>(scales.size()) == k, name, ": expected ", k, " scales");
  TORCH_CHECK(self.dim() == k + 2, "Expected ", k + 2, "D input tensor, but got ", self.sizes());
  check_upsample_dtype(name, mode, self.scalar_type());
  int64_t rest = 1;  // an empty batch is fine, empty channels or spatial dims are not
  for (int64_t i = 1; i < self.dim(); ++i) rest *= self.size(i);
  TORCH_CHECK(self.numel() != 0 || rest != 0, "Non-empty ", k + 2, "D data tensor expected but got a tensor with sizes ",
              self.sizes());
  std::vector<Taps> taps = upsample_taps(name, mode, self.sizes(), output, align_corners, scales, self.scalar_type());
  c10::DimVector shape(self.sizes().begin(), self.sizes().end());
  for (int64_t d = 0; d < k; ++d) shape[2 + d] = output[d];
  bool nearest = mode == Interp::Nearest || mode == Interp::NearestExact;
  c10::ScalarType t = self.scalar_type();
  // Nearest picks elements (exact in any dtype); the others compute in the accumulation type.
  c10::ScalarType compute = nearest ? t : compute_type(t);
  // Upsampling keeps a channels-last input's layout, as ATen's CPU kernels do.
  return run_op(
      name, self, shape, t, out, compute,
      [&](ir::Graph& g, ir::Value x) {
        for (int64_t d = k - 1; d >= 0; --d) x = lowering::apply_taps(g, x, 2 + d, taps[d]);
        return x;
      },
      self.suggest_memory_format());
}

at::Tensor upsample_backward_op(const char* name, Interp mode, const at::Tensor& grad, c10::SymIntArrayRef output_size,
                                c10::SymIntArrayRef input_size_, bool align_corners, const Scales& scales,
                                at::Tensor* out) {
  ir::Dims output = int_list(output_size), input_size = int_list(input_size_);
  int64_t k = static_cast<int64_t>(output.size());
  TORCH_CHECK(grad.dim() == k + 2, "Expected grad_output to be a tensor of dimension ", k + 2, " but got: dimension ",
              grad.dim());
  for (int64_t d = 0; d < k; ++d)
    TORCH_CHECK(grad.size(2 + d) == output[d], "Expected grad_output to have the same shape as output; output.size(",
                2 + d, ") = ", output[d], " but got grad_output.size(", 2 + d, ") = ", grad.size(2 + d));
  std::vector<Taps> taps = upsample_taps(name, mode, input_size, output, align_corners, scales, grad.scalar_type());
  c10::ScalarType t = grad.scalar_type();
  // ATen's CPU gradients keep a channels-last grad's layout, but for the cubic modes and 3-d nearest.
  bool cubic = mode == Interp::Cubic || mode == Interp::CubicAA;
  bool nearest3d = (mode == Interp::Nearest || mode == Interp::NearestExact) && k == 3;
  at::MemoryFormat format = cubic || nearest3d ? at::MemoryFormat::Contiguous : grad.suggest_memory_format();
  return run_op(
      name, grad, input_size, t, out, compute_type(t),
      [&](ir::Graph& g, ir::Value x) {
        for (int64_t d = 0; d < k; ++d) x = lowering::apply_taps_backward(g, x, 2 + d, taps[d]);
        return x;
      },
      format);
}

using OptD = std::optional<double>;

// Upsampling and its gradient over as many spatial dims as there are Scale
// parameters (each an OptD, closing ATen's signatures); the interpolating modes
// take align_corners before them, the nearest modes do not.
template <Interp kMode, typename... Scale>
at::Tensor nearest(Overload o, const at::Tensor& self, c10::SymIntArrayRef output_size, Scale... scales) {
  return upsample_op(variant(o).c_str(), kMode, self, output_size, false, Scales{scales...}, o.out);
}
template <Interp kMode, typename... Scale>
at::Tensor nearest_backward(Overload o, const at::Tensor& grad, c10::SymIntArrayRef output_size,
                            c10::SymIntArrayRef input_size, Scale... scales) {
  return upsample_backward_op(variant(o).c_str(), kMode, grad, output_size, input_size, false, Scales{scales...},
                              o.out);
}
template <Interp kMode, typename... Scale>
at::Tensor interpolate(Overload o, const at::Tensor& self, c10::SymIntArrayRef output_size, bool align_corners,
                       Scale... scales) {
  return upsample_op(variant(o).c_str(), kMode, self, output_size, align_corners, Scales{scales...}, o.out);
}
template <Interp kMode, typename... Scale>
at::Tensor interpolate_backward(Overload o, const at::Tensor& grad, c10::SymIntArrayRef output_size,
                                c10::SymIntArrayRef input_size, bool align_corners, Scale... scales) {
  return upsample_backward_op(variant(o).c_str(), kMode, grad, output_size, input_size, align_corners,
                              Scales{scales...}, o.out);
}

// ------------------------------------------------------------ im2col / col2im

lowering::Im2ColParams im2col_params(at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding,
                                     at::IntArrayRef stride) {
  TORCH_CHECK(kernel.size() == 2, "It is expected kernel_size equals to 2, but got size ", kernel.size());
  TORCH_CHECK(dilation.size() == 2, "It is expected dilation equals to 2, but got size ", dilation.size());
  TORCH_CHECK(padding.size() == 2, "It is expected padding equals to 2, but got size ", padding.size());
  TORCH_CHECK(stride.size() == 2, "It is expected stride equals to 2, but got size ", stride.size());
  lowering::Im2ColParams p{ir::Dims(kernel.begin(), kernel.end()), ir::Dims(dilation.begin(), dilation.end()),
                           ir::Dims(padding.begin(), padding.end()), ir::Dims(stride.begin(), stride.end())};
  TORCH_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0, "kernel size should be greater than zero, but got kernel_height: ",
              p.kernel[0], " kernel_width: ", p.kernel[1]);
  TORCH_CHECK(p.dilation[0] > 0 && p.dilation[1] > 0,
              "dilation should be greater than zero, but got dilation_height: ", p.dilation[0],
              " dilation_width: ", p.dilation[1]);
  TORCH_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0, "padding should be non-negative, but got pad_height: ",
              p.padding[0], " pad_width: ", p.padding[1]);
  TORCH_CHECK(p.stride[0] > 0 && p.stride[1] > 0, "stride should be greater than zero, but got stride_height: ",
              p.stride[0], " stride_width: ", p.stride[1]);
  return p;
}

int64_t n_blocks(int64_t in, int64_t k, int64_t d, int64_t p, int64_t s) {
  return (in + 2 * p - (d * (k - 1) + 1)) / s + 1;
}

at::Tensor im2col_op(const char* name, const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef dilation,
                     at::IntArrayRef padding, at::IntArrayRef stride, at::Tensor* out) {
  lowering::Im2ColParams p = im2col_params(kernel, dilation, padding, stride);
  bool batched = self.dim() == 4;
  TORCH_CHECK((self.dim() == 3 && self.size(0) != 0 && self.size(1) != 0 && self.size(2) != 0) ||
                  (batched && self.size(1) != 0 && self.size(2) != 0 && self.size(3) != 0),
              "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got:", self.sizes());
  int64_t n = batched ? self.size(0) : 1, c = self.size(-3), h = self.size(-2), w = self.size(-1);
  int64_t bh = n_blocks(h, p.kernel[0], p.dilation[0], p.padding[0], p.stride[0]);
  int64_t bw = n_blocks(w, p.kernel[1], p.dilation[1], p.padding[1], p.stride[1]);
  TORCH_CHECK(bh >= 1 && bw >= 1, "Given input with spatial size (", h, ", ", w, "), kernel_size=(", p.kernel[0], ", ",
              p.kernel[1], "), dilation=(", p.dilation[0], ", ", p.dilation[1], "), padding=(", p.padding[0], ", ",
              p.padding[1], "), calculated shape of the array of sliding blocks as (", bh, ", ", bw,
              "), but its components must be at least one.");
  // ATen's kernel has no integer instances, but an empty result never reaches it.
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()) || n == 0,
              "\"im2col_out_cpu\" not implemented for '", c10::toString(self.scalar_type()), "'");
  c10::DimVector shape{c * p.kernel[0] * p.kernel[1], bh * bw};
  if (batched) shape.insert(shape.begin(), n);
  c10::ScalarType t = self.scalar_type();
  return run_op(name, self, shape, t, out, t, [&](ir::Graph& g, ir::Value x) {
    ir::Value r = lowering::im2col(g, ir::reshape(g, x, {n, c, h, w}), p);
    return ir::reshape(g, r, to_shape(shape));
  });
}
at::Tensor im2col(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding,
                  at::IntArrayRef stride) {
  return im2col_op("im2col", self, kernel, dilation, padding, stride, nullptr);
}
at::Tensor& im2col_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef dilation,
                       at::IntArrayRef padding, at::IntArrayRef stride, at::Tensor& out) {
  im2col_op("im2col.out", self, kernel, dilation, padding, stride, &out);
  return out;
}

at::Tensor col2im_op(const char* name, const at::Tensor& self, c10::SymIntArrayRef output_size_,
                     at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride,
                     at::Tensor* out) {
  ir::Dims output = int_list(output_size_);
  TORCH_CHECK(output.size() == 2, "It is expected output_size equals to 2, but got size ", output.size());
  lowering::Im2ColParams p = im2col_params(kernel, dilation, padding, stride);
  bool batched = self.dim() == 3;
  TORCH_CHECK((self.dim() == 2 && self.size(0) != 0 && self.size(1) != 0) ||
                  (batched && self.size(1) != 0 && self.size(2) != 0),
              "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions "
              "for input, but got: ", self.sizes());
  int64_t kk = p.kernel[0] * p.kernel[1];
  int64_t cols = self.size(-2), length = self.size(-1), n = batched ? self.size(0) : 1;
  TORCH_CHECK(cols % kk == 0, "Expected size of input's dimension ", batched ? 1 : 0,
              " to be divisible by the product of kernel_size, but got input.size(", batched ? 1 : 0, ")=", cols,
              " and kernel_size=(", p.kernel[0], ", ", p.kernel[1], ")");
  int64_t bh = n_blocks(output[0], p.kernel[0], p.dilation[0], p.padding[0], p.stride[0]);
  int64_t bw = n_blocks(output[1], p.kernel[1], p.dilation[1], p.padding[1], p.stride[1]);
  TORCH_CHECK(bh >= 1 && bw >= 1 && bh * bw == length, "Given output_size=(", output[0], ", ", output[1],
              "), kernel_size=(", p.kernel[0], ", ", p.kernel[1], "), dilation=(", p.dilation[0], ", ", p.dilation[1],
              "), padding=(", p.padding[0], ", ", p.padding[1], "), stride=(", p.stride[0], ", ", p.stride[1],
              "), expected size of input's dimension ", batched ? 2 : 1,
              " to match the calculated number of sliding blocks ", bh, " * ", bw, " = ", bh * bw,
              ", but got input.size(", batched ? 2 : 1, ")=", length, ".");
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()) || n == 0,
              "\"col2im_out_cpu\" not implemented for '", c10::toString(self.scalar_type()), "'");
  int64_t c = cols / kk;
  c10::DimVector shape{c, output[0], output[1]};
  if (batched) shape.insert(shape.begin(), n);
  c10::ScalarType t = self.scalar_type();
  return run_op(name, self, shape, t, out, compute_type(t), [&](ir::Graph& g, ir::Value x) {
    ir::Value r = lowering::col2im(g, ir::reshape(g, x, {n, cols, length}), output, p);
    return ir::reshape(g, r, to_shape(shape));
  });
}
at::Tensor col2im(const at::Tensor& self, c10::SymIntArrayRef output_size, at::IntArrayRef kernel,
                  at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride) {
  return col2im_op("col2im", self, output_size, kernel, dilation, padding, stride, nullptr);
}
at::Tensor& col2im_out(const at::Tensor& self, c10::SymIntArrayRef output_size, at::IntArrayRef kernel,
                       at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride, at::Tensor& out) {
  col2im_op("col2im.out", self, output_size, kernel, dilation, padding, stride, &out);
  return out;
}

// ------------------------------------------------------------ channel_shuffle

at::Tensor channel_shuffle_op(const char* name, const at::Tensor& self, c10::SymInt groups_, at::Tensor* out) {
  int64_t groups = groups_.expect_int();
  TORCH_CHECK(self.dim() > 2, "channel_shuffle expects input to have at least 3 dimensions, but got input with ",
              self.dim(), " dimension(s)");
  TORCH_CHECK(groups > 0, "Number of groups to divide channels in must be positive.", " Value of groups:", groups);
  int64_t c = self.size(1);
  TORCH_CHECK(c % groups == 0, "Number of channels must be divisible by groups. Got ", c, " channels and ", groups,
              " groups.");
  c10::ScalarType t = self.scalar_type();
  return run_op(name, self, self.sizes(), t, out, t, [&](ir::Graph& g, ir::Value x) {
    ir::Shape s = g.type(x).shape;
    ir::Shape split{s[0], groups, c / groups};
    ir::Dims perm{0, 2, 1};
    for (size_t i = 2; i < s.size(); ++i) {
      split.push_back(s[i]);
      perm.push_back(static_cast<int64_t>(i + 1));
    }
    return ir::reshape(g, ir::transpose(g, ir::reshape(g, x, split), perm), s);
  });
}
at::Tensor channel_shuffle(const at::Tensor& self, c10::SymInt groups) {
  return channel_shuffle_op("channel_shuffle", self, groups, nullptr);
}
at::Tensor& channel_shuffle_out(const at::Tensor& self, c10::SymInt groups, at::Tensor& out) {
  channel_shuffle_op("channel_shuffle.out", self, groups, &out);
  return out;
}
at::Tensor native_channel_shuffle(const at::Tensor& self, c10::SymInt groups) {
  return channel_shuffle_op("native_channel_shuffle", self, groups, nullptr);
}

// ------------------------------------------------------------ grid_sampler

lowering::GridSampleParams grid_params(const at::Tensor& input, const at::Tensor& grid, int64_t k,
                                       int64_t interpolation, int64_t padding, bool align_corners) {
  TORCH_CHECK(input.scalar_type() == grid.scalar_type(),
              "grid_sampler(): expected input and grid to have same dtype, but input has ", input.scalar_type(),
              " and grid has ", grid.scalar_type());
  TORCH_CHECK(input.dim() == k + 2 && grid.dim() == k + 2, "grid_sampler(): expected ", k + 2,
              "D input and grid with same number of dimensions, but got input with sizes ", input.sizes(),
              " and grid with sizes ", grid.sizes());
  TORCH_CHECK(input.size(0) == grid.size(0),
              "grid_sampler(): expected grid and input to have same batch size, but got input with sizes ",
              input.sizes(), " and grid with sizes ", grid.sizes());
  TORCH_CHECK(grid.size(-1) == k, "grid_sampler(): expected grid to have size ", k,
              " in last dimension, but got grid with sizes ", grid.sizes());
  for (int64_t i = 2; i < input.dim(); ++i)
    TORCH_CHECK(input.size(i) > 0, "grid_sampler(): expected input to have non-empty spatial dimensions, but input "
                "has sizes ", input.sizes(), " with dimension ", i, " being empty");
  TORCH_CHECK(interpolation >= 0 && interpolation <= 2 && padding >= 0 && padding <= 2,
              "grid_sampler(): unknown interpolation or padding mode");
  TORCH_CHECK(k == 2 || interpolation != 2, "grid_sampler(): bicubic interpolation only supports 4D input");
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(input.scalar_type()), "\"grid_sampler_", k,
                              "d_cpu\" not implemented for '", c10::toString(input.scalar_type()), "'");
  return {interpolation, padding, align_corners};
}

at::Tensor grid_sampler_op(const char* name, int64_t k, const at::Tensor& input, const at::Tensor& grid,
                           int64_t interpolation, int64_t padding, bool align_corners, at::Tensor* out) {
  lowering::GridSampleParams p = grid_params(input, grid, k, interpolation, padding, align_corners);
  c10::DimVector shape{input.size(0), input.size(1)};
  for (int64_t d = 0; d < k; ++d) shape.push_back(grid.size(1 + d));
  c10::DeviceGuard guard(input.device());
  at::Tensor output = prepare_output(name, out, shape, input.scalar_type(), input.device(), false);
  if (output.numel() == 0) return output;
  Program prog(name, input.device());
  // ATen's CPU kernels compute half-precision samples in their own dtype
  // (coordinates included): so does this.
  ir::DType acc = lowering::to_ir(input.scalar_type());
  prog.write(output, lowering::grid_sample(prog.graph(), prog.read(input), prog.read(grid), p, acc));
  prog.run();
  return output;
}

std::tuple<at::Tensor, at::Tensor> grid_sampler_backward_op(const char* name, int64_t k, const at::Tensor& grad,
                                                            const at::Tensor& input, const at::Tensor& grid,
                                                            int64_t interpolation, int64_t padding,
                                                            bool align_corners, std::array<bool, 2> mask,
                                                            at::Tensor* out0, at::Tensor* out1) {
  lowering::GridSampleParams p = grid_params(input, grid, k, interpolation, padding, align_corners);
  c10::DeviceGuard guard(input.device());
  at::Tensor gi, gg;
  if (mask[0] || out0) gi = prepare_output(name, out0, input.sizes(), input.scalar_type(), input.device(), false);
  gg = prepare_output(name, out1, grid.sizes(), grid.scalar_type(), grid.device(), false);
  if (gi.defined() && gi.numel() > 0 && (grad.numel() == 0 || !mask[0])) gi.zero_();
  if (gg.numel() > 0 && (grad.numel() == 0 || !mask[1])) gg.zero_();
  bool want_input = mask[0] && gi.defined() && gi.numel() > 0 && grad.numel() > 0;
  bool want_grid = mask[1] && gg.numel() > 0 && grad.numel() > 0;
  if (!want_input && !want_grid) return {gi, gg};
  Program prog(name, input.device());
  ir::DType acc = lowering::to_ir(input.scalar_type());  // as in the forward
  lowering::GridSampleGrads r = lowering::grid_sample_backward(prog.graph(), prog.read(grad), prog.read(input),
                                                               prog.read(grid), p, want_input, want_grid, acc);
  if (want_input) prog.write(gi, r.input);
  if (want_grid) prog.write(gg, r.grid);
  prog.run();
  return {gi, gg};
}

#define GRID_KERNELS(K)                                                                                           \
  at::Tensor grid_sampler_##K##d(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation,         \
                                 int64_t padding, bool align_corners) {                                           \
    return grid_sampler_op("grid_sampler_" #K "d", K, input, grid, interpolation, padding, align_corners,        \
                           nullptr);                                                                              \
  }                                                                                                               \
  at::Tensor& grid_sampler_##K##d_out(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation,    \
                                      int64_t padding, bool align_corners, at::Tensor& out) {                    \
    grid_sampler_op("grid_sampler_" #K "d.out", K, input, grid, interpolation, padding, align_corners, &out);    \
    return out;                                                                                                   \
  }                                                                                                               \
  std::tuple<at::Tensor, at::Tensor> grid_sampler_##K##d_backward(                                                \
      const at::Tensor& grad, const at::Tensor& input, const at::Tensor& grid, int64_t interpolation,            \
      int64_t padding, bool align_corners, std::array<bool, 2> mask) {                                           \
    return grid_sampler_backward_op("grid_sampler_" #K "d_backward", K, grad, input, grid, interpolation,        \
                                    padding, align_corners, mask, nullptr, nullptr);                             \
  }                                                                                                               \
  std::tuple<at::Tensor&, at::Tensor&> grid_sampler_##K##d_backward_out(                                         \
      const at::Tensor& grad, const at::Tensor& input, const at::Tensor& grid, int64_t interpolation,            \
      int64_t padding, bool align_corners, std::array<bool, 2> mask, at::Tensor& out0, at::Tensor& out1) {       \
    grid_sampler_backward_op("grid_sampler_" #K "d_backward.out", K, grad, input, grid, interpolation, padding,  \
                             align_corners, mask, &out0, &out1);                                                 \
    return {out0, out1};                                                                                          \
  }
GRID_KERNELS(2)
GRID_KERNELS(3)
#undef GRID_KERNELS

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // Each op's functional and out= overloads, and its backward's functional and grad_input=.
#define IMPL_WITH_BACKWARD(NAME, KERNEL, ...)                                 \
  impl_variants<KERNEL<__VA_ARGS__>, #NAME>(m, kFunctionalAndOut);          \
  impl_variants<KERNEL##_backward<__VA_ARGS__>, #NAME "_backward">(m, {"", nullptr, ".grad_input"});
  IMPL_WITH_BACKWARD(reflection_pad1d, pad, PadMode::Reflect, 1)
  IMPL_WITH_BACKWARD(reflection_pad2d, pad, PadMode::Reflect, 2)
  IMPL_WITH_BACKWARD(reflection_pad3d, pad, PadMode::Reflect, 3)
  IMPL_WITH_BACKWARD(replication_pad1d, pad, PadMode::Replicate, 1)
  IMPL_WITH_BACKWARD(replication_pad2d, pad, PadMode::Replicate, 2)
  IMPL_WITH_BACKWARD(replication_pad3d, pad, PadMode::Replicate, 3)
  IMPL_WITH_BACKWARD(upsample_nearest1d, nearest, Interp::Nearest, OptD)
  IMPL_WITH_BACKWARD(upsample_nearest2d, nearest, Interp::Nearest, OptD, OptD)
  IMPL_WITH_BACKWARD(upsample_nearest3d, nearest, Interp::Nearest, OptD, OptD, OptD)
  IMPL_WITH_BACKWARD(_upsample_nearest_exact1d, nearest, Interp::NearestExact, OptD)
  IMPL_WITH_BACKWARD(_upsample_nearest_exact2d, nearest, Interp::NearestExact, OptD, OptD)
  IMPL_WITH_BACKWARD(_upsample_nearest_exact3d, nearest, Interp::NearestExact, OptD, OptD, OptD)
  IMPL_WITH_BACKWARD(upsample_linear1d, interpolate, Interp::Linear, OptD)
  IMPL_WITH_BACKWARD(upsample_bilinear2d, interpolate, Interp::Linear, OptD, OptD)
  IMPL_WITH_BACKWARD(upsample_trilinear3d, interpolate, Interp::Linear, OptD, OptD, OptD)
  IMPL_WITH_BACKWARD(upsample_bicubic2d, interpolate, Interp::Cubic, OptD, OptD)
  IMPL_WITH_BACKWARD(_upsample_bilinear2d_aa, interpolate, Interp::LinearAA, OptD, OptD)
  IMPL_WITH_BACKWARD(_upsample_bicubic2d_aa, interpolate, Interp::CubicAA, OptD, OptD)
#undef IMPL_WITH_BACKWARD
  m.impl("im2col", im2col);
  m.impl("im2col.out", im2col_out);
  m.impl("col2im", col2im);
  m.impl("col2im.out", col2im_out);
  m.impl("channel_shuffle", channel_shuffle);
  m.impl("channel_shuffle.out", channel_shuffle_out);
  m.impl("native_channel_shuffle", native_channel_shuffle);
  m.impl("grid_sampler_2d", grid_sampler_2d);
  m.impl("grid_sampler_2d.out", grid_sampler_2d_out);
  m.impl("grid_sampler_2d_backward", grid_sampler_2d_backward);
  m.impl("grid_sampler_2d_backward.out", grid_sampler_2d_backward_out);
  m.impl("grid_sampler_3d", grid_sampler_3d);
  m.impl("grid_sampler_3d.out", grid_sampler_3d_out);
  m.impl("grid_sampler_3d_backward", grid_sampler_3d_backward);
  m.impl("grid_sampler_3d_backward.out", grid_sampler_3d_backward_out);
}

}  // namespace tpu::aten
