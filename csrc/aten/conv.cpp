// Convolutions and pooling. ATen's convolution front end (shape checks,
// 1d-as-2d, padding modes) runs before it calls the *_overrideable hooks that
// a PrivateUse1 backend provides.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <sstream>
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

// The layout ATen's CPU kernels give a pooling result (forward or gradient):
// every 2-d pool (and unpool) and max_pool3d keep a channels-last input's
// layout, the other 3-d pools return contiguous results.
at::MemoryFormat pool_format(int64_t k, const at::Tensor& input, bool keeps_3d = false) {
  return k == 2 || keeps_3d ? input.suggest_memory_format() : at::MemoryFormat::Contiguous;
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
  // Contiguous whatever the input's layout: PyTorch lays out an overrideable backend's convolution
  // so (_conv_determine_backend_memory_format), and torch.compile's fake tensors expect it.
  at::Tensor output = new_tensor(shape, input.scalar_type(), input.device());
  if (output.numel() == 0) return output;
  Program prog("convolution", input.device());
  ir::Graph& g = prog.graph();
  ir::DType acc = accumulate_type(input.scalar_type());
  ir::Value x = prog.read(input), w = prog.read(weight);
  // The transposed convolution is the input gradient of the plain one.
  ir::Value r = transposed ? lowering::conv_input_grad(g, x, w, p, spatial, acc)
                           : lowering::conv_forward(g, x, w, p, acc);
  if (bias && bias->defined()) {
    ir::Value b = ir::convert(g, prog.read(*bias), acc);
    r = ir::binary(g, ir::Op::Add, r, ir::broadcast_in_dim(g, b, to_shape(shape), {1}));
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
  if (output_mask[0]) grad_input = at::empty(input.sizes(), options);  // contiguous, as the forward's result
  if (output_mask[1]) grad_weight = at::empty(weight.sizes(), options);
  if (output_mask[2]) grad_bias = at::empty({grad_output.size(1)}, options);
  if (grad_output.numel() == 0 || input.numel() == 0) {  // nothing flows: zero gradients
    for (at::Tensor* t : {&grad_input, &grad_weight, &grad_bias})
      if (t->defined()) *t = at::zeros(t->sizes(), options);
    return {grad_input, grad_weight, grad_bias};
  }
  Program prog("convolution_backward", input.device());
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
    // An output_padding of at least the stride (allowed when the dilation is
    // larger) gives gy trailing rows no input position reaches: the plain
    // convolution of gy then yields extra rows, which are not gradients.
    const ir::Shape& rs = g.type(r).shape;
    ir::Shape want = to_shape(input.sizes());
    if (rs != want) r = ir::slice(g, r, ir::Dims(rs.size(), 0), want);
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

// ATen's argument checks of the 2d/3d (k) pooling ops; returns the parameters.
lowering::PoolParams pool_params(const char* name, int64_t k, const at::Tensor& input, at::IntArrayRef kernel_size,
                                 at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                 bool ceil_mode) {
  const char* ints = k == 2 ? "two ints" : "three ints";
  size_t n = static_cast<size_t>(k);
  TORCH_CHECK(kernel_size.size() == 1 || kernel_size.size() == n, name,
              ": kernel_size must either be a single int, or a tuple of ", ints);
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == n, name,
              ": stride must either be omitted, a single int, or a tuple of ", ints);
  TORCH_CHECK(padding.size() == 1 || padding.size() == n, name,
              ": padding must either be a single int, or a tuple of ", ints);
  TORCH_CHECK(dilation.size() == 1 || dilation.size() == n, name,
              ": dilation must be either a single int, or a tuple of ", ints);
  bool ok = input.dim() == k + 1 || input.dim() == k + 2;
  for (int64_t d = 1; ok && d <= k + 1; ++d) ok = input.size(-d) != 0;
  if (k == 2) {
    TORCH_CHECK(ok, "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got:",
                input.sizes());
  } else {
    TORCH_CHECK(ok, "non-empty 4D or 5D (batch mode) tensor expected for input, but got: ", input.sizes());
  }
  ir::Dims kd = expand(ir::Dims(kernel_size.begin(), kernel_size.end()), n, 1);
  lowering::PoolParams p{kd, stride.empty() ? kd : expand(ir::Dims(stride.begin(), stride.end()), n, 1),
                         expand(ir::Dims(padding.begin(), padding.end()), n, 0),
                         expand(ir::Dims(dilation.begin(), dilation.end()), n, 1), ceil_mode};
  for (size_t d = 0; d < n; ++d) {
    TORCH_CHECK(p.kernel[d] > 0, "kernel size should be greater than zero, but got ", c10::IntArrayRef(p.kernel));
    TORCH_CHECK(p.stride[d] > 0, "stride should be greater than zero, but got ", c10::IntArrayRef(p.stride));
    TORCH_CHECK(p.dilation[d] > 0, "dilation should be greater than zero, but got ", c10::IntArrayRef(p.dilation));
    TORCH_CHECK(p.padding[d] >= 0 && p.kernel[d] / 2 >= p.padding[d],
                "pad should be at most half of effective kernel size, but got pad=", p.padding[d],
                ", kernel_size=", p.kernel[d], " and dilation=", p.dilation[d]);
  }
  std::ostringstream in_ss, out_ss;
  bool small = false;
  in_ss << input.size(-k - 1);
  out_ss << input.size(-k - 1);
  for (int64_t d = 0; d < k; ++d) {
    int64_t in = input.size(input.dim() - k + d);
    int64_t o = lowering::pooling_output_size(in, p.kernel[d], p.padding[d], p.stride[d], p.dilation[d], ceil_mode);
    small = small || o < 1;
    in_ss << "x" << in;
    out_ss << "x" << o;
  }
  TORCH_CHECK(!small, "Given input size: (", in_ss.str(), "). Calculated output size: (", out_ss.str(),
              "). Output size is too small");
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

std::tuple<at::Tensor, at::Tensor> max_pool_impl(const char* name, int64_t k, const at::Tensor& self,
                                                   at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                                   at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                                   at::Tensor* out, at::Tensor* indices) {
  const char* base = k == 2 ? "max_pool2d" : "max_pool3d";
  lowering::PoolParams p = pool_params(base, k, self, kernel_size, stride, padding, dilation, ceil_mode);
  check_dtype(base, self, Ints::All);
  c10::DimVector shape = pooled_shape(self, p);
  c10::DeviceGuard guard(self.device());
  at::MemoryFormat format = pool_format(k, self, /*keeps_3d=*/true);
  at::Tensor values = prepare_output(name, out, shape, self.scalar_type(), self.device(), false, format);
  at::Tensor index = prepare_output(name, indices, shape, c10::kLong, self.device(), false, format);
  if (values.numel() == 0) return {values, index};
  Program prog(name, self.device());
  lowering::MaxPoolResult r = lowering::max_pool(prog.graph(), prog.read(self), p);
  prog.write(values, r.values);
  prog.write(index, r.indices);
  prog.run();
  return {values, index};
}



at::Tensor max_pool_backward_impl(const char* name, int64_t k, const at::Tensor& grad_output, const at::Tensor& self,
                                    at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                    at::IntArrayRef dilation, bool ceil_mode, const at::Tensor& indices,
                                    at::Tensor* out) {
  lowering::PoolParams p = pool_params(k == 2 ? "max_pool2d" : "max_pool3d", k, self, kernel_size, stride, padding,
                                       dilation, ceil_mode);
  c10::DimVector expected = pooled_shape(self, p);
  TORCH_CHECK(grad_output.sizes().equals(expected) && indices.sizes().equals(expected), name,
              ": grad_output and indices of shape ", grad_output.sizes(), " and ", indices.sizes(),
              " do not match the pooled shape ", c10::IntArrayRef(expected));
  c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = prepare_output(name, out, self.sizes(), grad_output.scalar_type(), self.device(), false,
                                         pool_format(k, self, /*keeps_3d=*/true));
  if (grad_input.numel() == 0) return grad_input;
  Program prog(name, self.device());
  ir::Graph& g = prog.graph();
  ir::Value r = lowering::max_pool_backward(g, prog.read(grad_output), prog.read(indices), to_shape(self.sizes()),
                                            k, accumulate_type(grad_output.scalar_type()));
  prog.write(grad_input, r);
  prog.run();
  return grad_input;
}



lowering::PoolParams avg_pool_params(int64_t k, const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                       at::IntArrayRef padding, bool ceil_mode,
                                       std::optional<int64_t> divisor_override) {
  TORCH_CHECK(!divisor_override.has_value() || *divisor_override != 0, "divisor must be not zero");
  return pool_params(k == 2 ? "avg_pool2d" : "avg_pool3d", k, self, kernel_size, stride, padding, {1}, ceil_mode);
}

at::Tensor avg_pool_impl(const char* name, int64_t k, const at::Tensor& self, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override, at::Tensor* out) {
  lowering::PoolParams p = avg_pool_params(k, self, kernel_size, stride, padding, ceil_mode, divisor_override);
  check_dtype(k == 2 ? "avg_pool2d" : "avg_pool3d", self, Ints::Long);
  c10::DimVector shape = pooled_shape(self, p);
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(name, out, shape, self.scalar_type(), self.device(), false, pool_format(k, self));
  if (output.numel() == 0) return output;
  Program prog(name, self.device());
  prog.write(output, lowering::avg_pool(prog.graph(), prog.read(self), p, count_include_pad, divisor_override,
                                        accumulate_type(self.scalar_type())));
  prog.run();
  return output;
}



at::Tensor avg_pool_backward_impl(const char* name, int64_t k, const at::Tensor& grad_output, const at::Tensor& self,
                                    at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                    bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override,
                                    at::Tensor* out) {
  lowering::PoolParams p = avg_pool_params(k, self, kernel_size, stride, padding, ceil_mode, divisor_override);
  c10::DimVector expected = pooled_shape(self, p);
  TORCH_CHECK(grad_output.sizes().equals(expected), name, ": grad_output of shape ", grad_output.sizes(),
              " does not match the pooled shape ", c10::IntArrayRef(expected));
  c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = prepare_output(name, out, self.sizes(), grad_output.scalar_type(), self.device(), false,
                                         pool_format(k, self));
  if (grad_input.numel() == 0) return grad_input;
  Program prog(name, self.device());
  prog.write(grad_input, lowering::avg_pool_backward(prog.graph(), prog.read(grad_output), to_shape(self.sizes()), p,
                                                     count_include_pad, divisor_override,
                                                     accumulate_type(grad_output.scalar_type())));
  prog.run();
  return grad_input;
}



// ATen's checks of adaptive pooling over the trailing k dims; returns the output shape.
c10::DimVector adaptive_shape(const char* base, int64_t k, const at::Tensor& self, const ir::Dims& output_size) {
  TORCH_CHECK(static_cast<int64_t>(output_size.size()) == k, base, ": output_size must be ", k);
  for (int64_t o : output_size)
    TORCH_CHECK(o >= 0, base, ": elements of output_size must be greater than or equal to 0 but received ",
                c10::IntArrayRef(output_size));
  TORCH_CHECK(self.dim() == k + 1 || self.dim() == k + 2, base, "(): Expected ", k + 1, "D or ", k + 2,
              "D tensor, but got ", self.sizes());
  for (int64_t i = 1; i < self.dim(); ++i)
    TORCH_CHECK(self.size(i) > 0, base,
                "(): Expected input to have non-zero size for non-batch dimensions, but input "
                "has sizes ", self.sizes(), " with dimension ", i, " being empty");
  c10::DimVector shape(self.sizes().begin(), self.sizes().end());
  for (int64_t d = 0; d < k; ++d) shape[shape.size() - k + d] = output_size[d];
  return shape;
}

at::Tensor adaptive_avg_pool_impl(const char* name, int64_t k, const at::Tensor& self,
                                  c10::SymIntArrayRef output_size_, at::Tensor* out) {
  ir::Dims output_size = int_list(output_size_);
  const char* base = k == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d";
  c10::DimVector shape = adaptive_shape(base, k, self, output_size);
  check_dtype(base, self, Ints::None);
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(name, out, shape, self.scalar_type(), self.device(), false, pool_format(k, self));
  if (output.numel() == 0) return output;
  Program prog(name, self.device());
  prog.write(output, lowering::adaptive_avg_pool(prog.graph(), prog.read(self), output_size,
                                                 accumulate_type(self.scalar_type())));
  prog.run();
  return output;
}



at::Tensor adaptive_avg_pool_backward_impl(const char* name, int64_t k, const at::Tensor& grad_output,
                                           const at::Tensor& self, at::Tensor* out) {
  TORCH_CHECK(grad_output.dim() == self.dim() && (self.dim() == k + 1 || self.dim() == k + 2), name,
              ": expected grad_output and input of the same rank, got ", grad_output.sizes(), " and ",
              self.sizes());
  c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = prepare_output(name, out, self.sizes(), grad_output.scalar_type(), self.device(), false,
                                         pool_format(k, self));
  if (grad_input.numel() == 0) return grad_input;
  if (grad_output.numel() == 0) return grad_input.zero_();
  Program prog(name, self.device());
  prog.write(grad_input, lowering::adaptive_avg_pool_backward(prog.graph(), prog.read(grad_output),
                                                              to_shape(self.sizes()), k,
                                                              accumulate_type(grad_output.scalar_type())));
  prog.run();
  return grad_input;
}



// ------------------------------------------------------------ pooling kernels, 2d and 3d

template <int k>
std::tuple<at::Tensor, at::Tensor> max_pool_with_indices(Overload o, const at::Tensor& self,
                                                         at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                                         at::IntArrayRef padding, at::IntArrayRef dilation,
                                                         bool ceil_mode) {
  return max_pool_impl(variant(o).c_str(), k, self, kernel_size, stride, padding, dilation, ceil_mode, o.out, o.out2);
}
template <int k>
at::Tensor max_pool_with_indices_backward(Overload o, const at::Tensor& grad_output, const at::Tensor& self,
                                          at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                          const at::Tensor& indices) {
  return max_pool_backward_impl(variant(o).c_str(), k, grad_output, self, kernel_size, stride, padding, dilation,
                                ceil_mode, indices, o.out);
}
template <int k>
at::Tensor avg_pool(Overload o, const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                    at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                    std::optional<int64_t> divisor_override) {
  return avg_pool_impl(variant(o).c_str(), k, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override, o.out);
}
template <int k>
at::Tensor avg_pool_backward(Overload o, const at::Tensor& grad_output, const at::Tensor& self,
                             at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                             bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  return avg_pool_backward_impl(variant(o).c_str(), k, grad_output, self, kernel_size, stride, padding, ceil_mode,
                                count_include_pad, divisor_override, o.out);
}
template <int k>
at::Tensor adaptive_avg_pool(Overload o, const at::Tensor& self, c10::SymIntArrayRef output_size) {
  return adaptive_avg_pool_impl(variant(o).c_str(), k, self, output_size, o.out);
}
template <int k>
at::Tensor adaptive_avg_pool_backward(Overload o, const at::Tensor& grad_output, const at::Tensor& self) {
  return adaptive_avg_pool_backward_impl(variant(o).c_str(), k, grad_output, self, o.out);
}

// ------------------------------------------------------------ adaptive max pooling

template <int k>
std::tuple<at::Tensor, at::Tensor> adaptive_max_pool_op(Overload o, const at::Tensor& self,
                                                        at::IntArrayRef output_size) {
  const char* base = k == 2 ? "adaptive_max_pool2d" : "adaptive_max_pool3d";
  ir::Dims output(output_size.begin(), output_size.end());
  c10::DimVector shape = adaptive_shape(base, k, self, output);
  check_dtype(base, self, Ints::None);
  c10::DeviceGuard guard(self.device());
  const at::MemoryFormat format = pool_format(k, self);
  at::Tensor values = prepare_output(o.name, o.out, shape, self.scalar_type(), self.device(), false, format);
  at::Tensor index = prepare_output(o.name, o.out2, shape, c10::kLong, self.device(), false, format);
  if (values.numel() == 0) return {values, index};
  Program prog(o.name, self.device());
  lowering::MaxPoolResult r = lowering::adaptive_max_pool(prog.graph(), prog.read(self), output);
  prog.write(values, r.values);
  prog.write(index, r.indices);
  prog.run();
  return {values, index};
}

// The gradient of adaptive or fractional max pooling over k dims, from the
// indices the forward chose.
at::Tensor max_pool_indices_backward(Overload o, int64_t k, const at::Tensor& grad_output, const at::Tensor& self,
                                     const at::Tensor& indices) {
  TORCH_CHECK(grad_output.dim() == self.dim() && indices.sizes().equals(grad_output.sizes()), o.name,
              ": grad_output of shape ", grad_output.sizes(), " and indices of shape ", indices.sizes(),
              " for input of shape ", self.sizes());
  c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = prepare_output(o.name, o.out, self.sizes(), grad_output.scalar_type(), self.device(), false,
                                         pool_format(k, self));
  if (grad_input.numel() == 0) return grad_input;
  if (grad_output.numel() == 0) return grad_input.zero_();
  Program prog(o.name, self.device());
  prog.write(grad_input, lowering::max_pool_backward(prog.graph(), prog.read(grad_output), prog.read(indices),
                                                     to_shape(self.sizes()), k,
                                                     accumulate_type(grad_output.scalar_type())));
  prog.run();
  return grad_input;
}
template <int k>
at::Tensor adaptive_max_pool_backward_op(Overload o, const at::Tensor& grad_output, const at::Tensor& self,
                                         const at::Tensor& indices) {
  return max_pool_indices_backward(o, k, grad_output, self, indices);
}

// ------------------------------------------------------------ max_unpool

// Indices outside the output plane are dropped (ATen's CPU kernel raises
// instead; checking would need the indices' values on the host).
at::Tensor max_unpool_impl(const char* name, int64_t k, const at::Tensor& self, const at::Tensor& indices,
                           c10::SymIntArrayRef output_size_, at::Tensor* out) {
  ir::Dims output = int_list(output_size_);
  TORCH_CHECK(indices.scalar_type() == c10::kLong, "elements in indices should be type int64 but got: ",
              indices.scalar_type());
  TORCH_CHECK(static_cast<int64_t>(output.size()) == k, "There should be exactly ", k, " elements (",
              k == 2 ? "height, width" : "depth, height, width", ") in output_size, but got ", output.size(),
              " elements.");
  TORCH_CHECK(self.dim() == k + 1 || self.dim() == k + 2, "Input to max_unpooling", k, "d should be a ", k + 1,
              "d or ", k + 2, "d Tensor, but got a tensor with ", self.dim(), " dimensions.");
  TORCH_CHECK(self.sizes().equals(indices.sizes()), "Expected shape of indices to be same as that of the input tensor (",
              self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  for (int64_t i = 1; i < self.dim(); ++i)
    TORCH_CHECK(self.size(i) > 0, "max_unpooling", k, "d(): ",
                "Expected input to have non-zero size for non-batch dimensions, but got ", self.sizes(),
                " with dimension ", i, " being empty.");
  c10::DimVector shape(self.sizes().begin(), self.sizes().end() - k);
  int64_t planes = 1, size = 1, length = 1;
  for (int64_t s : shape) planes *= s;
  for (int64_t o : output) {
    shape.push_back(o);
    size *= o;
  }
  for (int64_t d = 0; d < k; ++d) length *= self.size(self.dim() - k + d);
  c10::DeviceGuard guard(self.device());
  at::Tensor output_t = prepare_output(name, out, shape, self.scalar_type(), self.device(), false, pool_format(k, self));
  if (output_t.numel() == 0) return output_t;
  if (self.numel() == 0) return output_t.zero_();
  Program prog(name, self.device());
  ir::Graph& g = prog.graph();
  ir::Value r = lowering::max_unpool(g, ir::reshape(g, prog.read(self), {planes, length}),
                                     ir::reshape(g, prog.read(indices), {planes, length}), size);
  prog.write(output_t, ir::reshape(g, r, to_shape(shape)));
  prog.run();
  return output_t;
}
at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size) {
  return max_unpool_impl("max_unpool2d", 2, self, indices, output_size, nullptr);
}
at::Tensor& max_unpool2d_out(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size,
                             at::Tensor& out) {
  max_unpool_impl("max_unpool2d.out", 2, self, indices, output_size, &out);
  return out;
}
void check_unpool3d(at::IntArrayRef stride, at::IntArrayRef padding) {
  TORCH_CHECK(stride.size() == 3, "There should be exactly three elements (depth, height, width) in stride, but got: ",
              stride.size(), " elements.");
  TORCH_CHECK(padding.size() == 3, "There should be exactly three elements (depth, height, width) in padding, but got: ",
              padding.size(), " elements.");
  TORCH_CHECK(stride[0] > 0 && stride[1] > 0 && stride[2] > 0, "strides should be greater than zero, but got stride: ",
              stride);
}
at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size,
                        at::IntArrayRef stride, at::IntArrayRef padding) {
  check_unpool3d(stride, padding);
  return max_unpool_impl("max_unpool3d", 3, self, indices, output_size, nullptr);
}
at::Tensor& max_unpool3d_out(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::Tensor& out) {
  check_unpool3d(stride, padding);
  max_unpool_impl("max_unpool3d.out", 3, self, indices, output_size, &out);
  return out;
}

// ------------------------------------------------------------ fractional max pooling

std::tuple<at::Tensor, at::Tensor> fractional_impl(const char* name, int64_t k, const at::Tensor& self,
                                                   at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                                   const at::Tensor& samples, at::Tensor* out, at::Tensor* indices) {
  const char* base = k == 2 ? "fractional_max_pool2d" : "fractional_max_pool3d";
  TORCH_CHECK(static_cast<int64_t>(kernel_size.size()) == k && static_cast<int64_t>(output_size.size()) == k, base,
              "(): kernel_size and output_size must have ", k, " elements");
  TORCH_CHECK(self.dim() == k + 1 || self.dim() == k + 2, base, "(): Expected ", k + 1, "D or ", k + 2,
              "D tensor, but got: ", self.sizes());
  for (int64_t i = 1; i < self.dim(); ++i)
    TORCH_CHECK(self.size(i) > 0, base, "(): Expected input to have non-zero size for non-batch dimensions, but got ",
                self.sizes(), " with dimension ", i, " being empty.");
  check_dtype(base, self, Ints::None);
  ir::Dims kernel(kernel_size.begin(), kernel_size.end()), output(output_size.begin(), output_size.end());
  const char* names[3] = {k == 2 ? "height" : "time", k == 2 ? "width" : "height", "width"};
  for (int64_t d = 0; d < k; ++d) {
    int64_t in = self.size(self.dim() - k + d);
    TORCH_CHECK(output[d] + kernel[d] - 1 <= in, base, "(): pool ", names[d], " ", kernel[d],
                " too large relative to input ", names[d], " ", in);
  }
  c10::DimVector shape(self.sizes().begin(), self.sizes().end() - k);
  int64_t planes = 1;
  for (int64_t s : shape) planes *= s;
  for (int64_t o : output) shape.push_back(o);
  TORCH_CHECK(samples.numel() == planes * k, base, "(): expected random_samples with ", planes * k,
              " elements, got ", samples.sizes());
  c10::DeviceGuard guard(self.device());
  at::Tensor values = prepare_output(name, out, shape, self.scalar_type(), self.device(), false);
  at::Tensor index = prepare_output(name, indices, shape, c10::kLong, self.device(), false);
  if (values.numel() == 0) return {values, index};
  Program prog(name, self.device());
  ir::Graph& g = prog.graph();
  ir::Shape xs{planes};
  for (int64_t d = 0; d < k; ++d) xs.push_back(self.size(self.dim() - k + d));
  // ATen's sample columns: (w, h) for 2d, (t, h, w) for 3d.
  ir::Dims columns = k == 2 ? ir::Dims{1, 0} : ir::Dims{0, 1, 2};
  ir::Value sv = ir::reshape(g, prog.read_as(samples, self.scalar_type()), {planes, k});
  lowering::MaxPoolResult r =
      lowering::fractional_max_pool(g, ir::reshape(g, prog.read(self), xs), sv, kernel, output, columns);
  prog.write(values, ir::reshape(g, r.values, to_shape(shape)));
  prog.write(index, ir::reshape(g, r.indices, to_shape(shape)));
  prog.run();
  return {values, index};
}
// The four variants of fractional_max_pool{2,3}d, one template per variant over
// the number of pooled dims: ATen's names for each (op, out=, backward, backward out=).
template <int kDims>
struct FractionalNames {
  static constexpr const char* op[] = {"fractional_max_pool2d", "fractional_max_pool2d.output",
                                       "fractional_max_pool2d_backward",
                                       "fractional_max_pool2d_backward.grad_input"};
};
template <>
struct FractionalNames<3> {
  static constexpr const char* op[] = {"fractional_max_pool3d", "fractional_max_pool3d.output",
                                       "fractional_max_pool3d_backward",
                                       "fractional_max_pool3d_backward.grad_input"};
};
template <int kDims>
std::tuple<at::Tensor, at::Tensor> fractional_max_pool(const at::Tensor& self, at::IntArrayRef kernel_size,
                                                        at::IntArrayRef output_size, const at::Tensor& samples) {
  return fractional_impl(FractionalNames<kDims>::op[0], kDims, self, kernel_size, output_size, samples, nullptr,
                         nullptr);
}
template <int kDims>
std::tuple<at::Tensor&, at::Tensor&> fractional_max_pool_out(const at::Tensor& self, at::IntArrayRef kernel_size,
                                                             at::IntArrayRef output_size, const at::Tensor& samples,
                                                             at::Tensor& out, at::Tensor& indices) {
  fractional_impl(FractionalNames<kDims>::op[1], kDims, self, kernel_size, output_size, samples, &out, &indices);
  return {out, indices};
}
template <int kDims>
at::Tensor fractional_max_pool_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                        at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                        const at::Tensor& indices) {
  return max_pool_indices_backward({FractionalNames<kDims>::op[2]}, kDims, grad_output, self, indices);
}
template <int kDims>
at::Tensor& fractional_max_pool_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                             at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                             const at::Tensor& indices, at::Tensor& grad_input) {
  max_pool_indices_backward({FractionalNames<kDims>::op[3], &grad_input}, kDims, grad_output, self, indices);
  return grad_input;
}

