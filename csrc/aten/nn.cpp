// Neural-network ops: softmax, layer/batch normalisation and losses, forward
// and backward. The math is in lowering/nn.*; this file is ATen's contract
// (shapes, dtypes, checks, optional tensors, out= variants, running stats).
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <bit>
#include <limits>

#include "aten/debug_checks.h"
#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/elementwise.h"
#include "lowering/nn.h"
#include "lowering/reduce.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using lowering::OptValue;
using lowering::Reduction;
using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
ir::DType ir_of(c10::ScalarType t) { return lowering::to_ir(t); }

at::Tensor new_tensor(const at::Tensor& like, c10::IntArrayRef shape, c10::ScalarType dtype) {
  return tpu::aten::new_tensor(shape, dtype, like.device());
}
// A result: into `out` (resized as ATen does) or a fresh tensor laid out in `format`.
at::Tensor output_for(const char* name, at::Tensor* out, const at::Tensor& like, c10::IntArrayRef shape,
                      c10::ScalarType dtype, at::MemoryFormat format = at::MemoryFormat::Contiguous) {
  return prepare_output(name, out, shape, dtype, like.device(), false, format);
}

// ------------------------------------------------------------ softmax

// _softmax (kLog false) and _log_softmax (true).
template <bool kLog>
at::Tensor softmax_op(Overload o, const at::Tensor& self, int64_t dim, bool half_to_float) {
  int64_t d = lowering::wrap_dim(dim, self.dim());
  c10::ScalarType t = self.scalar_type();
  TORCH_CHECK(!half_to_float || t == c10::kHalf || t == c10::kBFloat16,
              "conversion of ", t, " to float is not supported by ", o.name);
  c10::ScalarType result = half_to_float ? c10::kFloat : t;
  TORCH_CHECK(c10::isFloatingType(result), o.name, " not implemented for '", t, "'");
  c10::DeviceGuard guard(self.device());
  at::Tensor output = output_for(o.name, o.out, self, self.sizes(), result);
  Program p(o.name, self.device());
  const at::Tensor* tensors[] = {&self, &output};
  const int64_t captures[] = {d, kLog};
  build_or_apply(p, o.name, tensors, captures, [&](Program& q) {
    ir::Value x = q.read(self);
    q.write(output, kLog ? lowering::log_softmax(q.graph(), x, d, ir_of(result))
                         : lowering::softmax(q.graph(), x, d, ir_of(result)));
  });
  p.run();
  return output;
}
constexpr auto softmax = functional_overload<softmax_op<false>, "_softmax">;
constexpr auto softmax_out = out_overload<softmax_op<false>, "_softmax.out">;
constexpr auto log_softmax = functional_overload<softmax_op<true>, "_log_softmax">;
constexpr auto log_softmax_out = out_overload<softmax_op<true>, "_log_softmax.out">;
template <bool kLog>
at::Tensor softmax_backward_op(Overload o, const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                               c10::ScalarType input_dtype) {
  int64_t d = lowering::wrap_dim(dim, output.dim());
  TORCH_CHECK(grad.sizes().equals(output.sizes()), o.name, ": grad_output with shape ", grad.sizes(),
              " doesn't match output shape ", output.sizes());
  c10::DeviceGuard guard(output.device());
  at::Tensor result = output_for(o.name, o.out, output, output.sizes(), input_dtype);
  Program p(o.name, output.device());
  const at::Tensor* tensors[] = {&grad, &output, &result};
  const int64_t captures[] = {d, kLog};
  build_or_apply(p, o.name, tensors, captures, [&](Program& q) {
    ir::Value gv = q.read(grad), ov = q.read(output);
    q.write(result, kLog ? lowering::log_softmax_backward(q.graph(), gv, ov, d, ir_of(input_dtype))
                         : lowering::softmax_backward(q.graph(), gv, ov, d, ir_of(input_dtype)));
  });
  p.run();
  return result;
}
constexpr auto softmax_backward = functional_overload<softmax_backward_op<false>, "_softmax_backward_data">;
constexpr auto softmax_backward_out = out_overload<softmax_backward_op<false>, "_softmax_backward_data.out">;
constexpr auto log_softmax_backward = functional_overload<softmax_backward_op<true>, "_log_softmax_backward_data">;

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
  Program p("native_layer_norm", input.device());
  const at::Tensor none;
  const at::Tensor* tensors[] = {&input, defined(weight) ? &*weight : &none, defined(bias) ? &*bias : &none,
                                 &out, &mean, &rstd};
  const int64_t captures[] = {axis, std::bit_cast<int64_t>(eps)};  // eps is a constant of the graph
  build_or_apply(p, "native_layer_norm", tensors, captures, [&](Program& q) {
    lowering::NormForward f = lowering::layer_norm(q.graph(), q.read(input), axis, read_opt(q, weight),
                                                   read_opt(q, bias), eps, ir_of(input.scalar_type()));
    q.write(out, f.out);
    q.write(mean, f.mean);
    q.write(rstd, f.invstd);
  });
  p.run();
  return {out, mean, rstd};
}

// The layout of an elementwise result of these operands as ATen's TensorIterator picks it
// (meta tensors: layouts without data).
at::Tensor meta_elementwise(std::initializer_list<at::Tensor> operands) {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(false).check_all_same_dtype(false);
  config.add_owned_output(at::Tensor());
  for (const at::Tensor& t : operands) config.add_owned_const_input(t);
  return config.build().output(0);
}

// grad_input laid out as torch.compile's fake tensors have it: PyTorch's decomposition of
// native_layer_norm_backward (its meta kernel), replayed on layouts. Its `.to(computation
// dtype, contiguous_format)` keeps a tensor of that dtype as it is unless the tensor suggests
// channels-last; the keepdim sums and the unsqueezed statistics are contiguous. CPU's
// grad_input is always contiguous; a compiled backward views ours as the fake one is laid out.
at::Tensor layer_norm_grad_input(const at::Tensor& grad, const at::Tensor& input, const OptTensor& weight,
                                 int64_t axis) {
  if (grad.is_contiguous() && input.is_contiguous()) return new_tensor(input, input.sizes(), input.scalar_type());
  const at::TensorOptions meta = at::TensorOptions().dtype(at::kFloat).device(c10::kMeta);
  const c10::ScalarType compute = at::toOpMathType(input.scalar_type());
  auto cast = [&](const at::Tensor& t) {
    bool kept = t.scalar_type() == compute && t.suggest_memory_format() == at::MemoryFormat::Contiguous;
    return kept ? at::empty_strided(t.sizes(), t.strides(), meta) : at::empty(t.sizes(), meta);
  };
  c10::DimVector stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
  stat_shape.resize(input.dim(), 1);
  const at::Tensor g = cast(grad), stat = at::empty(stat_shape, meta);
  const at::Tensor x_hat = meta_elementwise({meta_elementwise({cast(input), stat}), stat});  // (x - mean) * rstd
  const at::Tensor a = meta_elementwise({defined(weight) ? meta_elementwise({g, cast(*weight)}) : g});  // g * w * N
  const at::Tensor inner = meta_elementwise({meta_elementwise({a, stat}), meta_elementwise({x_hat, stat})});
  const at::Tensor layout = meta_elementwise({stat, inner});  // rstd / N * inner
  return at::empty_strided(input.sizes(), layout.strides(),
                           at::TensorOptions().dtype(input.scalar_type()).device(input.device()));
}

Tensor3 layer_norm_backward(const at::Tensor& grad, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                            const at::Tensor& mean, const at::Tensor& rstd, const OptTensor& weight,
                            const OptTensor& bias, std::array<bool, 3> mask) {
  int64_t axis = layer_norm_axis(input, normalized_shape, weight, bias);
  c10::DeviceGuard guard(input.device());
  at::Tensor gi, gw, gb;
  if (mask[0]) gi = layer_norm_grad_input(grad, input, weight, axis);
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
  Program p("native_layer_norm_backward", input.device());
  c10::ScalarType param = defined(weight) ? weight->scalar_type() : gb.defined() ? gb.scalar_type()
                                                                                  : input.scalar_type();
  const at::Tensor none;
  const at::Tensor* tensors[] = {&grad, &input, &mean, &rstd, defined(weight) ? &*weight : &none, &gi, &gw, &gb};
  const int64_t captures[] = {axis, mask[0] | mask[1] << 1 | mask[2] << 2, static_cast<int64_t>(param)};
  build_or_apply(p, "native_layer_norm_backward", tensors, captures, [&](Program& q) {
    lowering::NormGrads r = lowering::layer_norm_backward(q.graph(), q.read(grad), q.read(input), axis, q.read(mean),
                                                          q.read(rstd), read_opt(q, weight), mask,
                                                          ir_of(input.scalar_type()), ir_of(param));
    if (gi.defined()) q.write(gi, r.input);
    if (gw.defined()) q.write(gw, ir::reshape(q.graph(), r.weight, to_shape(gw.sizes())));
    if (gb.defined()) q.write(gb, ir::reshape(q.graph(), r.bias, to_shape(gb.sizes())));
  });
  p.run();
  return {gi, gw, gb};
}

// ------------------------------------------------------------ group norm

