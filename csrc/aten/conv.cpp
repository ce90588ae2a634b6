// Convolutions and pooling. ATen's convolution front end (shape checks,
// 1d-as-2d, padding modes) runs before it calls the *_overrideable hooks that
// a PrivateUse1 backend provides.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/conv.h"
#include "lowering/reduce.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

ir::Dims int_list(c10::SymIntArrayRef v) {
  ir::Dims out;
  for (const c10::SymInt& s : v) out.push_back(s.expect_int());
  return out;
}

// A per-spatial-dim parameter: one value repeats for every dim.
ir::Dims expand(const ir::Dims& v, size_t n, int64_t fallback) {
  if (v.empty()) return ir::Dims(n, fallback);
  if (v.size() == 1) return ir::Dims(n, v[0]);
  return v;
}

// The dtypes ATen's CPU kernels take: floats, plus int64 or all integers.
enum class Ints { None, Long, All };
void check_dtype(const char* name, const at::Tensor& t, Ints ints) {
  c10::ScalarType s = t.scalar_type();
  bool ok = c10::isFloatingType(s) || (ints == Ints::Long && s == c10::kLong) ||
            (ints == Ints::All && c10::isIntegralType(s, /*includeBool=*/false));
  TORCH_CHECK(ok, "\"", name, "\" not implemented for '", c10::toString(s), "'");
}

// A fresh result in the memory format ATen's CPU kernels pick (channels-last in, channels-last out).
at::Tensor empty_like_format(c10::IntArrayRef shape, const at::Tensor& like, c10::ScalarType dtype,
                             at::MemoryFormat format) {
  if ((format == at::MemoryFormat::ChannelsLast && shape.size() != 4) ||
      (format == at::MemoryFormat::ChannelsLast3d && shape.size() != 5))
    format = at::MemoryFormat::Contiguous;
  return at::empty(shape, like.options().dtype(dtype).memory_format(format));
}

// ------------------------------------------------------------ convolution

lowering::ConvParams conv_params(const at::Tensor& input, c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                                 c10::SymIntArrayRef dilation, const c10::SymInt& groups) {
  size_t n = static_cast<size_t>(input.dim() - 2);
  lowering::ConvParams p{expand(int_list(stride), n, 1), expand(int_list(padding), n, 0),
                         expand(int_list(dilation), n, 1), groups.expect_int()};
  TORCH_CHECK(p.stride.size() == n && p.padding.size() == n && p.dilation.size() == n,
              "convolution: expected stride, padding and dilation of length ", n);
  return p;
}