// ATen's name of a pooling op over k spatial dims, from its 2d name (the 3d
// names differ in that digit alone).
template <int k, OpName kName2d>
constexpr auto pooling_name() {
  auto name = kName2d;
  for (char& c : name.chars)
    if (c == '2') c = static_cast<char>('0' + k);
  return name;
}

// Every pooling op over k spatial dims, each with its out= (backward: grad_input) overload.
template <int k>
void register_pooling(torch::Library& m) {
  constexpr OverloadNames kOut = kFunctionalAndOut, kGrad = kFunctionalAndGradInput;
  impl_variants<max_pool_with_indices<k>, pooling_name<k, "max_pool2d_with_indices">()>(m, kOut);
  impl_variants<max_pool_with_indices_backward<k>, pooling_name<k, "max_pool2d_with_indices_backward">()>(m, kGrad);
  impl_variants<avg_pool<k>, pooling_name<k, "avg_pool2d">()>(m, kOut);
  impl_variants<avg_pool_backward<k>, pooling_name<k, "avg_pool2d_backward">()>(m, kGrad);
  impl_variants<adaptive_avg_pool<k>, pooling_name<k, "_adaptive_avg_pool2d">()>(m, kOut);
  impl_variants<adaptive_avg_pool_backward<k>, pooling_name<k, "_adaptive_avg_pool2d_backward">()>(m, kOut);
  impl_variants<adaptive_max_pool_op<k>, pooling_name<k, "adaptive_max_pool2d">()>(m, kOut);
  impl_variants<adaptive_max_pool_backward_op<k>, pooling_name<k, "adaptive_max_pool2d_backward">()>(m, kGrad);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
  register_pooling<2>(m);
  register_pooling<3>(m);
  m.impl("max_unpool2d", max_unpool2d);
  m.impl("max_unpool2d.out", max_unpool2d_out);
  m.impl("max_unpool3d", max_unpool3d);
  m.impl("max_unpool3d.out", max_unpool3d_out);
  m.impl("fractional_max_pool2d", fractional_max_pool<2>);
  m.impl("fractional_max_pool2d.output", fractional_max_pool_out<2>);
  m.impl("fractional_max_pool2d_backward", fractional_max_pool_backward<2>);
  m.impl("fractional_max_pool2d_backward.grad_input", fractional_max_pool_backward_out<2>);
  m.impl("fractional_max_pool3d", fractional_max_pool<3>);
  m.impl("fractional_max_pool3d.output", fractional_max_pool_out<3>);
  m.impl("fractional_max_pool3d_backward", fractional_max_pool_backward<3>);
  m.impl("fractional_max_pool3d_backward.grad_input", fractional_max_pool_backward_out<3>);
}

}  // namespace tpu::aten