// Native, so that a channels-last input works (ATen's composite kernel views
// it) and the whole forward is one program.
Tensor3 group_norm(const at::Tensor& input, const OptTensor& weight, const OptTensor& bias, c10::SymInt N,
                   c10::SymInt C, c10::SymInt HxW, int64_t group, double eps) {
  int64_t n = N.expect_int(), channels = C.expect_int();
  TORCH_CHECK(group > 0, "Expected num groups to be greater than 0, got ", group);
  TORCH_CHECK(input.dim() >= 2 && input.size(1) == channels, "native_group_norm: expected an input of shape [N, ",
              channels, ", *], got ", input.sizes());
  TORCH_CHECK(channels % group == 0, "Expected number of channels in input to be divisible by num_groups, but got input of shape ",
              input.sizes(), " and num_groups=", group);
  for (const OptTensor* t : {&weight, &bias})
    TORCH_CHECK(!defined(*t) || ((*t)->dim() == 1 && (*t)->numel() == channels), "Expected ",
                t == &weight ? "weight" : "bias",
                " to be a vector of size equal to the number of channels in input, but got ",
                t == &weight ? "weight" : "bias", " of shape ", (*t)->sizes(), " and input of shape ", input.sizes());
  TORCH_CHECK(input.numel() == n * channels * HxW.expect_int() && input.size(0) == n,
              "Expected X.numel() == N * C * HxW to be true, but got false.");
  // ATen's mixed-type rule: parameters of another dtype than the input's must all be float (a
  // reduced-precision input's float parameters; the statistics are then float too).
  c10::ScalarType stats = stats_dtype(input, {&weight, &bias});
  bool mixed = stats != input.scalar_type();
  for (const OptTensor* t : {&weight, &bias}) {
    if (!defined(*t)) continue;
    TORCH_CHECK(!mixed || (*t)->scalar_type() == c10::kFloat,
                "mixed dtype (CPU): expect parameter to have scalar type of Float");
    TORCH_CHECK(mixed || (*t)->scalar_type() == input.scalar_type(), "expected scalar type ", input.scalar_type(),
                " but found ", (*t)->scalar_type());
  }
  c10::DeviceGuard guard(input.device());
  at::Tensor out = output_for("native_group_norm", nullptr, input, input.sizes(), input.scalar_type(),
                              input.suggest_memory_format());
  at::Tensor mean = new_tensor(input, {n, group}, stats);
  at::Tensor rstd = new_tensor(input, {n, group}, stats);
  if (input.numel() == 0) {  // empty groups: CPU's mean 0, rstd NaN
    if (mean.numel() != 0) {
      mean.zero_();
      rstd.fill_(std::numeric_limits<double>::quiet_NaN());
    }
    return {out, mean, rstd};
  }
  Program p("native_group_norm", input.device());
  const at::Tensor none;
  const at::Tensor* tensors[] = {&input, defined(weight) ? &*weight : &none, defined(bias) ? &*bias : &none,
                                 &out, &mean, &rstd};
  const int64_t captures[] = {group, std::bit_cast<int64_t>(eps)};  // eps is a constant of the graph
  build_or_apply(p, "native_group_norm", tensors, captures, [&](Program& q) {
    lowering::NormForward f = lowering::group_norm(q.graph(), q.read(input), group, read_opt(q, weight),
                                                   read_opt(q, bias), eps, ir_of(input.scalar_type()));
    q.write(out, f.out);
    q.write(mean, ir::convert(q.graph(), f.mean, ir_of(stats)));
    q.write(rstd, ir::convert(q.graph(), f.invstd, ir_of(stats)));
  });
  p.run();
  return {out, mean, rstd};
}

