// Neural-network ops: softmax, layer/batch normalisation and losses, forward
// and backward. The math is in lowering/nn.*; this file is ATen's contract
// (shapes, dtypes, checks, optional tensors, out= variants, running stats).
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/nn.h"
#include "lowering/reduce.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using lowering::OptValue;
using lowering::Reduction;
using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using OptTensor = std::optional<at::Tensor>;

bool defined(const OptTensor& t) { return t.has_value() && t->defined(); }
OptValue read_opt(Program& p, const OptTensor& t) {
  if (!defined(t)) return std::nullopt;
  return p.read(*t);
}
ir::DType ir_of(c10::ScalarType t) { return lowering::to_ir(t); }

at::Tensor new_tensor(const at::Tensor& like, c10::IntArrayRef shape, c10::ScalarType dtype) {
  return at::empty(shape, like.options().dtype(dtype));
}
// A result: into `out` (resized as ATen does) or a fresh tensor.
at::Tensor output_for(const char* name, at::Tensor* out, const at::Tensor& like, c10::IntArrayRef shape,
                      c10::ScalarType dtype) {
  return prepare_output(name, out, shape, dtype, like.device(), false);
}

// ------------------------------------------------------------ softmax

at::Tensor softmax_op(const char* name, bool log, const at::Tensor& self, int64_t dim, bool half_to_float,
                      at::Tensor* out) {
  int64_t d = lowering::wrap_dim(dim, self.dim());
  c10::ScalarType t = self.scalar_type();
  TORCH_CHECK(!half_to_float || t == c10::kHalf || t == c10::kBFloat16,
              "conversion of ", t, " to float is not supported by ", name);
  c10::ScalarType result = half_to_float ? c10::kFloat : t;
  TORCH_CHECK(c10::isFloatingType(result), name, " not implemented for '", t, "'");
  c10::DeviceGuard guard(self.device());
  at::Tensor output = output_for(name, out, self, self.sizes(), result);
  Program p(name, self.device().index());
  ir::Value x = p.read(self);
  p.write(output, log ? lowering::log_softmax(p.graph(), x, d, ir_of(result))
                      : lowering::softmax(p.graph(), x, d, ir_of(result)));
  p.run();
  return output;
}
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  return softmax_op("_softmax", false, self, dim, half_to_float, nullptr);
}
at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  softmax_op("_softmax.out", false, self, dim, half_to_float, &out);
  return out;
}
at::Tensor log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  return softmax_op("_log_softmax", true, self, dim, half_to_float, nullptr);
}
at::Tensor& log_softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  softmax_op("_log_softmax.out", true, self, dim, half_to_float, &out);
  return out;
}

at::Tensor softmax_backward_op(const char* name, bool log, const at::Tensor& grad, const at::Tensor& output,
                               int64_t dim, c10::ScalarType input_dtype, at::Tensor* out) {
  int64_t d = lowering::wrap_dim(dim, output.dim());
  TORCH_CHECK(grad.sizes().equals(output.sizes()), name, ": grad_output with shape ", grad.sizes(),
              " doesn't match output shape ", output.sizes());
  c10::DeviceGuard guard(output.device());
  at::Tensor result = output_for(name, out, output, output.sizes(), input_dtype);
  Program p(name, output.device().index());
  ir::Value gv = p.read(grad), ov = p.read(output);
  p.write(result, log ? lowering::log_softmax_backward(p.graph(), gv, ov, d, ir_of(input_dtype))
                      : lowering::softmax_backward(p.graph(), gv, ov, d, ir_of(input_dtype)));
  p.run();
  return result;
}
at::Tensor softmax_backward(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                            c10::ScalarType input_dtype) {
  return softmax_backward_op("_softmax_backward_data", false, grad, output, dim, input_dtype, nullptr);
}
at::Tensor& softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                 c10::ScalarType input_dtype, at::Tensor& out) {
  softmax_backward_op("_softmax_backward_data.out", false, grad, output, dim, input_dtype, &out);
  return out;
}
at::Tensor log_softmax_backward(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                c10::ScalarType input_dtype) {
  return softmax_backward_op("_log_softmax_backward_data", true, grad, output, dim, input_dtype, nullptr);
}
at::Tensor& log_softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                     c10::ScalarType input_dtype, at::Tensor& out) {
  softmax_backward_op("_log_softmax_backward_data.out", true, grad, output, dim, input_dtype, &out);
  return out;
}