void check_conv(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(input.dim() >= 3, "convolution: expected a batched input with at least one spatial dim, got ",
              input.sizes());
  TORCH_CHECK(weight.dim() == input.dim(), "convolution: weight of rank ", weight.dim(), " for input of rank ",
              input.dim());
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), "Input type (", input.scalar_type(),
              ") and weight type (", weight.scalar_type(), ") should be the same");
  if (bias && bias->defined())
    TORCH_CHECK(input.scalar_type() == bias->scalar_type(), "Input type (", input.scalar_type(),
                ") and bias type (", bias->scalar_type(), ") should be the same");
  check_dtype("convolution", input, Ints::Long);
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::SymIntArrayRef stride_, c10::SymIntArrayRef padding_, c10::SymIntArrayRef dilation_,
                       bool transposed, c10::SymIntArrayRef output_padding_, c10::SymInt groups) {
  check_conv(input, weight, bias);
  lowering::ConvParams p = conv_params(input, stride_, padding_, dilation_, groups);
  size_t n = p.stride.size();
  ir::Dims output_padding = expand(int_list(output_padding_), n, 0);
  c10::DimVector shape{input.size(0), transposed ? weight.size(1) * p.groups : weight.size(0)};
  ir::Dims spatial;
  for (size_t i = 0; i < n; ++i) {
    int64_t in = input.size(2 + i), k = weight.size(2 + i);
    int64_t extent = p.dilation[i] * (k - 1) + 1;
    int64_t out = transposed ? (in - 1) * p.stride[i] - 2 * p.padding[i] + extent + output_padding[i]
                             : (in + 2 * p.padding[i] - extent) / p.stride[i] + 1;
    TORCH_CHECK(out > 0, "convolution: calculated output size ", out, " is too small (input ", input.sizes(),
                ", weight ", weight.sizes(), ")");
    shape.push_back(out);
    spatial.push_back(out);
  }
  c10::DeviceGuard guard(input.device());
  at::MemoryFormat format = input.suggest_memory_format();
  if (format == at::MemoryFormat::Contiguous) format = weight.suggest_memory_format();
  at::Tensor output = empty_like_format(shape, input, input.scalar_type(), format);
  if (output.numel() == 0) return output;
  Program prog("convolution", input.device().index());
  ir::Graph& g = prog.graph();
  ir::DType acc = accumulate_type(input.scalar_type());
  ir::Value x = prog.read(input), w = prog.read(weight);
  // The transposed convolution is the input gradient of the plain one.
  ir::Value r = transposed ? lowering::conv_input_grad(g, x, w, p, spatial, acc)
                           : lowering::conv_forward(g, x, w, p, acc);
  if (bias && bias->defined()) {
    ir::Value b = ir::convert(g, prog.read(*bias), acc);
    r = ir::binary(g, "stablehlo.add", r, ir::broadcast_in_dim(g, b, to_shape(shape), {1}));
  }
  prog.write(output, r);
  prog.run();
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride_,
    c10::SymIntArrayRef padding_, c10::SymIntArrayRef dilation_, bool transposed,
    c10::SymIntArrayRef output_padding_, c10::SymInt groups, std::array<bool, 3> output_mask) {
  check_conv(input, weight, std::nullopt);
  lowering::ConvParams p = conv_params(input, stride_, padding_, dilation_, groups);
  size_t n = p.stride.size();
  c10::DeviceGuard guard(input.device());
  at::Tensor grad_input, grad_weight, grad_bias;
  at::TensorOptions options = grad_output.options();
  if (output_mask[0]) grad_input = at::empty(input.sizes(), options);
  if (output_mask[1]) grad_weight = at::empty(weight.sizes(), options);
  if (output_mask[2]) grad_bias = at::empty({grad_output.size(1)}, options);
  if (grad_output.numel() == 0 || input.numel() == 0) {  // nothing flows: zero gradients
    for (at::Tensor* t : {&grad_input, &grad_weight, &grad_bias})
      if (t->defined()) *t = at::zeros(t->sizes(), options);
    return {grad_input, grad_weight, grad_bias};
  }
  Program prog("convolution_backward", input.device().index());
  ir::Graph& g = prog.graph();
  ir::DType acc = accumulate_type(input.scalar_type());
  ir::Value gy = prog.read(grad_output);
  ir::Dims in_spatial, k_spatial;
  for (size_t i = 0; i < n; ++i) {
    in_spatial.push_back(input.size(2 + i));
    k_spatial.push_back(weight.size(2 + i));
  }
  if (output_mask[0]) {
    ir::Value w = prog.read(weight);
    // A transposed convolution's input gradient is the plain convolution.
    ir::Value r = transposed ? lowering::conv_forward(g, gy, w, p, acc)
                             : lowering::conv_input_grad(g, gy, w, p, in_spatial, acc);
    prog.write(grad_input, r);
  }
  if (output_mask[1]) {
    ir::Value x = prog.read(input);
    ir::Value r = transposed ? lowering::conv_weight_grad(g, gy, x, p, k_spatial, acc)
                             : lowering::conv_weight_grad(g, x, gy, p, k_spatial, acc);
    prog.write(grad_weight, r);
  }
  if (output_mask[2]) {
    ir::Dims dims{0};
    for (size_t i = 0; i < n; ++i) dims.push_back(2 + static_cast<int64_t>(i));
    prog.write(grad_bias, lowering::sum(g, gy, dims, false, acc, acc));
  }
  prog.run();
  return {grad_input, grad_weight, grad_bias};
}

// ------------------------------------------------------------ pooling