Tensor3 group_norm_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& mean,
                            const at::Tensor& rstd, const OptTensor& weight, c10::SymInt N, c10::SymInt C,
                            c10::SymInt HxW, int64_t group, std::array<bool, 3> mask) {
  int64_t channels = C.expect_int();
  TORCH_CHECK(group > 0 && channels % group == 0, "native_group_norm_backward: expected C (", channels,
              ") to be divisible by group (", group, ")");
  TORCH_CHECK(grad.sizes() == input.sizes() && input.dim() >= 2 && input.size(0) == N.expect_int() &&
                  input.size(1) == channels && mean.numel() == N.expect_int() * group && rstd.numel() == mean.numel(),
              "native_group_norm_backward: inconsistent shapes: grad ", grad.sizes(), ", input ", input.sizes(),
              ", mean ", mean.sizes(), ", rstd ", rstd.sizes(), ", group ", group);
  TORCH_CHECK(!defined(weight) || weight->numel() == channels, "native_group_norm_backward: weight has ",
              weight->numel(), " elements, expected ", channels);
  c10::DeviceGuard guard(input.device());
  at::Tensor gi, gw, gb;
  c10::ScalarType param = defined(weight) ? weight->scalar_type() : input.scalar_type();
  if (mask[0]) gi = new_tensor(input, input.sizes(), input.scalar_type());
  if (mask[1] && defined(weight)) gw = new_tensor(input, {channels}, param);
  if (mask[2]) gb = new_tensor(input, {channels}, param);
  if (input.numel() == 0) {  // nothing was normalised: zero parameter grads
    if (gw.defined()) gw.zero_();
    if (gb.defined()) gb.zero_();
    return {gi, gw, gb};
  }
  Program p("native_group_norm_backward", input.device());
  const at::Tensor none;
  const at::Tensor* tensors[] = {&grad, &input, &mean, &rstd, defined(weight) ? &*weight : &none, &gi, &gw, &gb};
  const int64_t captures[] = {group, mask[0] | mask[1] << 1 | mask[2] << 2, static_cast<int64_t>(param)};
  build_or_apply(p, "native_group_norm_backward", tensors, captures, [&](Program& q) {
    lowering::NormGrads r = lowering::group_norm_backward(q.graph(), q.read(grad), q.read(input), q.read(mean),
                                                          q.read(rstd), read_opt(q, weight), group, mask,
                                                          ir_of(input.scalar_type()), ir_of(param));
    if (gi.defined()) q.write(gi, r.input);
    if (gw.defined()) q.write(gw, r.weight);
    if (gb.defined()) q.write(gb, r.bias);
  });
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
  // Laid out as the input, as PyTorch's meta kernel (torch.compile's fake tensors) lays it out;
  // CPU agrees for contiguous and channels-last inputs.
  at::Tensor o = out ? output_for(name, out, input, input.sizes(), input.scalar_type()) : at::empty_like(input);
  at::Tensor sm = output_for(name, save_mean, input, {training ? c : 0}, stats);
  at::Tensor si = output_for(name, save_invstd, input, {training ? c : 0}, stats);
  Program p(name, input.device());
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
    ir::Value updated = ir::binary(g, ir::Op::Add, ir::binary(g, ir::Op::Multiply, ir::convert(g, r, acc), keep),
                                   ir::binary(g, ir::Op::Multiply, s, take));
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
  // Laid out as the gradient, as PyTorch's meta kernel lays it out (CPU: as a channels-last input).
  if (mask[0]) gi = at::empty_like(grad, input.scalar_type());
  if (mask[1]) gw = new_tensor(input, {c}, defined(weight) ? weight->scalar_type() : param);
  if (mask[2]) gb = new_tensor(input, {c}, defined(weight) ? weight->scalar_type() : param);
  Program p("native_batch_norm_backward", input.device());
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
  check_index_values(name, target, {self.size(self.dim() == 1 ? 0 : 1), false, ignore_index}, ErrorType::Index,
                     [](int64_t value) { return "Target " + std::to_string(value) + " is out of bounds."; });
  Reduction red = reduction_of(reduction);
  c10::DeviceGuard guard(self.device());
  c10::IntArrayRef out_shape = red == Reduction::None ? target.sizes() : c10::IntArrayRef{};
  at::Tensor output = output_for(name, out, self, out_shape, self.scalar_type());
  at::Tensor total_weight = output_for(name, total, self, {}, self.scalar_type());
  Program p(name, self.device());
  const at::Tensor none;
  const at::Tensor* tensors[] = {&self, &target, defined(weight) ? &*weight : &none, &output, &total_weight};
  const int64_t captures[] = {reduction, ignore_index};
  build_or_apply(p, name, tensors, captures, [&](Program& q) {
    lowering::NllForward f = lowering::nll_loss(q.graph(), q.read(self), q.read(target), read_opt(q, weight), red,
                                                ignore_index, ir_of(self.scalar_type()));
    q.write(output, f.output);
    q.write(total_weight, f.total_weight);
  });
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
  Program p(name, self.device());
  const at::Tensor none;
  const at::Tensor* tensors[] = {&grad, &self, &target, defined(weight) ? &*weight : &none, &total_weight, &gi};
  const int64_t captures[] = {reduction, ignore_index};
  build_or_apply(p, name, tensors, captures, [&](Program& q) {
    ir::Value gv =
        ir::reshape(q.graph(), q.read(grad), red == Reduction::None ? to_shape(target.sizes()) : ir::Shape{});
    q.write(gi, lowering::nll_loss_backward(q.graph(), gv, q.read(self), q.read(target), read_opt(q, weight), red,
                                            ignore_index, q.read(total_weight), ir_of(self.scalar_type())));
  });
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

enum class Loss { Mse, Bce, Huber, SmoothL1 };

// The loss of `kind` (param: Huber's delta, smooth L1's beta) and its gradient.
ir::Value loss_value(ir::Graph& g, Loss kind, ir::Value x, ir::Value t, OptValue w, Reduction red, double param,
                     ir::DType result) {
  switch (kind) {
    case Loss::Mse: return lowering::mse_loss(g, x, t, red, result);
    case Loss::Bce: return lowering::binary_cross_entropy(g, x, t, w, red, result);
    case Loss::Huber: return lowering::huber_loss(g, x, t, red, param, result);
    case Loss::SmoothL1: return lowering::smooth_l1_loss(g, x, t, red, param, result);
  }
  return x;
}
ir::Value loss_gradient(ir::Graph& g, Loss kind, ir::Value gv, ir::Value x, ir::Value t, OptValue w, Reduction red,
                        double param, ir::DType result) {
  switch (kind) {
    case Loss::Mse: return lowering::mse_loss_backward(g, gv, x, t, red, result);
    case Loss::Bce: return lowering::binary_cross_entropy_backward(g, gv, x, t, w, red, result);
    case Loss::Huber: return lowering::huber_loss_backward(g, gv, x, t, red, param, result);
    case Loss::SmoothL1: return lowering::smooth_l1_loss_backward(g, gv, x, t, red, param, result);
  }
  return x;
}

// Loss forward: operands broadcast to one shape (weight to the input's).
at::Tensor loss_op(const char* name, Loss kind, const at::Tensor& self, const at::Tensor& target,
                   const OptTensor& weight, int64_t reduction, at::Tensor* out, double param = 0) {
  Reduction red = reduction_of(reduction);
  bool broadcasts = kind != Loss::Bce;
  c10::ScalarType dtype = broadcasts ? at::result_type(self, target) : self.scalar_type();
  c10::DimVector shape = broadcasts ? at::infer_size_dimvector(self.sizes(), target.sizes())
                                    : c10::DimVector(self.sizes().begin(), self.sizes().end());
  if (kind == Loss::Bce)
    TORCH_CHECK(self.numel() == target.numel(), "Using a target size (", target.sizes(),
                ") that is different to the input size (", self.sizes(), ") is deprecated. "
                "Please ensure they have the same size.");
  c10::DeviceGuard guard(self.device());
  at::Tensor output = output_for(name, out, self, red == Reduction::None ? c10::IntArrayRef(shape) : c10::IntArrayRef{},
                                 dtype);
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  ir::Shape s = to_shape(shape);
  ir::Value x = ir::broadcast_to(g, p.read_as(self, dtype), s);
  ir::Value t = ir::reshape(g, p.read_as(target, dtype), s);
  if (broadcasts) t = ir::broadcast_to(g, p.read_as(target, dtype), s);
  OptValue w;
  if (defined(weight)) w = ir::broadcast_to(g, p.read_as(*weight, dtype), s);
  p.write(output, loss_value(g, kind, x, t, w, red, param, ir_of(dtype)));
  p.run();
  return output;
}

at::Tensor loss_backward_op(const char* name, Loss kind, const at::Tensor& grad, const at::Tensor& self,
                            const at::Tensor& target, const OptTensor& weight, int64_t reduction, at::Tensor* out,
                            double param = 0) {
  Reduction red = reduction_of(reduction);
  c10::ScalarType dtype = at::result_type(self, target);
  dtype = c10::promoteTypes(dtype, grad.scalar_type());
  c10::DimVector shape = at::infer_size_dimvector(self.sizes(), target.sizes());
  if (red == Reduction::None) shape = at::infer_size_dimvector(shape, grad.sizes());
  c10::DeviceGuard guard(self.device());
  // ATen's backward kernels write into a tensor like the input (mse keeps the promoted dtype).
  at::Tensor gi = output_for(name, out, self, shape, kind == Loss::Mse ? dtype : self.scalar_type());
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  ir::Shape s = to_shape(shape);
  ir::Value x = ir::broadcast_to(g, p.read_as(self, dtype), s);
  ir::Value t = ir::broadcast_to(g, p.read_as(target, dtype), s);
  ir::Value gv = p.read_as(grad, dtype);
  gv = red == Reduction::None ? ir::broadcast_to(g, gv, s) : ir::reshape(g, gv, {});
  OptValue w;
  if (defined(weight)) w = ir::broadcast_to(g, p.read_as(*weight, dtype), s);
  p.write(gi, loss_gradient(g, kind, gv, x, t, w, red, param, ir_of(dtype)));
  p.run();
  return gi;
}

// mse_loss and binary_cross_entropy, and their backwards.
at::Tensor mse_loss(Overload o, const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  return loss_op(variant(o).c_str(), Loss::Mse, self, target, std::nullopt, reduction, o.out);
}
at::Tensor mse_loss_backward(Overload o, const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                             int64_t reduction) {
  return loss_backward_op(variant(o).c_str(), Loss::Mse, grad, self, target, std::nullopt, reduction, o.out);
}
at::Tensor bce(Overload o, const at::Tensor& self, const at::Tensor& target, const OptTensor& weight,
               int64_t reduction) {
  return loss_op(variant(o).c_str(), Loss::Bce, self, target, weight, reduction, o.out);
}
at::Tensor bce_backward(Overload o, const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                        const OptTensor& weight, int64_t reduction) {
  return loss_backward_op(variant(o).c_str(), Loss::Bce, grad, self, target, weight, reduction, o.out);
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
  Program p(name, self.device());
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
at::Tensor bce_logits(Overload o, const at::Tensor& self, const at::Tensor& target, const OptTensor& weight,
                      const OptTensor& pos_weight, int64_t reduction) {
  return bce_logits_op(variant(o).c_str(), self, target, weight, pos_weight, reduction, o.out);
}

// ------------------------------------------------------------ shrink, threshold, glu, log_sigmoid, prelu

void check_floating(const char* name, const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(t.scalar_type()), "\"", name, "\" not implemented for '",
              c10::toString(t.scalar_type()), "'");
}

// A unary activation with Scalar parameters, computed in opmath and returned in self's dtype.
at::Tensor unary_activation(const char* base, const char* kernel, const at::Tensor& self,
                            std::vector<c10::Scalar> params, const Build& build, at::Tensor* out, bool inplace) {
  check_floating(kernel, self);
  std::vector<at::Tensor> inputs{self};
  for (const c10::Scalar& s : params) inputs.push_back(scalar_operand(s));
  std::string name = variant(base, out, inplace);
  c10::ScalarType t = self.scalar_type();
  return elementwise(name.c_str(), inputs, lowering::opmath_type(t), t, build, out, inplace);
}

// The gradient of an activation: grad and self promote to one dtype.
at::Tensor activation_gradient(const char* name, const at::Tensor& grad, const at::Tensor& self,
                               std::vector<c10::Scalar> params, const Build& build, at::Tensor* out) {
  c10::ScalarType t = at::result_type(grad, self);
  std::vector<at::Tensor> inputs{grad, self};
  for (const c10::Scalar& s : params) inputs.push_back(scalar_operand(s));
  return elementwise(name, inputs, lowering::opmath_type(t), t, build, out, false);
}

Build build_shrink(bool hard) {
  return [hard](ir::Graph& g, const std::vector<ir::Value>& v) {
    return hard ? lowering::hardshrink(g, v[0], v[1]) : lowering::softshrink(g, v[0], v[1]);
  };
}
Build build_shrink_backward(bool hard) {
  return [hard](ir::Graph& g, const std::vector<ir::Value>& v) {
    return hard ? lowering::hardshrink_backward(g, v[0], v[1], v[2]) : lowering::softshrink_backward(g, v[0], v[1], v[2]);
  };
}
void check_softshrink(const at::Tensor& self, const c10::Scalar& lambd) {
  c10::ScalarType t = self.scalar_type();
  double top = t == c10::kDouble ? std::numeric_limits<double>::max()
               : t == c10::kHalf ? 65504.0
               : t == c10::kBFloat16 ? static_cast<double>(std::numeric_limits<c10::BFloat16>::max())
                                     : static_cast<double>(std::numeric_limits<float>::max());
  double l = lambd.to<double>();
  TORCH_CHECK(l >= 0 && l <= top, "lambda must be in range [0, ", top, "] for input dtype ", t, ", but found ", l);
}

// hardshrink (kHard) and softshrink, whose lambda must also fit the dtype.
template <bool kHard>
at::Tensor shrink_op(Overload o, const at::Tensor& self, const c10::Scalar& lambd) {
  if (!kHard) check_softshrink(self, lambd);
  return unary_activation(kHard ? "hardshrink" : "softshrink", kHard ? "hardshrink_cpu" : "softshrink_cpu", self,
                          {lambd}, build_shrink(kHard), o.out, false);
}
constexpr auto hardshrink = functional_overload<shrink_op<true>, "hardshrink">;
constexpr auto hardshrink_out = out_overload<shrink_op<true>, "hardshrink.out">;
constexpr auto softshrink = functional_overload<shrink_op<false>, "softshrink">;
constexpr auto softshrink_out = out_overload<shrink_op<false>, "softshrink.out">;
template <bool kHard>
at::Tensor shrink_backward_op(Overload o, const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& lambd) {
  return activation_gradient(o.name, grad, self, {lambd}, build_shrink_backward(kHard), o.out);
}
constexpr auto hardshrink_backward = functional_overload<shrink_backward_op<true>, "hardshrink_backward">;
constexpr auto hardshrink_backward_out = out_overload<shrink_backward_op<true>, "hardshrink_backward.grad_input">;
constexpr auto softshrink_backward = functional_overload<shrink_backward_op<false>, "softshrink_backward">;
constexpr auto softshrink_backward_out = out_overload<shrink_backward_op<false>, "softshrink_backward.grad_input">;

// threshold compares and substitutes in self's own dtype (ATen casts both Scalars to it).
at::Tensor threshold_op(Overload o, const at::Tensor& self, const c10::Scalar& th, const c10::Scalar& value) {
  c10::ScalarType t = self.scalar_type();
  TORCH_CHECK(t != c10::kBool, "\"threshold_cpu\" not implemented for 'Bool'");
  return elementwise(o.name, {self, scalar_operand(th), scalar_operand(value)}, t, t,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::threshold(g, v[0], v[1], v[2]);
                     },
                     o.out, o.inplace);
}
constexpr auto threshold = functional_overload<threshold_op, "threshold">;
constexpr auto threshold_inplace = inplace_overload<threshold_op, "threshold_">;
constexpr auto threshold_out = out_overload<threshold_op, "threshold.out">;
at::Tensor& threshold_backward_out(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& th,
                                   at::Tensor& grad_input) {
  c10::ScalarType t = at::result_type(grad, self);
  elementwise("threshold_backward.grad_input", {grad, self, scalar_operand(th)}, t, t,
              [](ir::Graph& g, const std::vector<ir::Value>& v) {
                ir::Value zero = ir::full(g, g.type(v[0]).dtype, 0, g.type(v[0]).shape);
                return ir::select(g, ir::compare(g, v[1], v[2], ir::Compare::LE), zero, v[0]);
              },
              &grad_input, false);
  return grad_input;
}