// ------------------------------------------------------------ layer norm

int64_t layer_norm_axis(const at::Tensor& input, c10::SymIntArrayRef normalized_shape, const OptTensor& weight,
                        const OptTensor& bias) {
  int64_t n = static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(n >= 1, "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
              "element, but got normalized_shape = ", normalized_shape);
  int64_t axis = input.dim() - n;
  bool match = axis >= 0;
  for (int64_t i = 0; match && i < n; ++i) match = input.sym_size(axis + i) == normalized_shape[i];
  if (!match) {
    std::ostringstream ss;
    ss << "Given normalized_shape=" << normalized_shape << ", expected input with shape [*";
    for (const auto& s : normalized_shape) ss << ", " << s;
    ss << "], but got input of size" << input.sizes();
    TORCH_CHECK(false, ss.str());
  }
  for (const OptTensor* p : {&weight, &bias})
    TORCH_CHECK(!defined(*p) || (*p)->sym_sizes().equals(normalized_shape), "Expected ",
                p == &weight ? "weight" : "bias", " to be of same shape as normalized_shape, but got ",
                p == &weight ? "weight" : "bias", " of shape ", (*p)->sizes(), " and normalized_shape = ",
                normalized_shape);
  return axis;
}

// Statistics are stored in the parameters' dtype when a reduced-precision
// input meets float parameters (ATen's mixed-type path), else in the input's.
c10::ScalarType stats_dtype(const at::Tensor& input, std::initializer_list<const OptTensor*> params) {
  for (const OptTensor* p : params)
    if (defined(*p)) return (*p)->scalar_type() == input.scalar_type() ? input.scalar_type() : (*p)->scalar_type();
  return input.scalar_type();
}

Tensor3 layer_norm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape, const OptTensor& weight,
                   const OptTensor& bias, double eps) {
  int64_t axis = layer_norm_axis(input, normalized_shape, weight, bias);
  c10::DimVector stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
  stat_shape.resize(input.dim(), 1);
  c10::ScalarType stats = stats_dtype(input, {&weight, &bias});
  c10::DeviceGuard guard(input.device());
  at::Tensor out = new_tensor(input, input.sizes(), input.scalar_type());
  at::Tensor mean = new_tensor(input, stat_shape, stats), rstd = new_tensor(input, stat_shape, stats);
  Program p("native_layer_norm", input.device().index());
  lowering::NormForward f = lowering::layer_norm(p.graph(), p.read(input), axis, read_opt(p, weight),
                                                 read_opt(p, bias), eps, ir_of(input.scalar_type()));
  p.write(out, f.out);
  p.write(mean, f.mean);
  p.write(rstd, f.invstd);
  p.run();
  return {out, mean, rstd};
}

Tensor3 layer_norm_backward(const at::Tensor& grad, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                            const at::Tensor& mean, const at::Tensor& rstd, const OptTensor& weight,
                            const OptTensor& bias, std::array<bool, 3> mask) {
  int64_t axis = layer_norm_axis(input, normalized_shape, weight, bias);
  c10::DeviceGuard guard(input.device());
  at::Tensor gi, gw, gb;
  if (mask[0]) gi = new_tensor(input, input.sizes(), input.scalar_type());
  if (mask[1] && defined(weight)) gw = new_tensor(input, weight->sizes(), weight->scalar_type());
  if (mask[2]) {
    const at::Tensor& like = defined(bias) ? *bias : defined(weight) ? *weight : input;
    c10::IntArrayRef shape = input.sizes().slice(axis);
    gb = new_tensor(input, shape, like.scalar_type());
  }
  if (input.numel() == 0) {  // nothing to normalise: zero parameter grads
    if (gw.defined()) gw.zero_();
    if (gb.defined()) gb.zero_();
    return {gi, gw, gb};
  }
  Program p("native_layer_norm_backward", input.device().index());
  c10::ScalarType param = defined(weight) ? weight->scalar_type() : gb.defined() ? gb.scalar_type()
                                                                                  : input.scalar_type();
  lowering::NormGrads r = lowering::layer_norm_backward(p.graph(), p.read(grad), p.read(input), axis, p.read(mean),
                                                        p.read(rstd), read_opt(p, weight), mask,
                                                        ir_of(input.scalar_type()), ir_of(param));
  if (gi.defined()) p.write(gi, r.input);
  if (gw.defined()) p.write(gw, ir::reshape(p.graph(), r.weight, to_shape(gw.sizes())));
  if (gb.defined()) p.write(gb, ir::reshape(p.graph(), r.bias, to_shape(gb.sizes())));
  p.run();
  return {gi, gw, gb};
}