// ATen's argument checks of the 2d pooling ops; returns the parameters.
lowering::PoolParams pool2d_params(const char* name, const at::Tensor& input, at::IntArrayRef kernel_size,
                                   at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                   bool ceil_mode) {
  TORCH_CHECK(kernel_size.size() == 1 || kernel_size.size() == 2, name,
              ": kernel_size must either be a single int, or a tuple of two ints");
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 2, name,
              ": stride must either be omitted, a single int, or a tuple of two ints");
  TORCH_CHECK(padding.size() == 1 || padding.size() == 2, name,
              ": padding must either be a single int, or a tuple of two ints");
  TORCH_CHECK(dilation.size() == 1 || dilation.size() == 2, name,
              ": dilation must be either a single int, or a tuple of two ints");
  TORCH_CHECK((input.dim() == 3 || input.dim() == 4) && input.size(-1) != 0 && input.size(-2) != 0 &&
                  input.size(-3) != 0,
              "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got:",
              input.sizes());
  ir::Dims k = expand(ir::Dims(kernel_size.begin(), kernel_size.end()), 2, 1);
  lowering::PoolParams p{k, stride.empty() ? k : expand(ir::Dims(stride.begin(), stride.end()), 2, 1),
                         expand(ir::Dims(padding.begin(), padding.end()), 2, 0),
                         expand(ir::Dims(dilation.begin(), dilation.end()), 2, 1), ceil_mode};
  TORCH_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0, "kernel size should be greater than zero, but got kH: ",
              p.kernel[0], " kW: ", p.kernel[1]);
  TORCH_CHECK(p.stride[0] > 0 && p.stride[1] > 0, "stride should be greater than zero, but got dH: ", p.stride[0],
              " dW: ", p.stride[1]);
  TORCH_CHECK(p.dilation[0] > 0 && p.dilation[1] > 0, "dilation should be greater than zero, but got dilationH: ",
              p.dilation[0], " dilationW: ", p.dilation[1]);
  for (int d = 0; d < 2; ++d)
    TORCH_CHECK(p.padding[d] >= 0 && p.kernel[d] / 2 >= p.padding[d],
                "pad should be at most half of effective kernel size, but got pad=", p.padding[d],
                ", kernel_size=", p.kernel[d], " and dilation=", p.dilation[d]);
  int64_t oh = lowering::pooling_output_size(input.size(-2), p.kernel[0], p.padding[0], p.stride[0], p.dilation[0],
                                             ceil_mode);
  int64_t ow = lowering::pooling_output_size(input.size(-1), p.kernel[1], p.padding[1], p.stride[1], p.dilation[1],
                                             ceil_mode);
  TORCH_CHECK(oh >= 1 && ow >= 1, "Given input size: (", input.size(-3), "x", input.size(-2), "x", input.size(-1),
              "). Calculated output size: (", input.size(-3), "x", oh, "x", ow, "). Output size is too small");
  return p;
}

c10::DimVector pooled_shape(const at::Tensor& input, const lowering::PoolParams& p) {
  c10::DimVector shape(input.sizes().begin(), input.sizes().end());
  size_t lead = shape.size() - p.kernel.size();
  for (size_t d = 0; d < p.kernel.size(); ++d)
    shape[lead + d] = lowering::pooling_output_size(shape[lead + d], p.kernel[d], p.padding[d], p.stride[d],
                                                    p.dilation[d], p.ceil_mode);
  return shape;
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_impl(const char* name, const at::Tensor& self,
                                                   at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                                   at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                                   at::Tensor* out, at::Tensor* indices) {
  lowering::PoolParams p = pool2d_params("max_pool2d", self, kernel_size, stride, padding, dilation, ceil_mode);
  check_dtype("max_pool2d", self, Ints::All);
  c10::DimVector shape = pooled_shape(self, p);
  c10::DeviceGuard guard(self.device());
  at::Tensor values, index;
  if (out == nullptr) {
    values = empty_like_format(shape, self, self.scalar_type(), self.suggest_memory_format());
    index = empty_like_format(shape, self, c10::kLong, self.suggest_memory_format());
  } else {
    values = prepare_output(name, out, shape, self.scalar_type(), self.device(), false);
    index = prepare_output(name, indices, shape, c10::kLong, self.device(), false);
  }
  if (values.numel() == 0) return {values, index};
  Program prog(name, self.device().index());
  lowering::MaxPoolResult r = lowering::max_pool(prog.graph(), prog.read(self), p);
  prog.write(values, r.values);
  prog.write(index, r.indices);
  prog.run();
  return {values, index};
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(const at::Tensor& self, at::IntArrayRef kernel_size,
                                                           at::IntArrayRef stride, at::IntArrayRef padding,
                                                           at::IntArrayRef dilation, bool ceil_mode) {
  return max_pool2d_impl("max_pool2d_with_indices", self, kernel_size, stride, padding, dilation, ceil_mode, nullptr,
                         nullptr);
}

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_with_indices_out(const at::Tensor& self, at::IntArrayRef kernel_size,
                                                                 at::IntArrayRef stride, at::IntArrayRef padding,
                                                                 at::IntArrayRef dilation, bool ceil_mode,
                                                                 at::Tensor& out, at::Tensor& indices) {
  max_pool2d_impl("max_pool2d_with_indices.out", self, kernel_size, stride, padding, dilation, ceil_mode, &out,
                  &indices);
  return {out, indices};
}

at::Tensor max_pool2d_backward_impl(const char* name, const at::Tensor& grad_output, const at::Tensor& self,
                                    at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                    at::IntArrayRef dilation, bool ceil_mode, const at::Tensor& indices,
                                    at::Tensor* out) {
  lowering::PoolParams p = pool2d_params("max_pool2d", self, kernel_size, stride, padding, dilation, ceil_mode);
  c10::DimVector expected = pooled_shape(self, p);
  TORCH_CHECK(grad_output.sizes().equals(expected) && indices.sizes().equals(expected), name,
              ": grad_output and indices of shape ", grad_output.sizes(), " and ", indices.sizes(),
              " do not match the pooled shape ", c10::IntArrayRef(expected));
  c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = prepare_output(name, out, self.sizes(), grad_output.scalar_type(), self.device(), false);
  if (grad_input.numel() == 0) return grad_input;
  Program prog(name, self.device().index());
  ir::Graph& g = prog.graph();
  ir::Value r = lowering::max_pool_backward(g, prog.read(grad_output), prog.read(indices), to_shape(self.sizes()),
                                            2, accumulate_type(grad_output.scalar_type()));
  prog.write(grad_input, r);
  prog.run();
  return grad_input;
}

at::Tensor max_pool2d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                            at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                            const at::Tensor& indices) {
  return max_pool2d_backward_impl("max_pool2d_with_indices_backward", grad_output, self, kernel_size, stride, padding,
                                  dilation, ceil_mode, indices, nullptr);
}

at::Tensor& max_pool2d_with_indices_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                                 at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                                 at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                                 const at::Tensor& indices, at::Tensor& grad_input) {
  max_pool2d_backward_impl("max_pool2d_with_indices_backward.grad_input", grad_output, self, kernel_size, stride,
                           padding, dilation, ceil_mode, indices, &grad_input);
  return grad_input;
}