// log_sigmoid's buffer is an implementation detail of ATen's CPU kernel; the
// backward here recomputes from self, so the buffer stays empty (as on CUDA).
std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  at::Tensor out = unary_activation("log_sigmoid_forward", "log_sigmoid_forward", self, {},
                                    [](ir::Graph& g, const std::vector<ir::Value>& v) {
                                      return lowering::log_sigmoid(g, v[0]);
                                    },
                                    nullptr, false);
  return {out, at::empty({0}, self.options())};
}
std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(const at::Tensor& self, at::Tensor& output,
                                                             at::Tensor& buffer) {
  unary_activation("log_sigmoid_forward", "log_sigmoid_forward", self, {},
                   [](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::log_sigmoid(g, v[0]); },
                   &output, false);
  buffer.resize_({0});
  return {output, buffer};
}
Build build_log_sigmoid_backward() {
  return [](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::log_sigmoid_backward(g, v[0], v[1]); };
}
at::Tensor log_sigmoid_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& buffer) {
  return activation_gradient("log_sigmoid_backward", grad, self, {}, build_log_sigmoid_backward(), nullptr);
}
at::Tensor& log_sigmoid_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& buffer,
                                     at::Tensor& grad_input) {
  activation_gradient("log_sigmoid_backward.grad_input", grad, self, {}, build_log_sigmoid_backward(), &grad_input);
  return grad_input;
}

at::Tensor prelu_kernel(const at::Tensor& self, const at::Tensor& weight) {
  c10::ScalarType t = at::result_type(self, weight);
  check_floating("prelu_cpu", self);
  return elementwise("_prelu_kernel", {self, weight}, lowering::opmath_type(t), t,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::prelu(g, v[0], v[1]); });
}
// Both gradients have the broadcast shape; autograd sums them down to the operands'.
std::tuple<at::Tensor, at::Tensor> prelu_kernel_backward(const at::Tensor& grad, const at::Tensor& self,
                                                         const at::Tensor& weight) {
  c10::ScalarType t = at::result_type(self, weight);
  c10::ScalarType compute = lowering::opmath_type(t);
  c10::DimVector shape = at::infer_size_dimvector(at::infer_size_dimvector(self.sizes(), weight.sizes()), grad.sizes());
  c10::DeviceGuard guard(self.device());
  // Laid out as CPU's TensorIterator lays them out over (self, weight, grad).
  at::Tensor gi = new_elementwise_output({self, weight, grad}, shape, t, self.device());
  at::Tensor gw = new_elementwise_output({self, weight, grad}, shape, t, self.device());
  if (gi.numel() == 0) return {gi, gw};
  Program p("_prelu_kernel_backward", self.device());
  ir::Graph& g = p.graph();
  ir::Shape s = to_shape(shape);
  auto operand = [&](const at::Tensor& x) { return ir::broadcast_to(g, p.read_as(x, compute), s); };
  auto [a, b] = lowering::prelu_backward(g, operand(grad), operand(self), operand(weight));
  p.write(gi, a);
  p.write(gw, b);
  p.run();
  return {gi, gw};
}

// torch.nn.utils.weight_norm's fused primitive (dim 0 or the last): w = v * (g / ||v||)
// over every other dim, and the norms (float for a bfloat16 g, as on CPU), computed in
// the opmath type; g has v's rank with size 1 but along dim.
ir::Shape weight_norm_gain_shape(const at::Tensor& v, int64_t dim) {
  ir::Shape shape(v.dim(), 1);
  shape[dim] = v.size(dim);
  return shape;
}
void check_weight_norm(const at::Tensor& v, const at::Tensor& g, int64_t dim) {
  TORCH_CHECK(dim == 0 || dim == v.dim() - 1, "fused kernels can only be applied for first or last dim");
  TORCH_CHECK(g.numel() == v.size(dim), "weight_norm: g must have one element per slice of v along dim ", dim);
  check_floating("weight_norm", v);
}
std::tuple<at::Tensor, at::Tensor> weight_norm_interface(const at::Tensor& v, const at::Tensor& g, int64_t dim) {
  check_weight_norm(v, g, dim);
  c10::ScalarType norm_type = g.scalar_type() == c10::kBFloat16 ? c10::kFloat : g.scalar_type();
  c10::DeviceGuard guard(v.device());
  at::Tensor w = at::empty(v.sizes(), v.options());
  at::Tensor norms = at::empty(g.sizes(), g.options().dtype(norm_type));
  if (v.numel() == 0) return {w, norms};
  Program p("_weight_norm_interface", v.device());
  ir::Graph& graph = p.graph();
  c10::ScalarType compute = lowering::opmath_type(v.scalar_type());
  ir::Value gain = ir::reshape(graph, p.read_as(g, compute), weight_norm_gain_shape(v, dim));
  lowering::WeightNorm r = lowering::weight_norm(graph, p.read_as(v, compute), gain, dim);
  p.write(w, r.w);
  p.write(norms, ir::reshape(graph, r.norms, to_shape(g.sizes())));
  p.run();
  return {w, norms};
}
std::tuple<at::Tensor, at::Tensor> weight_norm_interface_backward(const at::Tensor& grad_w, const at::Tensor& v,
                                                                  const at::Tensor& g, const at::Tensor& norms,
                                                                  int64_t dim) {
  check_weight_norm(v, g, dim);
  c10::DeviceGuard guard(v.device());
  at::Tensor grad_v = at::empty(v.sizes(), v.options());
  at::Tensor grad_g = at::empty(g.sizes(), g.options());
  if (v.numel() == 0) return {grad_v, grad_g};
  Program p("_weight_norm_interface_backward", v.device());
  ir::Graph& graph = p.graph();
  c10::ScalarType compute = lowering::opmath_type(v.scalar_type());
  ir::Shape gain_shape = weight_norm_gain_shape(v, dim);
  auto [gv, gg] = lowering::weight_norm_backward(graph, p.read_as(grad_w, compute), p.read_as(v, compute),
                                                 ir::reshape(graph, p.read_as(g, compute), gain_shape),
                                                 ir::reshape(graph, p.read_as(norms, compute), gain_shape), dim);
  p.write(grad_v, gv);
  p.write(grad_g, ir::reshape(graph, gg, to_shape(g.sizes())));
  p.run();
  return {grad_v, grad_g};
}