// ------------------------------------------------------------ batch norm

void check_batch_norm(const at::Tensor& input, std::initializer_list<std::pair<const char*, const OptTensor*>> params) {
  TORCH_CHECK(input.dim() >= 2, "batch_norm: Expected input to have at least 2 dims, but got ", input.dim());
  int64_t c = input.size(1);
  for (auto& [name, t] : params)
    TORCH_CHECK(!defined(*t) || (*t)->numel() == c, "Expected ", name, " to have ", c, " elements, but got ",
                (*t)->numel());
}

// Training uses the batch's statistics and, when running stats are given,
// updates them in place: running = (1 - momentum) * running + momentum * stat,
// with the unbiased variance for running_var.
Tensor3 batch_norm_op(const char* name, const at::Tensor& input, const OptTensor& weight, const OptTensor& bias,
                      const OptTensor& running_mean, const OptTensor& running_var, bool training, double momentum,
                      double eps, at::Tensor* out, at::Tensor* save_mean, at::Tensor* save_invstd) {
  check_batch_norm(input, {{"weight", &weight}, {"bias", &bias}, {"running_mean", &running_mean},
                           {"running_var", &running_var}});
  TORCH_CHECK(training || (defined(running_mean) && defined(running_var)),
              "running_mean and running_var must be defined in evaluation mode");
  int64_t c = input.size(1);
  c10::ScalarType stats = stats_dtype(input, {&weight, &bias, &running_mean, &running_var});
  c10::DeviceGuard guard(input.device());
  at::Tensor o = output_for(name, out, input, input.sizes(), input.scalar_type());
  at::Tensor sm = output_for(name, save_mean, input, {training ? c : 0}, stats);
  at::Tensor si = output_for(name, save_invstd, input, {training ? c : 0}, stats);
  Program p(name, input.device().index());
  ir::Graph& g = p.graph();
  ir::Value x = p.read(input);
  if (!training) {
    p.write(o, lowering::batch_norm_eval(g, x, read_opt(p, weight), read_opt(p, bias), p.read(*running_mean),
                                         p.read(*running_var), eps, ir_of(input.scalar_type())));
    p.run();
    return {o, sm, si};
  }
  int64_t n = input.numel() / std::max<int64_t>(c, 1);
  TORCH_CHECK(n > 1 || input.numel() == 0, "Expected more than 1 value per channel when training, got input size ",
              input.sizes());
  lowering::NormForward f =
      lowering::batch_norm_train(g, x, read_opt(p, weight), read_opt(p, bias), eps, ir_of(input.scalar_type()));
  ir::Shape channels{c};
  p.write(o, f.out);
  p.write(sm, ir::reshape(g, f.mean, channels));
  p.write(si, ir::reshape(g, f.invstd, channels));
  for (auto [running, stat, factor] : {std::tuple{&running_mean, f.mean, 1.0},
                                       std::tuple{&running_var, f.var, static_cast<double>(n) / (n - 1)}}) {
    if (!defined(*running)) continue;
    ir::Value r = p.read(**running);
    ir::DType acc = lowering::accumulate_dtype(g.type(r).dtype);
    ir::Value s = ir::reshape(g, ir::convert(g, stat, acc), channels);
    ir::Value keep = ir::full(g, acc, 1 - momentum, channels);
    ir::Value take = ir::full(g, acc, momentum * factor, channels);
    ir::Value updated = ir::binary(g, "stablehlo.add", ir::binary(g, "stablehlo.multiply", ir::convert(g, r, acc), keep),
                                   ir::binary(g, "stablehlo.multiply", s, take));
    p.write(**running, updated);
  }
  p.run();
  return {o, sm, si};
}