lowering::PoolParams avg_pool2d_params(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                       at::IntArrayRef padding, bool ceil_mode,
                                       std::optional<int64_t> divisor_override) {
  TORCH_CHECK(!divisor_override.has_value() || *divisor_override != 0, "divisor must be not zero");
  return pool2d_params("avg_pool2d", self, kernel_size, stride, padding, {1}, ceil_mode);
}

at::Tensor avg_pool2d_impl(const char* name, const at::Tensor& self, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override, at::Tensor* out) {
  lowering::PoolParams p = avg_pool2d_params(self, kernel_size, stride, padding, ceil_mode, divisor_override);
  check_dtype("avg_pool2d", self, Ints::Long);
  c10::DimVector shape = pooled_shape(self, p);
  c10::DeviceGuard guard(self.device());
  at::Tensor output = out ? prepare_output(name, out, shape, self.scalar_type(), self.device(), false)
                          : empty_like_format(shape, self, self.scalar_type(), self.suggest_memory_format());
  if (output.numel() == 0) return output;
  Program prog(name, self.device().index());
  prog.write(output, lowering::avg_pool(prog.graph(), prog.read(self), p, count_include_pad, divisor_override,
                                        accumulate_type(self.scalar_type())));
  prog.run();
  return output;
}

at::Tensor avg_pool2d(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                      at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                      std::optional<int64_t> divisor_override) {
  return avg_pool2d_impl("avg_pool2d", self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override, nullptr);
}

at::Tensor& avg_pool2d_out(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                           at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override, at::Tensor& out) {
  avg_pool2d_impl("avg_pool2d.out", self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                  divisor_override, &out);
  return out;
}

at::Tensor avg_pool2d_backward_impl(const char* name, const at::Tensor& grad_output, const at::Tensor& self,
                                    at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                    bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override,
                                    at::Tensor* out) {
  lowering::PoolParams p = avg_pool2d_params(self, kernel_size, stride, padding, ceil_mode, divisor_override);
  c10::DimVector expected = pooled_shape(self, p);
  TORCH_CHECK(grad_output.sizes().equals(expected), name, ": grad_output of shape ", grad_output.sizes(),
              " does not match the pooled shape ", c10::IntArrayRef(expected));
  c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = prepare_output(name, out, self.sizes(), grad_output.scalar_type(), self.device(), false);
  if (grad_input.numel() == 0) return grad_input;
  Program prog(name, self.device().index());
  prog.write(grad_input, lowering::avg_pool_backward(prog.graph(), prog.read(grad_output), to_shape(self.sizes()), p,
                                                     count_include_pad, divisor_override,
                                                     accumulate_type(grad_output.scalar_type())));
  prog.run();
  return grad_input;
}

at::Tensor avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel_size,
                               at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                               bool count_include_pad, std::optional<int64_t> divisor_override) {
  return avg_pool2d_backward_impl("avg_pool2d_backward", grad_output, self, kernel_size, stride, padding, ceil_mode,
                                  count_include_pad, divisor_override, nullptr);
}