int64_t glu_dim(const at::Tensor& self, int64_t dim) {
  TORCH_CHECK(self.dim() > 0, "glu does not support scalars because halving size must be even");
  int64_t d = lowering::wrap_dim(dim, self.dim());
  TORCH_CHECK(self.size(d) % 2 == 0, "Halving dimension must be even, but dimension ", d, " is size ",
              self.size(d));
  return d;
}
at::Tensor glu_op(Overload o, const at::Tensor& self, int64_t dim) {
  check_floating("glu_cpu", self);
  int64_t d = glu_dim(self, dim);
  c10::DimVector shape(self.sizes().begin(), self.sizes().end());
  shape[d] /= 2;
  c10::DeviceGuard guard(self.device());
  at::Tensor output = output_for(o.name, o.out, self, shape, self.scalar_type());
  if (output.numel() == 0) return output;
  Program p(o.name, self.device());
  ir::Graph& g = p.graph();
  ir::Value x = p.read_as(self, lowering::opmath_type(self.scalar_type()));
  p.write(output, lowering::glu(g, x, d));
  p.run();
  return output;
}
constexpr auto glu = functional_overload<glu_op, "glu">;
constexpr auto glu_out = out_overload<glu_op, "glu.out">;
at::Tensor glu_backward_op(Overload o, const at::Tensor& grad, const at::Tensor& self, int64_t dim) {
  int64_t d = glu_dim(self, dim);
  c10::DimVector half(self.sizes().begin(), self.sizes().end());
  half[d] /= 2;
  TORCH_CHECK(grad.sizes().equals(half), o.name, ": grad_output of shape ", grad.sizes(), " for an output of shape ",
              c10::IntArrayRef(half));
  c10::DeviceGuard guard(self.device());
  at::Tensor gi = output_for(o.name, o.out, self, self.sizes(), self.scalar_type());
  if (gi.numel() == 0) return gi;
  Program p(o.name, self.device());
  c10::ScalarType compute = lowering::opmath_type(self.scalar_type());
  p.write(gi, lowering::glu_backward(p.graph(), p.read_as(grad, compute), p.read_as(self, compute), d));
  p.run();
  return gi;
}
constexpr auto glu_backward = functional_overload<glu_backward_op, "glu_backward">;
constexpr auto glu_backward_out = out_overload<glu_backward_op, "glu_backward.grad_input">;

// rrelu with its noise tensor: in training, negative inputs get a random
// slope from [lower, upper] (recorded in noise); otherwise the mean slope.
at::Tensor rrelu_op(const char* name, const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                    const c10::Scalar& upper, bool training, std::optional<at::Generator> gen, at::Tensor* out,
                    bool inplace) {
  check_floating("rrelu_with_noise_out_cpu", self);
  double lo = lower.to<double>(), hi = upper.to<double>();
  c10::ScalarType t = self.scalar_type();
  c10::ScalarType compute = lowering::opmath_type(t);
  if (training) {
    TORCH_CHECK(noise.sizes().equals(self.sizes()), "rrelu_with_noise: noise of shape ", noise.sizes(),
                " for input of shape ", self.sizes());
    at::Tensor slopes = at::empty(self.sizes(), self.options()).uniform_(lo, hi, gen);
    // noise = 1 where self >= 0 (those elements pass through), else the slope.
    at::Tensor n = elementwise("rrelu_with_noise.noise", {self, slopes}, compute, noise.scalar_type(),
                               [](ir::Graph& g, const std::vector<ir::Value>& v) {
                                 const ir::Type& ty = g.type(v[0]);
                                 ir::Value pos = ir::compare(g, v[0], ir::full(g, ty.dtype, 0, ty.shape),
                                                             ir::Compare::GE);
                                 return ir::select(g, pos, ir::full(g, ty.dtype, 1, ty.shape), v[1]);
                               });
    noise.copy_(n);
    return elementwise(name, {self, noise}, compute, t,
                       [](ir::Graph& g, const std::vector<ir::Value>& v) {
                         return ir::binary(g, ir::Op::Multiply, v[0], v[1]);
                       },
                       out, inplace);
  }
  return elementwise(name, {self, scalar_operand((lo + hi) / 2)}, compute, t,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       const ir::Type& ty = g.type(v[0]);
                       ir::Value pos = ir::compare(g, v[0], ir::full(g, ty.dtype, 0, ty.shape), ir::Compare::GE);
                       return ir::select(g, pos, v[0], ir::binary(g, ir::Op::Multiply, v[0], v[1]));
                     },
                     out, inplace);
}
at::Tensor rrelu_with_noise(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                            const c10::Scalar& upper, bool training, std::optional<at::Generator> gen) {
  return rrelu_op("rrelu_with_noise", self, noise, lower, upper, training, gen, nullptr, false);
}
at::Tensor& rrelu_with_noise_inplace(at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                                     const c10::Scalar& upper, bool training, std::optional<at::Generator> gen) {
  rrelu_op("rrelu_with_noise_", self, noise, lower, upper, training, gen, &self, true);
  return self;
}
at::Tensor& rrelu_with_noise_out(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                                 const c10::Scalar& upper, bool training, std::optional<at::Generator> gen,
                                 at::Tensor& out) {
  rrelu_op("rrelu_with_noise.out", self, noise, lower, upper, training, gen, &out, false);
  return out;
}

// ------------------------------------------------------------ huber, smooth L1, margin losses

// huber_loss and smooth_l1_loss, and their backwards.
at::Tensor huber_loss(Overload o, const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  return loss_op(variant(o).c_str(), Loss::Huber, self, target, std::nullopt, reduction, o.out, delta);
}
at::Tensor huber_loss_backward(Overload o, const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                               int64_t reduction, double delta) {
  return loss_backward_op(variant(o).c_str(), Loss::Huber, grad, self, target, std::nullopt, reduction, o.out, delta);
}
at::Tensor smooth_l1_loss(Overload o, const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                          double beta) {
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  return loss_op(variant(o).c_str(), Loss::SmoothL1, self, target, std::nullopt, reduction, o.out, beta);
}
at::Tensor smooth_l1_loss_backward(Overload o, const at::Tensor& grad, const at::Tensor& self,
                                   const at::Tensor& target, int64_t reduction, double beta) {
  return loss_backward_op(variant(o).c_str(), Loss::SmoothL1, grad, self, target, std::nullopt, reduction, o.out,
                          beta);
}

// ATen's shape rules of multi_margin_loss: returns (frames, classes).
std::pair<int64_t, int64_t> multi_margin_shape(const at::Tensor& self, const at::Tensor& target,
                                               const OptTensor& weight) {
  int64_t nd = self.dim();
  TORCH_CHECK((nd == 2 && self.size(1) != 0) || (nd == 1 && self.size(0) != 0) || nd == 0,
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  int64_t n = nd <= 1 ? 1 : self.size(0), c = nd == 0 ? 1 : self.size(nd - 1);
  TORCH_CHECK(target.dim() <= 1 && target.numel() == n, "inconsistent target size, expected ", n, " but got ",
              target.sizes());
  if (defined(weight))
    TORCH_CHECK(weight->dim() <= 1 && weight->numel() == c, "inconsistent weight size, expected ", c, " but got ",
                weight->sizes());
  return {n, c};
}
at::Tensor multi_margin_op(const char* name, const at::Tensor& self, const at::Tensor& target, const c10::Scalar& p_,
                           const c10::Scalar& margin, const OptTensor& weight, int64_t reduction, at::Tensor* out) {
  int64_t pw = p_.toLong();
  TORCH_CHECK(pw == 1 || pw == 2, "only p == 1 and p == 2 supported");
  check_floating("multi_margin_loss_cpu_kernel", self);
  auto [n, c] = multi_margin_shape(self, target, weight);
  Reduction red = reduction_of(reduction);
  c10::DimVector shape;
  if (red == Reduction::None && target.dim() > 0) shape.push_back(n);
  c10::DeviceGuard guard(self.device());
  at::Tensor output = output_for(name, out, self, shape, self.scalar_type());
  if (n == 0) return red == Reduction::Mean ? output.fill_(NAN) : output.zero_();
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  ir::Value x = ir::reshape(g, p.read(self), {n, c});
  ir::Value t = ir::reshape(g, p.read(target), {n});
  OptValue w;
  if (defined(weight)) w = ir::reshape(g, p.read(*weight), {c});
  p.write(output, ir::reshape(g, lowering::multi_margin_loss(g, x, t, pw, margin.to<double>(), w, red,
                                                             ir_of(self.scalar_type())),
                              to_shape(shape)));
  p.run();
  return output;
}
at::Tensor multi_margin_loss(const at::Tensor& self, const at::Tensor& target, const c10::Scalar& p,
                             const c10::Scalar& margin, const OptTensor& weight, int64_t reduction) {
  return multi_margin_op("multi_margin_loss", self, target, p, margin, weight, reduction, nullptr);
}
at::Tensor& multi_margin_loss_out(const at::Tensor& self, const at::Tensor& target, const c10::Scalar& p,
                                  const c10::Scalar& margin, const OptTensor& weight, int64_t reduction,
                                  at::Tensor& out) {
  multi_margin_op("multi_margin_loss.out", self, target, p, margin, weight, reduction, &out);
  return out;
}
// A margin loss's gradient for self: `build` gives it as [n, c]; it lands
// in self's shape and dtype (nothing runs for an empty self).
template <typename Build>
at::Tensor margin_loss_input_grad(const char* name, at::Tensor* out, const at::Tensor& self, Build build) {
  c10::DeviceGuard guard(self.device());
  at::Tensor gi = output_for(name, out, self, self.sizes(), self.scalar_type());
  if (gi.numel() == 0) return gi;
  Program p(name, self.device());
  ir::Value r = build(p, p.graph());
  p.write(gi, ir::reshape(p.graph(), r, to_shape(self.sizes())));
  p.run();
  return gi;
}
at::Tensor multi_margin_backward_op(const char* name, const at::Tensor& grad, const at::Tensor& self,
                                    const at::Tensor& target, const c10::Scalar& p_, const c10::Scalar& margin,
                                    const OptTensor& weight, int64_t reduction, at::Tensor* out) {
  int64_t pw = p_.toLong();
  TORCH_CHECK(pw == 1 || pw == 2, "only p == 1 and p == 2 supported");
  auto [n, c] = multi_margin_shape(self, target, weight);
  Reduction red = reduction_of(reduction);
  return margin_loss_input_grad(name, out, self, [&](Program& p, ir::Graph& g) {
    ir::Value x = ir::reshape(g, p.read(self), {n, c});
    ir::Value t = ir::reshape(g, p.read(target), {n});
    ir::Value gv = ir::reshape(g, p.read(grad), red == Reduction::None ? ir::Shape{n} : ir::Shape{});
    OptValue w;
    if (defined(weight)) w = ir::reshape(g, p.read(*weight), {c});
    return lowering::multi_margin_loss_backward(g, gv, x, t, pw, margin.to<double>(), w, red,
                                                ir_of(self.scalar_type()));
  });
}
at::Tensor multi_margin_loss_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                      const c10::Scalar& p, const c10::Scalar& margin, const OptTensor& weight,
                                      int64_t reduction) {
  return multi_margin_backward_op("multi_margin_loss_backward", grad, self, target, p, margin, weight, reduction,
                                  nullptr);
}
at::Tensor& multi_margin_loss_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                           const c10::Scalar& p, const c10::Scalar& margin, const OptTensor& weight,
                                           int64_t reduction, at::Tensor& grad_input) {
  multi_margin_backward_op("multi_margin_loss_backward.grad_input", grad, self, target, p, margin, weight, reduction,
                           &grad_input);
  return grad_input;
}