Tensor3 native_batch_norm(const at::Tensor& input, const OptTensor& weight, const OptTensor& bias,
                          const OptTensor& running_mean, const OptTensor& running_var, bool training, double momentum,
                          double eps) {
  return batch_norm_op("native_batch_norm", input, weight, bias, running_mean, running_var, training, momentum, eps,
                       nullptr, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> native_batch_norm_out(
    const at::Tensor& input, const OptTensor& weight, const OptTensor& bias, const OptTensor& running_mean,
    const OptTensor& running_var, bool training, double momentum, double eps, at::Tensor& out, at::Tensor& save_mean,
    at::Tensor& save_invstd) {
  batch_norm_op("native_batch_norm.out", input, weight, bias, running_mean, running_var, training, momentum, eps, &out,
                &save_mean, &save_invstd);
  return {out, save_mean, save_invstd};
}
Tensor3 batch_norm_legit(const at::Tensor& input, const OptTensor& weight, const OptTensor& bias,
                         at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum,
                         double eps) {
  return batch_norm_op("_native_batch_norm_legit", input, weight, bias, running_mean, running_var, training, momentum,
                       eps, nullptr, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> batch_norm_legit_out(
    const at::Tensor& input, const OptTensor& weight, const OptTensor& bias, at::Tensor& running_mean,
    at::Tensor& running_var, bool training, double momentum, double eps, at::Tensor& out, at::Tensor& save_mean,
    at::Tensor& save_invstd) {
  batch_norm_op("_native_batch_norm_legit.out", input, weight, bias, running_mean, running_var, training, momentum,
                eps, &out, &save_mean, &save_invstd);
  return {out, save_mean, save_invstd};
}
Tensor3 batch_norm_legit_no_stats(const at::Tensor& input, const OptTensor& weight, const OptTensor& bias,
                                  bool training, double momentum, double eps) {
  return batch_norm_op("_native_batch_norm_legit.no_stats", input, weight, bias, std::nullopt, std::nullopt, training,
                       momentum, eps, nullptr, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> batch_norm_legit_no_stats_out(
    const at::Tensor& input, const OptTensor& weight, const OptTensor& bias, bool training, double momentum,
    double eps, at::Tensor& out, at::Tensor& save_mean, at::Tensor& save_invstd) {
  batch_norm_op("_native_batch_norm_legit.no_stats_out", input, weight, bias, std::nullopt, std::nullopt, training,
                momentum, eps, &out, &save_mean, &save_invstd);
  return {out, save_mean, save_invstd};
}
Tensor3 batch_norm_legit_no_training(const at::Tensor& input, const OptTensor& weight, const OptTensor& bias,
                                     const at::Tensor& running_mean, const at::Tensor& running_var, double momentum,
                                     double eps) {
  return batch_norm_op("_native_batch_norm_legit_no_training", input, weight, bias, running_mean, running_var, false,
                       momentum, eps, nullptr, nullptr, nullptr);
}

Tensor3 batch_norm_backward(const at::Tensor& grad, const at::Tensor& input, const OptTensor& weight,
                            const OptTensor& running_mean, const OptTensor& running_var, const OptTensor& save_mean,
                            const OptTensor& save_invstd, bool train, double eps, std::array<bool, 3> mask) {
  check_batch_norm(input, {{"weight", &weight}});
  const OptTensor& mean = train ? save_mean : running_mean;
  const OptTensor& spread = train ? save_invstd : running_var;
  TORCH_CHECK(defined(mean) && defined(spread), "native_batch_norm_backward: ",
              train ? "save_mean and save_invstd" : "running_mean and running_var", " must be defined");
  int64_t c = input.size(1);
  c10::ScalarType param = stats_dtype(input, {&weight, &running_mean, &running_var, &save_mean});
  c10::DeviceGuard guard(input.device());
  at::Tensor gi, gw, gb;
  if (mask[0]) gi = new_tensor(input, input.sizes(), input.scalar_type());
  if (mask[1]) gw = new_tensor(input, {c}, defined(weight) ? weight->scalar_type() : param);
  if (mask[2]) gb = new_tensor(input, {c}, defined(weight) ? weight->scalar_type() : param);
  Program p("native_batch_norm_backward", input.device().index());
  ir::Graph& g = p.graph();
  ir::Value m = ir::reshape(g, p.read(*mean), {c});
  ir::Value s = ir::reshape(g, p.read(*spread), {c});
  ir::Value invstd = train ? s : lowering::inverse_std(g, s, eps);
  lowering::NormGrads r = lowering::batch_norm_backward(g, p.read(grad), p.read(input), read_opt(p, weight), m, invstd,
                                                        train, mask, ir_of(input.scalar_type()), ir_of(param));
  if (gi.defined()) p.write(gi, r.input);
  if (gw.defined()) p.write(gw, r.weight);
  if (gb.defined()) p.write(gb, r.bias);
  p.run();
  return {gi, gw, gb};
}

// ------------------------------------------------------------ nll loss

Reduction reduction_of(int64_t r) {
  TORCH_CHECK(r >= 0 && r <= 2, r, " is not a valid value for reduction");
  return static_cast<Reduction>(r);
}

// Checks of nll_loss (1-D/2-D input) and nll_loss2d (4-D input, 3-D target).
void check_nll(const char* name, bool is_2d, const at::Tensor& self, const at::Tensor& target,
               const OptTensor& weight) {
  TORCH_CHECK(c10::isIntegralType(target.scalar_type(), false), "expected scalar type Long but found ",
              target.scalar_type());
  if (is_2d) {
    TORCH_CHECK(self.dim() == 4, "only batches of spatial inputs supported (4D tensors), but got input of size: ",
                self.sizes());
    TORCH_CHECK(target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got targets of size: ",
                target.sizes());
    TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
                "input and target batch or spatial sizes don't match: target ", target.sizes(), ", input ",
                self.sizes());
  } else {
    TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
    TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
    bool no_batch = self.dim() == 1 && target.dim() == 0;
    TORCH_CHECK(no_batch || self.size(0) == target.size(0), "Expected input batch_size (", self.size(0),
                ") to match target batch_size (", target.size(0), ").");
  }
  int64_t classes = self.size(self.dim() == 1 ? 0 : 1);
  TORCH_CHECK(!defined(weight) || (weight->dim() <= 1 && weight->numel() == classes),
              "weight tensor should be defined either for all ", classes,
              " classes or no classes but got weight tensor of shape: ", weight->sizes());
}

std::tuple<at::Tensor, at::Tensor> nll_forward_op(const char* name, bool is_2d, const at::Tensor& self,
                                                  const at::Tensor& target, const OptTensor& weight, int64_t reduction,
                                                  int64_t ignore_index, at::Tensor* out, at::Tensor* total) {
  check_nll(name, is_2d, self, target, weight);
  Reduction red = reduction_of(reduction);
  c10::DeviceGuard guard(self.device());
  c10::IntArrayRef out_shape = red == Reduction::None ? target.sizes() : c10::IntArrayRef{};
  at::Tensor output = output_for(name, out, self, out_shape, self.scalar_type());
  at::Tensor total_weight = output_for(name, total, self, {}, self.scalar_type());
  Program p(name, self.device().index());
  lowering::NllForward f = lowering::nll_loss(p.graph(), p.read(self), p.read(target), read_opt(p, weight), red,
                                              ignore_index, ir_of(self.scalar_type()));
  p.write(output, f.output);
  p.write(total_weight, f.total_weight);
  p.run();
  return {output, total_weight};
}

at::Tensor nll_backward_op(const char* name, bool is_2d, const at::Tensor& grad, const at::Tensor& self,
                           const at::Tensor& target, const OptTensor& weight, int64_t reduction, int64_t ignore_index,
                           const at::Tensor& total_weight, at::Tensor* out) {
  check_nll(name, is_2d, self, target, weight);
  Reduction red = reduction_of(reduction);
  TORCH_CHECK(red == Reduction::None ? grad.sizes().equals(target.sizes()) : grad.numel() == 1, name,
              ": grad_output has the wrong shape ", grad.sizes());
  c10::DeviceGuard guard(self.device());
  at::Tensor gi = output_for(name, out, self, self.sizes(), self.scalar_type());
  Program p(name, self.device().index());
  ir::Value gv = ir::reshape(p.graph(), p.read(grad), red == Reduction::None ? to_shape(target.sizes()) : ir::Shape{});
  p.write(gi, lowering::nll_loss_backward(p.graph(), gv, p.read(self), p.read(target), read_opt(p, weight), red,
                                          ignore_index, p.read(total_weight), ir_of(self.scalar_type())));
  p.run();
  return gi;
}

#define NLL_KERNELS(NAME, IS_2D)                                                                                 \
  std::tuple<at::Tensor, at::Tensor> NAME##_forward(const at::Tensor& self, const at::Tensor& target,           \
                                                    const OptTensor& weight, int64_t reduction,                 \
                                                    int64_t ignore_index) {                                     \
    return nll_forward_op(#NAME "_forward", IS_2D, self, target, weight, reduction, ignore_index, nullptr,       \
                          nullptr);                                                                             \
  }                                                                                                              \
  std::tuple<at::Tensor&, at::Tensor&> NAME##_forward_out(const at::Tensor& self, const at::Tensor& target,     \
                                                          const OptTensor& weight, int64_t reduction,           \
                                                          int64_t ignore_index, at::Tensor& output,             \
                                                          at::Tensor& total_weight) {                           \
    nll_forward_op(#NAME "_forward.output", IS_2D, self, target, weight, reduction, ignore_index, &output,        \
                   &total_weight);                                                                              \
    return {output, total_weight};                                                                              \
  }                                                                                                              \
  at::Tensor NAME##_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,          \
                             const OptTensor& weight, int64_t reduction, int64_t ignore_index,                  \
                             const at::Tensor& total_weight) {                                                  \
    return nll_backward_op(#NAME "_backward", IS_2D, grad, self, target, weight, reduction, ignore_index,        \
                           total_weight, nullptr);                                                              \
  }                                                                                                              \
  at::Tensor& NAME##_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,     \
                                  const OptTensor& weight, int64_t reduction, int64_t ignore_index,             \
                                  const at::Tensor& total_weight, at::Tensor& grad_input) {                     \
    nll_backward_op(#NAME "_backward.grad_input", IS_2D, grad, self, target, weight, reduction, ignore_index,     \
                    total_weight, &grad_input);                                                                 \
    return grad_input;                                                                                          \
  }
NLL_KERNELS(nll_loss, false)
NLL_KERNELS(nll_loss2d, true)
#undef NLL_KERNELS

// ------------------------------------------------------------ elementwise losses

enum class Loss { Mse, Bce };

// Loss forward: operands broadcast to one shape (weight to the input's).
at::Tensor loss_op(const char* name, Loss kind, const at::Tensor& self, const at::Tensor& target,
                   const OptTensor& weight, int64_t reduction, at::Tensor* out) {
  Reduction red = reduction_of(reduction);
  c10::ScalarType dtype = kind == Loss::Mse ? at::result_type(self, target) : self.scalar_type();
  c10::DimVector shape = kind == Loss::Mse ? at::infer_size_dimvector(self.sizes(), target.sizes())
                                           : c10::DimVector(self.sizes().begin(), self.sizes().end());
  if (kind == Loss::Bce)
    TORCH_CHECK(self.numel() == target.numel(), "Using a target size (", target.sizes(),
                ") that is different to the input size (", self.sizes(), ") is deprecated. "
                "Please ensure they have the same size.");
  c10::DeviceGuard guard(self.device());
  at::Tensor output = output_for(name, out, self, red == Reduction::None ? c10::IntArrayRef(shape) : c10::IntArrayRef{},
                                 dtype);
  Program p(name, self.device().index());
  ir::Graph& g = p.graph();
  ir::Shape s = to_shape(shape);
  ir::Value x = ir::broadcast_to(g, p.read_as(self, dtype), s);
  ir::Value t = ir::reshape(g, p.read_as(target, dtype), s);
  if (kind == Loss::Mse) t = ir::broadcast_to(g, p.read_as(target, dtype), s);
  OptValue w;
  if (defined(weight)) w = ir::broadcast_to(g, p.read_as(*weight, dtype), s);
  p.write(output, kind == Loss::Mse ? lowering::mse_loss(g, x, t, red, ir_of(dtype))
                                    : lowering::binary_cross_entropy(g, x, t, w, red, ir_of(dtype)));
  p.run();
  return output;
}

at::Tensor loss_backward_op(const char* name, Loss kind, const at::Tensor& grad, const at::Tensor& self,
                            const at::Tensor& target, const OptTensor& weight, int64_t reduction, at::Tensor* out) {
  Reduction red = reduction_of(reduction);
  c10::ScalarType dtype = at::result_type(self, target);
  dtype = c10::promoteTypes(dtype, grad.scalar_type());
  c10::DimVector shape = at::infer_size_dimvector(self.sizes(), target.sizes());
  if (red == Reduction::None) shape = at::infer_size_dimvector(shape, grad.sizes());
  c10::DeviceGuard guard(self.device());
  at::Tensor gi = output_for(name, out, self, shape, kind == Loss::Bce ? self.scalar_type() : dtype);
  Program p(name, self.device().index());
  ir::Graph& g = p.graph();
  ir::Shape s = to_shape(shape);
  ir::Value x = ir::broadcast_to(g, p.read_as(self, dtype), s);
  ir::Value t = ir::broadcast_to(g, p.read_as(target, dtype), s);
  ir::Value gv = p.read_as(grad, dtype);
  gv = red == Reduction::None ? ir::broadcast_to(g, gv, s) : ir::reshape(g, gv, {});
  OptValue w;
  if (defined(weight)) w = ir::broadcast_to(g, p.read_as(*weight, dtype), s);
  p.write(gi, kind == Loss::Mse ? lowering::mse_loss_backward(g, gv, x, t, red, ir_of(dtype))
                                : lowering::binary_cross_entropy_backward(g, gv, x, t, w, red, ir_of(dtype)));
  p.run();
  return gi;
}

at::Tensor mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  return loss_op("mse_loss", Loss::Mse, self, target, std::nullopt, reduction, nullptr);
}
at::Tensor& mse_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, at::Tensor& out) {
  loss_op("mse_loss.out", Loss::Mse, self, target, std::nullopt, reduction, &out);
  return out;
}
at::Tensor mse_loss_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                             int64_t reduction) {
  return loss_backward_op("mse_loss_backward", Loss::Mse, grad, self, target, std::nullopt, reduction, nullptr);
}
at::Tensor& mse_loss_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                  int64_t reduction, at::Tensor& grad_input) {
  loss_backward_op("mse_loss_backward.grad_input", Loss::Mse, grad, self, target, std::nullopt, reduction,
                   &grad_input);
  return grad_input;
}
at::Tensor bce(const at::Tensor& self, const at::Tensor& target, const OptTensor& weight, int64_t reduction) {
  return loss_op("binary_cross_entropy", Loss::Bce, self, target, weight, reduction, nullptr);
}
at::Tensor& bce_out(const at::Tensor& self, const at::Tensor& target, const OptTensor& weight, int64_t reduction,
                    at::Tensor& out) {
  loss_op("binary_cross_entropy.out", Loss::Bce, self, target, weight, reduction, &out);
  return out;
}
at::Tensor bce_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                        const OptTensor& weight, int64_t reduction) {
  return loss_backward_op("binary_cross_entropy_backward", Loss::Bce, grad, self, target, weight, reduction, nullptr);
}
at::Tensor& bce_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                             const OptTensor& weight, int64_t reduction, at::Tensor& grad_input) {
  loss_backward_op("binary_cross_entropy_backward.grad_input", Loss::Bce, grad, self, target, weight, reduction,
                   &grad_input);
  return grad_input;
}