at::Tensor& avg_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                    at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                    bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override,
                                    at::Tensor& grad_input) {
  avg_pool2d_backward_impl("avg_pool2d_backward.grad_input", grad_output, self, kernel_size, stride, padding,
                           ceil_mode, count_include_pad, divisor_override, &grad_input);
  return grad_input;
}

at::Tensor adaptive_avg_pool2d_impl(const char* name, const at::Tensor& self, c10::SymIntArrayRef output_size_,
                                    at::Tensor* out) {
  ir::Dims output_size = int_list(output_size_);
  TORCH_CHECK(output_size.size() == 2, "adaptive_avg_pool2d: output_size must be 2");
  TORCH_CHECK(output_size[0] >= 0 && output_size[1] >= 0,
              "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 but received {",
              output_size[0], ", ", output_size[1], "}");
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4,
              "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got ", self.sizes());
  for (int64_t i = 1; i < self.dim(); ++i)
    TORCH_CHECK(self.size(i) > 0,
                "adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch dimensions, but input "
                "has sizes ", self.sizes(), " with dimension ", i, " being empty");
  check_dtype("adaptive_avg_pool2d", self, Ints::None);
  c10::DimVector shape(self.sizes().begin(), self.sizes().end());
  shape[shape.size() - 2] = output_size[0];
  shape[shape.size() - 1] = output_size[1];
  c10::DeviceGuard guard(self.device());
  at::Tensor output = out ? prepare_output(name, out, shape, self.scalar_type(), self.device(), false)
                          : empty_like_format(shape, self, self.scalar_type(), self.suggest_memory_format());
  if (output.numel() == 0) return output;
  Program prog(name, self.device().index());
  prog.write(output, lowering::adaptive_avg_pool(prog.graph(), prog.read(self), output_size,
                                                 accumulate_type(self.scalar_type())));
  prog.run();
  return output;
}

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, c10::SymIntArrayRef output_size) {
  return adaptive_avg_pool2d_impl("_adaptive_avg_pool2d", self, output_size, nullptr);
}

at::Tensor& adaptive_avg_pool2d_out(const at::Tensor& self, c10::SymIntArrayRef output_size, at::Tensor& out) {
  adaptive_avg_pool2d_impl("_adaptive_avg_pool2d.out", self, output_size, &out);
  return out;
}

at::Tensor adaptive_avg_pool2d_backward_impl(const char* name, const at::Tensor& grad_output, const at::Tensor& self,
                                             at::Tensor* out) {
  TORCH_CHECK(grad_output.dim() == self.dim() && (self.dim() == 3 || self.dim() == 4), name,
              ": expected 3D or 4D grad_output and input of the same rank, got ", grad_output.sizes(), " and ",
              self.sizes());
  c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = prepare_output(name, out, self.sizes(), grad_output.scalar_type(), self.device(), false);
  if (grad_input.numel() == 0) return grad_input;
  if (grad_output.numel() == 0) return grad_input.zero_();
  Program prog(name, self.device().index());
  prog.write(grad_input, lowering::adaptive_avg_pool_backward(prog.graph(), prog.read(grad_output),
                                                              to_shape(self.sizes()), 2,
                                                              accumulate_type(grad_output.scalar_type())));
  prog.run();
  return grad_input;
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  return adaptive_avg_pool2d_backward_impl("_adaptive_avg_pool2d_backward", grad_output, self, nullptr);
}

at::Tensor& adaptive_avg_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                             at::Tensor& out) {
  adaptive_avg_pool2d_backward_impl("_adaptive_avg_pool2d_backward.out", grad_output, self, &out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
  m.impl("max_pool2d_with_indices", max_pool2d_with_indices);
  m.impl("max_pool2d_with_indices.out", max_pool2d_with_indices_out);
  m.impl("max_pool2d_with_indices_backward", max_pool2d_with_indices_backward);
  m.impl("max_pool2d_with_indices_backward.grad_input", max_pool2d_with_indices_backward_out);
  m.impl("avg_pool2d", avg_pool2d);
  m.impl("avg_pool2d.out", avg_pool2d_out);
  m.impl("avg_pool2d_backward", avg_pool2d_backward);
  m.impl("avg_pool2d_backward.grad_input", avg_pool2d_backward_out);
  m.impl("_adaptive_avg_pool2d", adaptive_avg_pool2d);
  m.impl("_adaptive_avg_pool2d.out", adaptive_avg_pool2d_out);
  m.impl("_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward);
  m.impl("_adaptive_avg_pool2d_backward.out", adaptive_avg_pool2d_backward_out);
}

}  // namespace tpu::aten