std::pair<int64_t, int64_t> multilabel_shape(const at::Tensor& self, const at::Tensor& target) {
  int64_t nd = self.dim();
  TORCH_CHECK((nd == 2 && self.size(1) != 0) || (nd == 1 && self.size(0) != 0) || nd == 0,
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  if (nd <= 1) {
    int64_t c = nd == 0 ? 1 : self.size(0);
    TORCH_CHECK(target.dim() <= 1 && target.numel() == c, "inconsistent target size: ", target.sizes(),
                " for input of size: ", self.sizes());
    return {1, c};
  }
  TORCH_CHECK(target.dim() == 2 && target.size(0) == self.size(0) && target.size(1) == self.size(1),
              "inconsistent target size: ", target.sizes(), " for input of size: ", self.sizes());
  return {self.size(0), self.size(1)};
}
std::tuple<at::Tensor, at::Tensor> multilabel_forward_op(const char* name, const at::Tensor& self,
                                                         const at::Tensor& target, int64_t reduction, at::Tensor* out,
                                                         at::Tensor* is_target) {
  check_floating("multilabel_margin_loss_forward_out_frame", self);
  TORCH_CHECK(target.scalar_type() == c10::kLong, "expected target of dtype Long, got ", target.scalar_type());
  auto [n, c] = multilabel_shape(self, target);
  Reduction red = reduction_of(reduction);
  c10::DimVector shape;
  if (red == Reduction::None && target.dim() > 1) shape.push_back(n);
  c10::DeviceGuard guard(self.device());
  at::Tensor output = output_for(name, out, self, shape, self.scalar_type());
  at::Tensor targets = output_for(name, is_target, self, target.sizes(), self.scalar_type());
  if (n == 0) {
    targets.zero_();
    return {red == Reduction::Mean ? output.fill_(NAN) : output.zero_(), targets};
  }
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  lowering::MultilabelForward f = lowering::multilabel_margin_loss(
      g, ir::reshape(g, p.read(self), {n, c}), ir::reshape(g, p.read(target), {n, c}), red, ir_of(self.scalar_type()));
  p.write(output, ir::reshape(g, f.output, to_shape(shape)));
  p.write(targets, ir::reshape(g, f.is_target, to_shape(target.sizes())));
  p.run();
  return {output, targets};
}
std::tuple<at::Tensor, at::Tensor> multilabel_margin_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                                  int64_t reduction) {
  return multilabel_forward_op("multilabel_margin_loss_forward", self, target, reduction, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&> multilabel_margin_loss_forward_out(const at::Tensor& self,
                                                                        const at::Tensor& target, int64_t reduction,
                                                                        at::Tensor& output, at::Tensor& is_target) {
  multilabel_forward_op("multilabel_margin_loss_forward.output", self, target, reduction, &output, &is_target);
  return {output, is_target};
}
at::Tensor multilabel_backward_op(const char* name, const at::Tensor& grad, const at::Tensor& self,
                                  const at::Tensor& target, int64_t reduction, at::Tensor* out) {
  auto [n, c] = multilabel_shape(self, target);
  Reduction red = reduction_of(reduction);
  return margin_loss_input_grad(name, out, self, [&](Program& p, ir::Graph& g) {
    ir::Value gv = ir::reshape(g, p.read(grad), red == Reduction::None ? ir::Shape{n} : ir::Shape{});
    return lowering::multilabel_margin_loss_backward(g, gv, ir::reshape(g, p.read(self), {n, c}),
                                                     ir::reshape(g, p.read(target), {n, c}), red,
                                                     ir_of(self.scalar_type()));
  });
}
at::Tensor multilabel_margin_loss_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                           int64_t reduction, const at::Tensor& is_target) {
  return multilabel_backward_op("multilabel_margin_loss_backward", grad, self, target, reduction, nullptr);
}
at::Tensor& multilabel_margin_loss_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                                const at::Tensor& target, int64_t reduction,
                                                const at::Tensor& is_target, at::Tensor& grad_input) {
  multilabel_backward_op("multilabel_margin_loss_backward.grad_input", grad, self, target, reduction, &grad_input);
  return grad_input;
}

// ------------------------------------------------------------ embedding_bag

using Tensor4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

lowering::BagMode bag_mode(int64_t mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "embedding_bag: unknown mode ", mode);
  return static_cast<lowering::BagMode>(mode);
}

void check_bag_indices(const at::Tensor& indices, const at::Tensor& offsets) {
  for (const at::Tensor* t : {&indices, &offsets})
    TORCH_CHECK(t->scalar_type() == c10::kLong || t->scalar_type() == c10::kInt,
                "embedding_bag: expected indices and offsets of dtype Long or Int, but got ", t->scalar_type());
  TORCH_CHECK(indices.scalar_type() == offsets.scalar_type(), "embedding_bag: expected indices (",
              indices.scalar_type(), ") and offsets (", offsets.scalar_type(), ") to have the same dtype");
  TORCH_CHECK(indices.dim() == 1, "embedding_bag: expected 1-D indices, got ", indices.sizes());
  TORCH_CHECK(offsets.dim() == 1, "embedding_bag: expected 1-D offsets, got ", offsets.sizes());
}