// Registered natively (ATen's composite would go through log_sigmoid_forward);
// autograd uses its own formula for the backward.
at::Tensor bce_logits_op(const char* name, const at::Tensor& self, const at::Tensor& target, const OptTensor& weight,
                         const OptTensor& pos_weight, int64_t reduction, at::Tensor* out) {
  Reduction red = reduction_of(reduction);
  c10::ScalarType dtype = at::result_type(self, target);
  c10::DimVector shape = at::infer_size_dimvector(self.sizes(), target.sizes());
  for (const OptTensor* p : {&weight, &pos_weight})
    if (defined(*p)) shape = at::infer_size_dimvector(shape, (*p)->sizes());
  c10::DeviceGuard guard(self.device());
  at::Tensor output =
      output_for(name, out, self, red == Reduction::None ? c10::IntArrayRef(shape) : c10::IntArrayRef{}, dtype);
  Program p(name, self.device().index());
  ir::Graph& g = p.graph();
  ir::Shape s = to_shape(shape);
  auto operand = [&](const at::Tensor& t) { return ir::broadcast_to(g, p.read_as(t, dtype), s); };
  OptValue w, pw;
  if (defined(weight)) w = operand(*weight);
  if (defined(pos_weight)) pw = operand(*pos_weight);
  p.write(output, lowering::binary_cross_entropy_with_logits(g, operand(self), operand(target), w, pw, red,
                                                             ir_of(dtype)));
  p.run();
  return output;
}
at::Tensor bce_logits(const at::Tensor& self, const at::Tensor& target, const OptTensor& weight,
                      const OptTensor& pos_weight, int64_t reduction) {
  return bce_logits_op("binary_cross_entropy_with_logits", self, target, weight, pos_weight, reduction, nullptr);
}
at::Tensor& bce_logits_out(const at::Tensor& self, const at::Tensor& target, const OptTensor& weight,
                           const OptTensor& pos_weight, int64_t reduction, at::Tensor& out) {
  bce_logits_op("binary_cross_entropy_with_logits.out", self, target, weight, pos_weight, reduction, &out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_softmax", softmax);
  m.impl("_softmax.out", softmax_out);
  m.impl("_log_softmax", log_softmax);
  m.impl("_log_softmax.out", log_softmax_out);
  m.impl("_softmax_backward_data", softmax_backward);
  m.impl("_softmax_backward_data.out", softmax_backward_out);
  m.impl("_log_softmax_backward_data", log_softmax_backward);
  m.impl("_log_softmax_backward_data.out", log_softmax_backward_out);
  m.impl("native_layer_norm", layer_norm);
  m.impl("native_layer_norm_backward", layer_norm_backward);
  m.impl("native_batch_norm", native_batch_norm);
  m.impl("native_batch_norm.out", native_batch_norm_out);
  m.impl("_native_batch_norm_legit", batch_norm_legit);
  m.impl("_native_batch_norm_legit.out", batch_norm_legit_out);
  m.impl("_native_batch_norm_legit.no_stats", batch_norm_legit_no_stats);
  m.impl("_native_batch_norm_legit.no_stats_out", batch_norm_legit_no_stats_out);
  m.impl("_native_batch_norm_legit_no_training", batch_norm_legit_no_training);
  m.impl("native_batch_norm_backward", batch_norm_backward);
  m.impl("nll_loss_forward", nll_loss_forward);
  m.impl("nll_loss_forward.output", nll_loss_forward_out);
  m.impl("nll_loss_backward", nll_loss_backward);
  m.impl("nll_loss_backward.grad_input", nll_loss_backward_out);
  m.impl("nll_loss2d_forward", nll_loss2d_forward);
  m.impl("nll_loss2d_forward.output", nll_loss2d_forward_out);
  m.impl("nll_loss2d_backward", nll_loss2d_backward);
  m.impl("nll_loss2d_backward.grad_input", nll_loss2d_backward_out);
  m.impl("mse_loss", mse_loss);
  m.impl("mse_loss.out", mse_loss_out);
  m.impl("mse_loss_backward", mse_loss_backward);
  m.impl("mse_loss_backward.grad_input", mse_loss_backward_out);
  m.impl("binary_cross_entropy", bce);
  m.impl("binary_cross_entropy.out", bce_out);
  m.impl("binary_cross_entropy_backward", bce_backward);
  m.impl("binary_cross_entropy_backward.grad_input", bce_backward_out);
  m.impl("binary_cross_entropy_with_logits", bce_logits);
  m.impl("binary_cross_entropy_with_logits.out", bce_logits_out);
}

}  // namespace tpu::aten