Tensor4 embedding_bag_op(const char* name, const at::Tensor& weight, const at::Tensor& indices,
                         const at::Tensor& offsets, int64_t mode, const OptTensor& psw, bool include_last_offset,
                         int64_t padding_idx) {
  lowering::BagMode m = bag_mode(mode);
  check_bag_indices(indices, offsets);
  TORCH_CHECK(weight.dim() == 2, "embedding_bag: expected a 2-D weight, got ", weight.sizes());
  TORCH_CHECK(c10::isFloatingType(weight.scalar_type()), "embedding_bag: expected a floating weight, got ",
              weight.scalar_type());
  if (defined(psw)) {
    TORCH_CHECK(m == lowering::BagMode::Sum, "embedding_bag: per_sample_weights was not None. per_sample_weights is "
                "only supported for mode='sum' (got mode='", m == lowering::BagMode::Mean ? "mean" : "max", "')");
    TORCH_CHECK(psw->dim() == 1 && psw->numel() == indices.numel(),
                "embedding_bag: expected per_sample_weights to be 1-D with as many elements as indices, got ",
                psw->sizes());
  }
  int64_t bags = offsets.size(0) - (include_last_offset ? 1 : 0);
  TORCH_CHECK(bags >= 0, "embedding_bag: include_last_offset needs at least one offset");
  int64_t d = weight.size(1), l = indices.size(0);
  c10::DeviceGuard guard(weight.device());
  at::TensorOptions longs = weight.options().dtype(c10::kLong);
  at::Tensor output = at::empty({bags, d}, weight.options());
  at::Tensor offset2bag = at::empty({l}, longs);
  at::Tensor bag_size = at::empty({bags}, longs);
  at::Tensor max_indices = m == lowering::BagMode::Max ? at::empty({bags, d}, longs) : at::empty({bags}, longs);
  if (bags == 0) return {output, offset2bag, bag_size, max_indices};
  if (l == 0 || d == 0) {
    output.zero_();
    bag_size.zero_();
    max_indices.fill_(m == lowering::BagMode::Max ? -1 : 0);
    return {output, offset2bag, bag_size, max_indices};
  }
  Program p(name, weight.device());
  ir::Graph& g = p.graph();
  OptValue w;
  if (defined(psw)) w = p.read(*psw);
  lowering::BagForward f = lowering::embedding_bag(g, p.read(weight), p.read(indices), p.read(offsets), bags, m, w,
                                                   padding_idx, ir_of(weight.scalar_type()));
  p.write(output, f.output);
  p.write(offset2bag, f.offset2bag);
  p.write(bag_size, f.bag_size);
  p.write(max_indices, f.max_indices);
  p.run();
  return {output, offset2bag, bag_size, max_indices};
}
Tensor4 embedding_bag_forward_only(const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
                                   bool scale_grad_by_freq, int64_t mode, bool sparse, const OptTensor& psw,
                                   bool include_last_offset, int64_t padding_idx) {
  return embedding_bag_op("_embedding_bag_forward_only", weight, indices, offsets, mode, psw, include_last_offset,
                          padding_idx);
}
Tensor4 embedding_bag(const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
                      bool scale_grad_by_freq, int64_t mode, bool sparse, const OptTensor& psw,
                      bool include_last_offset, int64_t padding_idx) {
  return embedding_bag_op("_embedding_bag", weight, indices, offsets, mode, psw, include_last_offset, padding_idx);
}
at::Tensor embedding_bag_dense_backward(const at::Tensor& grad, const at::Tensor& indices,
                                        const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                        const at::Tensor& max_indices, c10::SymInt num_weights_,
                                        bool scale_grad_by_freq, int64_t mode, const OptTensor& psw,
                                        int64_t padding_idx) {
  lowering::BagMode m = bag_mode(mode);
  int64_t num_weights = num_weights_.expect_int();
  TORCH_CHECK(grad.dim() == 2, "embedding_bag_backward: expected a 2-D grad, got ", grad.sizes());
  c10::DeviceGuard guard(grad.device());
  at::Tensor gw = at::empty({num_weights, grad.size(1)}, grad.options());
  if (gw.numel() == 0) return gw;
  if (indices.numel() == 0 || grad.numel() == 0) return gw.zero_();
  Program p("_embedding_bag_dense_backward", grad.device());
  ir::Graph& g = p.graph();
  OptValue w;
  if (defined(psw)) w = p.read(*psw);
  p.write(gw, lowering::embedding_bag_backward(g, p.read(grad), p.read(indices), p.read(offset2bag), p.read(bag_size),
                                               p.read(max_indices), num_weights, scale_grad_by_freq, m, w,
                                               padding_idx, ir_of(grad.scalar_type())));
  p.run();
  return gw;
}
at::Tensor embedding_bag_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offsets,
                                  const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                  const at::Tensor& max_indices, c10::SymInt num_weights, bool scale_grad_by_freq,
                                  int64_t mode, bool sparse, const OptTensor& psw, int64_t padding_idx) {
  TORCH_CHECK(!sparse, "embedding_bag: sparse gradients are not supported on tpu");
  return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_indices, num_weights,
                                      scale_grad_by_freq, mode, psw, padding_idx);
}
at::Tensor embedding_bag_per_sample_weights_backward(const at::Tensor& grad, const at::Tensor& weight,
                                                     const at::Tensor& indices, const at::Tensor& offsets,
                                                     const at::Tensor& offset2bag, int64_t mode,
                                                     int64_t padding_idx) {
  TORCH_CHECK(bag_mode(mode) == lowering::BagMode::Sum,
              "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  c10::DeviceGuard guard(grad.device());
  at::Tensor r = at::empty({indices.numel()}, grad.options());
  if (r.numel() == 0) return r;
  if (grad.numel() == 0) return r.zero_();
  Program p("_embedding_bag_per_sample_weights_backward", grad.device());
  p.write(r, lowering::embedding_bag_per_sample_weights_backward(p.graph(), p.read(grad), p.read(weight),
                                                                 p.read(indices), p.read(offset2bag), padding_idx,
                                                                 ir_of(grad.scalar_type())));
  p.run();
  return r;
}

// ------------------------------------------------------------ batch norm with update, embedding renorm

using Tensor4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The reserve tensor is cuDNN's workspace; other backends return an empty byte tensor.
at::Tensor empty_reserve(const at::Tensor& input) { return at::empty({0}, input.options().dtype(c10::kByte)); }

Tensor4 batch_norm_with_update(const at::Tensor& input, const OptTensor& weight, const OptTensor& bias,
                               at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps) {
  auto [o, sm, si] = batch_norm_op("_batch_norm_with_update", input, weight, bias, running_mean, running_var, true,
                                   momentum, eps, nullptr, nullptr, nullptr);
  return {o, sm, si, empty_reserve(input)};
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> batch_norm_with_update_out(
    const at::Tensor& input, const OptTensor& weight, const OptTensor& bias, at::Tensor& running_mean,
    at::Tensor& running_var, double momentum, double eps, at::Tensor& out, at::Tensor& save_mean,
    at::Tensor& save_invstd, at::Tensor& reserve) {
  batch_norm_op("_batch_norm_with_update.out", input, weight, bias, running_mean, running_var, true, momentum, eps,
                &out, &save_mean, &save_invstd);
  reserve.resize_({0});
  return {out, save_mean, save_invstd, reserve};
}

// Evaluation with the running statistics. ATen's composite kernel calls the
// CPU batch norm directly, so every backend registers its own.
Tensor4 batch_norm_no_update(const at::Tensor& input, const OptTensor& weight, const OptTensor& bias,
                             const OptTensor& running_mean, const OptTensor& running_var, double momentum,
                             double eps) {
  auto [o, sm, si] = batch_norm_op("_batch_norm_no_update", input, weight, bias, running_mean, running_var, false,
                                   momentum, eps, nullptr, nullptr, nullptr);
  return {o, sm, si, empty_reserve(input)};
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> batch_norm_no_update_out(
    const at::Tensor& input, const OptTensor& weight, const OptTensor& bias, const OptTensor& running_mean,
    const OptTensor& running_var, double momentum, double eps, at::Tensor& out, at::Tensor& save_mean,
    at::Tensor& save_invstd, at::Tensor& reserve) {
  batch_norm_op("_batch_norm_no_update.out", input, weight, bias, running_mean, running_var, false, momentum, eps,
                &out, &save_mean, &save_invstd);
  reserve.resize_({0});
  return {out, save_mean, save_invstd, reserve};
}

// The backward of the two above: `update` says whether the batch statistics were used.
Tensor3 batch_norm_backward_new(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight,
                                const OptTensor& running_mean, const OptTensor& running_var,
                                const OptTensor& save_mean, const OptTensor& save_var, bool update, double eps,
                                std::array<bool, 3> mask, const at::Tensor& reserve) {
  return batch_norm_backward(grad, input, weight, running_mean, running_var, save_mean, save_var, update, eps, mask);
}

at::Tensor& embedding_renorm_(at::Tensor& self, const at::Tensor& indices, double max_norm, double norm_type) {
  at::TensorArg self_arg(self, "self", 1), indices_arg(indices, "indices", 2);
  at::checkDim("embedding_renorm_", self_arg, 2);
  at::checkScalarTypes("embedding_renorm_", indices_arg, {c10::kLong, c10::kInt});
  if (indices.numel() == 0 || self.numel() == 0) return self;
  c10::DeviceGuard guard(self.device());
  Program p("embedding_renorm_", self.device());
  ir::Graph& g = p.graph();
  ir::Value idx = ir::convert(g, ir::reshape(g, p.read(indices), {indices.numel()}), ir::DType::S64);
  ir::DType acc = lowering::accumulate_dtype(ir_of(self.scalar_type()));
  p.write(self, lowering::embedding_renorm(g, p.read(self), idx, p.scalar(max_norm, acc), norm_type));
  p.run();
  return self;
}

// ------------------------------------------------------------ CTC loss

// Checks as ATen's CPU kernel; returns the targets as a [N, max target length]
// tensor (gathered from concatenated 1-D targets) and the lengths as device tensors.
struct CtcArgs {
  at::Tensor targets, input_lengths, target_lengths;
};
CtcArgs ctc_args(const at::Tensor& log_probs, const at::Tensor& targets, at::IntArrayRef input_lengths,
                 at::IntArrayRef target_lengths, int64_t blank) {
  TORCH_CHECK(log_probs.dim() == 3, "ctc_loss: expected log_probs to be 3-D (T, N, C), but got ", log_probs.dim(),
              "-D");
  TORCH_CHECK(at::isFloatingType(log_probs.scalar_type()), "ctc_loss: expected floating log_probs, got ",
              log_probs.scalar_type());
  int64_t t = log_probs.size(0), n = log_probs.size(1), c = log_probs.size(2);
  TORCH_CHECK(blank < c && blank >= 0, "blank must be in label range");
  TORCH_CHECK(static_cast<int64_t>(input_lengths.size()) == n, "input_lengths must be of size batch_size");
  TORCH_CHECK(static_cast<int64_t>(target_lengths.size()) == n, "target_lengths must be of size batch_size");
  int64_t max_target = 0, total = 0;
  for (int64_t b = 0; b < n; ++b) {
    TORCH_CHECK(input_lengths[b] >= 0 && input_lengths[b] <= t, "Expected input_lengths to have value at most ", t,
                ", but got value ", input_lengths[b], " (while checking arguments for ctc_loss_cpu)");
    TORCH_CHECK(target_lengths[b] >= 0, "Expected target_lengths to be non-negative");
    max_target = std::max(max_target, target_lengths[b]);
    total += target_lengths[b];
  }
  CtcArgs r;
  // Lengths are program inputs, not constants: changing lengths do not recompile.
  auto upload = [&](at::IntArrayRef v) { return at::tensor(v.vec(), at::kLong).to(log_probs.device()); };
  r.input_lengths = upload(input_lengths);
  r.target_lengths = upload(target_lengths);
  if (targets.dim() == 1) {
    TORCH_CHECK(targets.size(0) >= total, "Expected tensor to have size at least ", total, " at dimension 0, but got "
                "size ", targets.size(0), " for argument #2 'targets' (while checking arguments for ctc_loss_cpu)");
    std::vector<int64_t> idx(n * max_target, 0);
    int64_t offset = 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t j = 0; j < max_target; ++j) idx[b * max_target + j] = offset + std::min(j, std::max<int64_t>(target_lengths[b] - 1, 0));
      offset += target_lengths[b];
    }
    at::Tensor index = at::tensor(idx, at::kLong).to(log_probs.device());
    r.targets = total == 0 ? at::zeros({n, max_target}, targets.options())
                           : targets.index_select(0, index).view({n, max_target});
  } else {
    TORCH_CHECK(targets.dim() == 2 && targets.size(0) == n, "Expected targets of size [", n, ", *], but got ",
                targets.sizes());
    TORCH_CHECK(targets.size(1) >= max_target, "Expected tensor to have size at least ", max_target,
                " at dimension 1, but got size ", targets.size(1),
                " for argument #2 'targets' (while checking arguments for ctc_loss_cpu)");
    r.targets = targets.narrow(1, 0, max_target);
  }
  return r;
}

std::tuple<at::Tensor, at::Tensor> ctc_loss(const at::Tensor& log_probs, const at::Tensor& targets,
                                            at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                                            int64_t blank, bool zero_infinity) {
  c10::DeviceGuard guard(log_probs.device());
  CtcArgs a = ctc_args(log_probs, targets, input_lengths, target_lengths, blank);
  int64_t t = log_probs.size(0), n = log_probs.size(1);
  at::Tensor nll = new_tensor(log_probs, {n}, log_probs.scalar_type());
  at::Tensor la = new_tensor(log_probs, {n, t, 2 * a.targets.size(1) + 1}, log_probs.scalar_type());
  if (n == 0) return {nll, la};
  Program p("_ctc_loss", log_probs.device());
  ir::Graph& g = p.graph();
  ir::DType acc = lowering::accumulate_dtype(ir_of(log_probs.scalar_type()));
  if (t == 0) {  // no input: zero loss for empty targets, else infinite
    p.write(nll, ir::select(g, ir::compare(g, p.read(a.target_lengths), ir::full(g, ir::DType::S64, 0, {n}),
                                           ir::Compare::EQ),
                            ir::full(g, acc, 0, {n}), ir::full(g, acc, INFINITY, {n})));
    p.run();
    return {nll, la};
  }
  lowering::CtcForward f = lowering::ctc_loss(g, ir::convert(g, p.read(log_probs), acc), p.read(a.targets),
                                              p.read(a.input_lengths), p.read(a.target_lengths), blank);
  p.write(nll, f.nll);
  p.write(la, f.log_alpha);
  p.run();
  return {nll, la};
}

std::vector<int64_t> host_lengths(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

std::tuple<at::Tensor, at::Tensor> ctc_loss_tensor(const at::Tensor& log_probs, const at::Tensor& targets,
                                                   const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                                   int64_t blank, bool zero_infinity) {
  return ctc_loss(log_probs, targets, host_lengths(input_lengths), host_lengths(target_lengths), blank, zero_infinity);
}

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                             at::IntArrayRef input_lengths, at::IntArrayRef target_lengths, const at::Tensor& nll,
                             const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  c10::DeviceGuard guard(log_probs.device());
  CtcArgs a = ctc_args(log_probs, targets, input_lengths, target_lengths, blank);
  at::Tensor out = new_tensor(log_probs, log_probs.sizes(), log_probs.scalar_type());
  if (out.numel() == 0) return out;
  Program p("_ctc_loss_backward", log_probs.device());
  ir::Graph& g = p.graph();
  ir::DType acc = lowering::accumulate_dtype(ir_of(log_probs.scalar_type()));
  auto rd = [&](const at::Tensor& x) { return ir::convert(g, p.read(x), acc); };
  p.write(out, lowering::ctc_loss_backward(g, rd(grad), rd(log_probs), p.read(a.targets), p.read(a.input_lengths),
                                           p.read(a.target_lengths), rd(nll), rd(log_alpha), blank, zero_infinity));
  p.run();
  return out;
}

at::Tensor ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                    const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                    const at::Tensor& nll, const at::Tensor& log_alpha, int64_t blank,
                                    bool zero_infinity) {
  return ctc_loss_backward(grad, log_probs, targets, host_lengths(input_lengths), host_lengths(target_lengths), nll,
                           log_alpha, blank, zero_infinity);
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
  m.impl("_log_softmax_backward_data.out",
         out_overload<softmax_backward_op<true>, "_log_softmax_backward_data.out">);
  m.impl("native_layer_norm", layer_norm);
  m.impl("native_layer_norm_backward", layer_norm_backward);
  m.impl("native_group_norm", group_norm);
  m.impl("native_group_norm_backward", group_norm_backward);
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
  impl_variants<mse_loss, "mse_loss">(m, kFunctionalAndOut);
  impl_variants<mse_loss_backward, "mse_loss_backward">(m, kFunctionalAndGradInput);
  impl_variants<bce, "binary_cross_entropy">(m, kFunctionalAndOut);
  impl_variants<bce_backward, "binary_cross_entropy_backward">(m, kFunctionalAndGradInput);
  impl_variants<bce_logits, "binary_cross_entropy_with_logits">(m, kFunctionalAndOut);
  m.impl("hardshrink", hardshrink);
  m.impl("hardshrink.out", hardshrink_out);
  m.impl("hardshrink_backward", hardshrink_backward);
  m.impl("hardshrink_backward.grad_input", hardshrink_backward_out);
  m.impl("softshrink", softshrink);
  m.impl("softshrink.out", softshrink_out);
  m.impl("softshrink_backward", softshrink_backward);
  m.impl("softshrink_backward.grad_input", softshrink_backward_out);
  m.impl("threshold", threshold);
  m.impl("threshold_", threshold_inplace);
  m.impl("threshold.out", threshold_out);
  m.impl("threshold_backward.grad_input", threshold_backward_out);
  m.impl("log_sigmoid_forward", log_sigmoid_forward);
  m.impl("log_sigmoid_forward.output", log_sigmoid_forward_out);
  m.impl("log_sigmoid_backward", log_sigmoid_backward);
  m.impl("log_sigmoid_backward.grad_input", log_sigmoid_backward_out);
  m.impl("_prelu_kernel", prelu_kernel);
  m.impl("_prelu_kernel_backward", prelu_kernel_backward);
  m.impl("_weight_norm_interface", weight_norm_interface);
  m.impl("_weight_norm_interface_backward", weight_norm_interface_backward);
  m.impl("glu", glu);
  m.impl("glu.out", glu_out);
  m.impl("glu_backward", glu_backward);
  m.impl("glu_backward.grad_input", glu_backward_out);
  m.impl("rrelu_with_noise", rrelu_with_noise);
  m.impl("rrelu_with_noise_", rrelu_with_noise_inplace);
  m.impl("rrelu_with_noise.out", rrelu_with_noise_out);
  impl_variants<huber_loss, "huber_loss">(m, kFunctionalAndOut);
  impl_variants<huber_loss_backward, "huber_loss_backward">(m, kFunctionalAndOut);
  impl_variants<smooth_l1_loss, "smooth_l1_loss">(m, kFunctionalAndOut);
  impl_variants<smooth_l1_loss_backward, "smooth_l1_loss_backward">(m, kFunctionalAndGradInput);
  m.impl("multi_margin_loss", multi_margin_loss);
  m.impl("multi_margin_loss.out", multi_margin_loss_out);
  m.impl("multi_margin_loss_backward", multi_margin_loss_backward);
  m.impl("multi_margin_loss_backward.grad_input", multi_margin_loss_backward_out);
  m.impl("multilabel_margin_loss_forward", multilabel_margin_loss_forward);
  m.impl("multilabel_margin_loss_forward.output", multilabel_margin_loss_forward_out);
  m.impl("multilabel_margin_loss_backward", multilabel_margin_loss_backward);
  m.impl("multilabel_margin_loss_backward.grad_input", multilabel_margin_loss_backward_out);
  m.impl("_embedding_bag_forward_only", embedding_bag_forward_only);
  m.impl("_embedding_bag", embedding_bag);
  m.impl("_embedding_bag_dense_backward", embedding_bag_dense_backward);
  m.impl("_embedding_bag_backward", embedding_bag_backward);
  m.impl("_embedding_bag_per_sample_weights_backward", embedding_bag_per_sample_weights_backward);
  m.impl("_batch_norm_with_update", batch_norm_with_update);
  m.impl("_batch_norm_with_update.out", batch_norm_with_update_out);
  m.impl("_batch_norm_no_update", batch_norm_no_update);
  m.impl("_batch_norm_no_update.out", batch_norm_no_update_out);
  m.impl("batch_norm_backward", batch_norm_backward_new);
  m.impl("embedding_renorm_", embedding_renorm_);
  m.impl("_ctc_loss", ctc_loss);
  m.impl("_ctc_loss.Tensor", ctc_loss_tensor);
  m.impl("_ctc_loss_backward", ctc_loss_backward);
  m.impl("_ctc_loss_backward.Tensor", ctc_loss_backward_tensor);
}

}  // namespace tpu::aten
