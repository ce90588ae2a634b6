#include "lowering/nn.h"

#include <cmath>
#include <functional>
#include <limits>

#include "lowering/index.h"
#include "lowering/reduce.h"

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

Value add(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Add, a, b); }
Value sub(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Subtract, a, b); }
Value mul(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Multiply, a, b); }
Value div(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Divide, a, b); }
Value full_like(ir::Graph& g, Value x, double v) { return ir::full(g, g.type(x).dtype, v, g.type(x).shape); }
Value acc_of(ir::Graph& g, Value x) { return ir::convert(g, x, accumulate_dtype(g.type(x).dtype)); }

// x in its accumulation dtype, with that dtype and the shape: where most
// normalisation and loss formulas start. The shape is a copy, because a
// reference into the graph would dangle once the formula adds nodes.
struct Widened {
  Value value;
  DType dtype;
  ir::Shape shape;
};
Widened widened(ir::Graph& g, Value x) {
  Value xa = acc_of(g, x);
  return {xa, g.type(xa).dtype, g.type(xa).shape};
}

ir::Dims dims_from(int64_t first, int64_t rank) {
  ir::Dims d;
  for (int64_t i = first; i < rank; ++i) d.push_back(i);
  return d;
}
ir::Dims dims_except(int64_t skip, int64_t rank) {
  ir::Dims d;
  for (int64_t i = 0; i < rank; ++i)
    if (i != skip) d.push_back(i);
  return d;
}
ir::Dims softmax_dims(ir::Graph& g, Value x, int64_t dim) {
  return g.type(x).rank() == 0 ? ir::Dims{} : ir::Dims{dim};
}

// A per-channel vector [C] (dim 1 of `shape`) broadcast to `shape`, in `dtype`.
Value channel(ir::Graph& g, Value v, const ir::Shape& shape, DType dtype) {
  return ir::broadcast_in_dim(g, ir::convert(g, v, dtype), shape, {1});
}

// x_hat = (x - mean) * invstd, with mean/invstd broadcast from kept dims.
Value normalise(ir::Graph& g, Value x, Value mean, Value invstd, const ir::Dims& dims) {
  const ir::Shape& shape = g.type(x).shape;
  return mul(g, sub(g, x, expand_reduced(g, mean, shape, dims)), expand_reduced(g, invstd, shape, dims));
}

// dx of a normalisation whose statistics are taken over `dims`:
// invstd * (gw - mean(gw) - x_hat * mean(gw * x_hat)).
Value normalisation_input_grad(ir::Graph& g, Value gw, Value x_hat, Value invstd_full, const ir::Dims& dims) {
  const ir::Shape& shape = g.type(gw).shape;
  DType acc = g.type(gw).dtype;
  Value mean_g = expand_reduced(g, mean(g, gw, dims, false, acc, acc), shape, dims);
  Value mean_gx = expand_reduced(g, mean(g, mul(g, gw, x_hat), dims, false, acc, acc), shape, dims);
  return mul(g, invstd_full, sub(g, sub(g, gw, mean_g), mul(g, x_hat, mean_gx)));
}

// The gradients of x_hat * weight + bias, x_hat normalised over `stats` with
// `invstd` (shaped as x_hat without `stats`): the input's, in x_hat's shape
// and dtype, and weight's and bias's, summed over `batch` into param_result.
// `weight_full`: weight broadcast to x_hat's shape; empty without a weight.
NormGrads normalisation_grads(ir::Graph& g, Value ga, Value x_hat, Value invstd, const ir::Dims& stats,
                              const ir::Dims& batch, const std::function<Value()>& weight_full,
                              std::array<bool, 3> mask, DType param_result) {
  DType acc = g.type(x_hat).dtype;
  NormGrads r;
  if (mask[0]) {
    Value gw = weight_full ? mul(g, ga, weight_full()) : ga;
    r.input = normalisation_input_grad(g, gw, x_hat, expand_reduced(g, invstd, g.type(x_hat).shape, stats), stats);
  }
  if (mask[1] && weight_full) r.weight = sum(g, mul(g, ga, x_hat), batch, false, acc, param_result);
  if (mask[2]) r.bias = sum(g, ga, batch, false, acc, param_result);
  return r;
}

}  // namespace

// ------------------------------------------------------------ softmax

Value softmax(ir::Graph& g, Value x, int64_t dim, DType result) {
  ir::Dims dims = softmax_dims(g, x, dim);
  Value xa = acc_of(g, ir::convert(g, x, result));
  const ir::Shape& shape = g.type(xa).shape;
  Value e = ir::unary(g, ir::Op::Exponential, sub(g, xa, expand_reduced(g, shift_max(g, xa, dims), shape, dims)));
  DType acc = g.type(e).dtype;
  Value s = sum(g, e, dims, false, acc, acc);
  return ir::convert(g, div(g, e, expand_reduced(g, s, shape, dims)), result);
}

Value log_softmax(ir::Graph& g, Value x, int64_t dim, DType result) {
  ir::Dims dims = softmax_dims(g, x, dim);
  Value xa = acc_of(g, ir::convert(g, x, result));
  const ir::Shape& shape = g.type(xa).shape;
  Value shifted = sub(g, xa, expand_reduced(g, shift_max(g, xa, dims), shape, dims));
  DType acc = g.type(xa).dtype;
  Value s = sum(g, ir::unary(g, ir::Op::Exponential, shifted), dims, false, acc, acc);
  Value lse = ir::unary(g, ir::Op::Log, s);
  return ir::convert(g, sub(g, shifted, expand_reduced(g, lse, shape, dims)), result);
}

Value softmax_backward(ir::Graph& g, Value grad, Value output, int64_t dim, DType result) {
  ir::Dims dims = softmax_dims(g, output, dim);
  Value ga = acc_of(g, grad), oa = ir::convert(g, output, g.type(ga).dtype);
  DType acc = g.type(ga).dtype;
  const ir::Shape& shape = g.type(ga).shape;
  Value s = sum(g, mul(g, ga, oa), dims, false, acc, acc);
  return ir::convert(g, mul(g, oa, sub(g, ga, expand_reduced(g, s, shape, dims))), result);
}

Value log_softmax_backward(ir::Graph& g, Value grad, Value output, int64_t dim, DType result) {
  ir::Dims dims = softmax_dims(g, output, dim);
  Value ga = acc_of(g, grad), oa = ir::convert(g, output, g.type(ga).dtype);
  DType acc = g.type(ga).dtype;
  const ir::Shape& shape = g.type(ga).shape;
  Value s = sum(g, ga, dims, false, acc, acc);
  Value p = ir::unary(g, ir::Op::Exponential, oa);
  return ir::convert(g, sub(g, ga, mul(g, p, expand_reduced(g, s, shape, dims))), result);
}

// ------------------------------------------------------------ normalisation

namespace {

NormForward normalise_over(ir::Graph& g, Value x, const ir::Dims& dims, double eps) {
  Value xa = acc_of(g, x);
  DType acc = g.type(xa).dtype;
  Moments m = moments(g, xa, dims, true, 0, acc);
  Value invstd = ir::unary(g, ir::Op::Rsqrt, add(g, m.var, full_like(g, m.var, eps)));
  return {normalise(g, xa, m.mean, invstd, dims), m.mean, invstd, m.var};
}

}  // namespace

NormForward layer_norm(ir::Graph& g, Value x, int64_t axis, OptValue weight, OptValue bias, double eps,
                       DType result) {
  const ir::Shape shape = g.type(x).shape;
  ir::Dims dims = dims_from(axis, static_cast<int64_t>(shape.size()));
  NormForward f = normalise_over(g, x, dims, eps);
  DType acc = g.type(f.out).dtype;
  // weight/bias have the normalised shape: they map onto the trailing dims.
  if (weight) f.out = mul(g, f.out, ir::broadcast_in_dim(g, ir::convert(g, *weight, acc), shape, dims));
  if (bias) f.out = add(g, f.out, ir::broadcast_in_dim(g, ir::convert(g, *bias, acc), shape, dims));
  f.out = ir::convert(g, f.out, result);
  return f;
}

NormForward group_norm(ir::Graph& g, Value x, int64_t groups, OptValue weight, OptValue bias, double eps,
                       DType result) {
  const ir::Shape shape = g.type(x).shape;
  int64_t n = shape[0];
  ir::Shape stats{n, groups};
  NormForward f = normalise_over(g, ir::reshape(g, x, {n, groups, ir::numel(shape) / (n * groups)}), {2}, eps);
  DType acc = g.type(f.out).dtype;
  f.out = ir::reshape(g, f.out, shape);
  if (weight) f.out = mul(g, f.out, channel(g, *weight, shape, acc));
  if (bias) f.out = add(g, f.out, channel(g, *bias, shape, acc));
  f.out = ir::convert(g, f.out, result);
  f.mean = ir::reshape(g, f.mean, stats);
  f.invstd = ir::reshape(g, f.invstd, stats);
  f.var = ir::reshape(g, f.var, stats);
  return f;
}

NormForward batch_norm_train(ir::Graph& g, Value x, OptValue weight, OptValue bias, double eps, DType result) {
  const ir::Shape shape = g.type(x).shape;
  ir::Dims dims = dims_except(1, static_cast<int64_t>(shape.size()));
  NormForward f = normalise_over(g, x, dims, eps);
  DType acc = g.type(f.out).dtype;
  if (weight) f.out = mul(g, f.out, channel(g, *weight, shape, acc));
  if (bias) f.out = add(g, f.out, channel(g, *bias, shape, acc));
  f.out = ir::convert(g, f.out, result);
  return f;
}

Value inverse_std(ir::Graph& g, Value var, double eps) {
  Value va = acc_of(g, var);
  return ir::unary(g, ir::Op::Rsqrt, add(g, va, full_like(g, va, eps)));
}

Value batch_norm_eval(ir::Graph& g, Value x, OptValue weight, OptValue bias, Value mean, Value var, double eps,
                      DType result) {
  auto [xa, acc, shape] = widened(g, x);
  Value invstd = inverse_std(g, var, eps);
  Value out = mul(g, sub(g, xa, channel(g, mean, shape, acc)), channel(g, invstd, shape, acc));
  if (weight) out = mul(g, out, channel(g, *weight, shape, acc));
  if (bias) out = add(g, out, channel(g, *bias, shape, acc));
  return ir::convert(g, out, result);
}

NormGrads layer_norm_backward(ir::Graph& g, Value grad, Value x, int64_t axis, Value mean, Value rstd,
                              OptValue weight, std::array<bool, 3> mask, DType result, DType param_result) {
  auto [xa, acc, shape] = widened(g, x);
  int64_t rank = static_cast<int64_t>(shape.size());
  ir::Dims dims = dims_from(axis, rank), batch = dims_from(0, axis);
  ir::Shape stat_shape = reduced_shape(shape, dims, false);
  Value mu = ir::reshape(g, ir::convert(g, mean, acc), stat_shape);
  Value rs = ir::reshape(g, ir::convert(g, rstd, acc), stat_shape);
  Value x_hat = normalise(g, xa, mu, rs, dims);
  Value ga = ir::convert(g, grad, acc);
  std::function<Value()> weight_full;
  if (weight) weight_full = [&] { return ir::broadcast_in_dim(g, ir::convert(g, *weight, acc), shape, dims); };
  NormGrads r = normalisation_grads(g, ga, x_hat, rs, dims, batch, weight_full, mask, param_result);
  if (mask[0]) r.input = ir::convert(g, r.input, result);
  return r;
}

NormGrads group_norm_backward(ir::Graph& g, Value grad, Value x, Value mean, Value rstd, OptValue weight,
                              int64_t groups, std::array<bool, 3> mask, DType result, DType param_result) {
  // Viewed as [N, groups, C / groups, HxW]: statistics per (n, group) over the last two dims.
  auto [xa, acc, shape] = widened(g, x);
  int64_t n = shape[0], c = shape[1];
  ir::Shape grouped{n, groups, c / groups, ir::numel(shape) / (n * c)};
  ir::Dims stats{2, 3}, per_channel{0, 3};
  Value rs = ir::reshape(g, ir::convert(g, rstd, acc), {n, groups});
  Value x_hat = normalise(g, ir::reshape(g, xa, grouped), ir::reshape(g, ir::convert(g, mean, acc), {n, groups}), rs,
                          stats);
  Value ga = ir::reshape(g, ir::convert(g, grad, acc), grouped);
  std::function<Value()> weight_full;
  if (weight) {
    weight_full = [&] {
      return ir::broadcast_in_dim(g, ir::reshape(g, ir::convert(g, *weight, acc), {groups, c / groups}), grouped,
                                  {1, 2});
    };
  }
  NormGrads r = normalisation_grads(g, ga, x_hat, rs, stats, per_channel, weight_full, mask, param_result);
  if (mask[0]) r.input = ir::convert(g, ir::reshape(g, r.input, shape), result);
  if (r.weight.valid()) r.weight = ir::reshape(g, r.weight, {c});
  if (mask[2]) r.bias = ir::reshape(g, r.bias, {c});
  return r;
}

NormGrads batch_norm_backward(ir::Graph& g, Value grad, Value x, OptValue weight, Value mean, Value invstd,
                              bool train, std::array<bool, 3> mask, DType result, DType param_result) {
  auto [xa, acc, shape] = widened(g, x);
  ir::Dims dims = dims_except(1, static_cast<int64_t>(shape.size()));
  Value invstd_full = channel(g, invstd, shape, acc);
  Value x_hat = mul(g, sub(g, xa, channel(g, mean, shape, acc)), invstd_full);
  Value ga = ir::convert(g, grad, acc);
  NormGrads r;
  if (mask[0]) {
    Value gw = weight ? mul(g, ga, channel(g, *weight, shape, acc)) : ga;
    // In eval the statistics are constants: only the affine map remains.
    Value dx = train ? normalisation_input_grad(g, gw, x_hat, invstd_full, dims) : mul(g, gw, invstd_full);
    r.input = ir::convert(g, dx, result);
  }
  if (mask[1]) r.weight = sum(g, mul(g, ga, x_hat), dims, false, acc, param_result);
  if (mask[2]) r.bias = sum(g, ga, dims, false, acc, param_result);
  return r;
}

// ------------------------------------------------------------ losses

Value reduce_loss(ir::Graph& g, Value loss, Reduction reduction) {
  DType dtype = g.type(loss).dtype;
  ir::Dims all = reduction_dims({}, g.type(loss).rank());
  switch (reduction) {
    case Reduction::None: return loss;
    case Reduction::Sum: return sum(g, loss, all, false, dtype, dtype);
    case Reduction::Mean: return mean(g, loss, all, false, dtype, dtype);
  }
  return loss;
}

namespace {

// Where target's class sits in input: one-hot along the class dim, the
// class weight of each target (0 for ignored ones).
struct Picked {
  int64_t class_dim;
  ir::Dims target_dims;  // dims of input that target maps onto
  Value onehot;          // pred, input's shape
  Value weight;          // acc dtype, target's shape
  Value valid;           // pred, target's shape: target != ignore_index
};

Picked pick(ir::Graph& g, const ir::Shape& shape, Value target, OptValue weight, int64_t ignore_index, DType acc) {
  Picked p;
  int64_t rank = static_cast<int64_t>(shape.size());
  p.class_dim = rank >= 2 ? 1 : 0;
  p.target_dims = dims_except(p.class_dim, rank);
  Value t = ir::convert(g, target, DType::S64);
  const ir::Shape& tshape = g.type(t).shape;
  // The one-hot compares s32 class indices: TPUs have no native 64-bit integers,
  // and XLA:CPU compares twice as many s32 lanes at once. A target outside
  // [0, classes) becomes -1, which matches no class, as its s64 value did.
  int64_t classes = shape[p.class_dim];
  DType index = classes <= std::numeric_limits<int32_t>::max() ? DType::S32 : DType::S64;
  Value none = ir::full(g, DType::S64, -1, tshape);
  Value class_of = ir::convert(g, ir::select(g, in_range(g, t, classes), t, none), index);
  Value tb = ir::broadcast_in_dim(g, class_of, shape, p.target_dims);
  p.onehot = ir::compare(g, tb, ir::iota(g, index, shape, p.class_dim), ir::Compare::EQ);
  Value w = ir::full(g, acc, 1, tshape);
  if (weight) {
    Value wb = ir::broadcast_in_dim(g, ir::convert(g, *weight, acc), shape, {p.class_dim});
    w = sum(g, ir::select(g, p.onehot, wb, ir::full(g, acc, 0, shape)), {p.class_dim}, false, acc, acc);
  }
  Value valid = ir::compare(g, t, ir::full(g, DType::S64, static_cast<double>(ignore_index), tshape), ir::Compare::NE);
  p.weight = ir::select(g, valid, w, ir::full(g, acc, 0, tshape));
  p.valid = valid;
  return p;
}

}  // namespace

NllForward nll_loss(ir::Graph& g, Value input, Value target, OptValue weight, Reduction reduction,
                    int64_t ignore_index, DType result) {
  auto [xa, acc, shape] = widened(g, input);
  Picked p = pick(g, shape, target, weight, ignore_index, acc);
  // A select, not a product with the one-hot: other classes may hold -inf.
  Value x_t = sum(g, ir::select(g, p.onehot, xa, full_like(g, xa, 0)), {p.class_dim}, false, acc, acc);
  // Ignored targets contribute exactly 0 (never 0 * inf).
  Value loss = ir::select(g, p.valid, ir::unary(g, ir::Op::Negate, mul(g, x_t, p.weight)),
                          full_like(g, p.weight, 0));
  ir::Dims all = reduction_dims({}, g.type(loss).rank());
  Value total = sum(g, p.weight, all, false, acc, acc);
  NllForward f;
  if (reduction == Reduction::None) {
    f.output = loss;
    f.total_weight = ir::constant(g, acc, 0);
  } else {
    f.output = sum(g, loss, all, false, acc, acc);
    if (reduction == Reduction::Mean) f.output = div(g, f.output, total);
    f.total_weight = total;
  }
  f.output = ir::convert(g, f.output, result);
  f.total_weight = ir::convert(g, f.total_weight, result);
  return f;
}

Value nll_loss_backward(ir::Graph& g, Value grad, Value input, Value target, OptValue weight, Reduction reduction,
                        int64_t ignore_index, Value total_weight, DType result) {
  DType acc = accumulate_dtype(g.type(input).dtype);
  const ir::Shape shape = g.type(input).shape;
  Picked p = pick(g, shape, target, weight, ignore_index, acc);
  const ir::Shape& tshape = g.type(p.weight).shape;
  Value ga = ir::convert(g, grad, acc);
  if (reduction != Reduction::None) {
    if (reduction == Reduction::Mean) ga = div(g, ga, ir::convert(g, total_weight, acc));
    ga = ir::broadcast_in_dim(g, ga, tshape, {});
  }
  Value coef = ir::select(g, p.valid, ir::unary(g, ir::Op::Negate, mul(g, ga, p.weight)),
                          full_like(g, p.weight, 0));
  Value coef_full = ir::broadcast_in_dim(g, coef, shape, p.target_dims);
  return ir::convert(g, ir::select(g, p.onehot, coef_full, ir::full(g, acc, 0, shape)), result);
}

Value mse_loss(ir::Graph& g, Value x, Value target, Reduction reduction, DType result) {
  Value xa = acc_of(g, x);
  Value d = sub(g, xa, ir::convert(g, target, g.type(xa).dtype));
  return ir::convert(g, reduce_loss(g, mul(g, d, d), reduction), result);
}

Value mse_loss_backward(ir::Graph& g, Value grad, Value x, Value target, Reduction reduction, DType result) {
  auto [xa, acc, shape] = widened(g, x);
  double norm = reduction == Reduction::Mean ? 2.0 / static_cast<double>(ir::numel(shape)) : 2.0;
  Value d = sub(g, xa, ir::convert(g, target, acc));
  Value ga = ir::broadcast_to(g, ir::convert(g, grad, acc), shape);
  return ir::convert(g, mul(g, mul(g, d, full_like(g, d, norm)), ga), result);
}

Value binary_cross_entropy(ir::Graph& g, Value x, Value target, OptValue weight, Reduction reduction, DType result) {
  Value xa = acc_of(g, x);
  DType acc = g.type(xa).dtype;
  Value t = ir::convert(g, target, acc);
  // ATen clamps the logs at -100 so that x = 0 or 1 gives a finite loss.
  Value floor = full_like(g, xa, -100);
  Value log_x = ir::binary(g, ir::Op::Maximum, ir::unary(g, ir::Op::Log, xa), floor);
  Value log_1mx = ir::binary(g, ir::Op::Maximum,
                             ir::unary(g, ir::Op::LogPlusOne, ir::unary(g, ir::Op::Negate, xa)), floor);
  Value loss = sub(g, mul(g, sub(g, t, full_like(g, t, 1)), log_1mx), mul(g, t, log_x));
  if (weight) loss = mul(g, loss, ir::convert(g, *weight, acc));
  return ir::convert(g, reduce_loss(g, loss, reduction), result);
}

Value binary_cross_entropy_backward(ir::Graph& g, Value grad, Value x, Value target, OptValue weight,
                                    Reduction reduction, DType result) {
  auto [xa, acc, shape] = widened(g, x);
  Value t = ir::convert(g, target, acc);
  Value one = full_like(g, xa, 1);
  Value denom = ir::binary(g, ir::Op::Maximum, mul(g, sub(g, one, xa), xa), full_like(g, xa, 1e-12));
  Value ga = ir::broadcast_to(g, ir::convert(g, grad, acc), shape);
  Value gi = div(g, mul(g, ga, sub(g, xa, t)), denom);
  if (weight) gi = mul(g, gi, ir::convert(g, *weight, acc));
  if (reduction == Reduction::Mean) gi = div(g, gi, full_like(g, gi, static_cast<double>(ir::numel(shape))));
  return ir::convert(g, gi, result);
}

Value binary_cross_entropy_with_logits(ir::Graph& g, Value x, Value target, OptValue weight, OptValue pos_weight,
                                       Reduction reduction, DType result) {
  Value xa = acc_of(g, x);
  DType acc = g.type(xa).dtype;
  Value t = ir::convert(g, target, acc);
  Value one = full_like(g, xa, 1);
  // log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)): no overflow for large |x|.
  Value neg_abs = ir::unary(g, ir::Op::Negate, ir::unary(g, ir::Op::Abs, xa));
  Value log_sig = sub(g, ir::binary(g, ir::Op::Minimum, xa, full_like(g, xa, 0)),
                      ir::unary(g, ir::Op::LogPlusOne, ir::unary(g, ir::Op::Exponential, neg_abs)));
  if (pos_weight) {
    Value pw = ir::convert(g, *pos_weight, acc);
    log_sig = mul(g, add(g, mul(g, sub(g, pw, one), t), one), log_sig);
  }
  Value loss = sub(g, mul(g, sub(g, one, t), xa), log_sig);
  if (weight) loss = mul(g, loss, ir::convert(g, *weight, acc));
  return ir::convert(g, reduce_loss(g, loss, reduction), result);
}

// ------------------------------------------------------------ more activations

namespace {

Value neg(ir::Graph& g, Value x) { return ir::unary(g, ir::Op::Negate, x); }
Value land(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::And, a, b); }
Value lor(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Or, a, b); }
Value lnot(ir::Graph& g, Value a) { return ir::unary(g, ir::Op::Not, a); }
Value cmp(ir::Graph& g, Value a, Value b, ir::Compare c) { return ir::compare(g, a, b, c); }
Value zeros_like(ir::Graph& g, Value x) { return full_like(g, x, 0); }
// -lambd <= x <= lambd (false for NaN).
Value within(ir::Graph& g, Value x, Value lambd) {
  return land(g, cmp(g, x, neg(g, lambd), ir::Compare::GE), cmp(g, x, lambd, ir::Compare::LE));
}
Value outside(ir::Graph& g, Value x, Value lambd) {
  return lor(g, cmp(g, x, lambd, ir::Compare::GT), cmp(g, x, neg(g, lambd), ir::Compare::LT));
}
// The two halves of x along dim.
std::pair<Value, Value> halves(ir::Graph& g, Value x, int64_t dim) {
  ir::Shape s = g.type(x).shape;
  ir::Dims start(s.size(), 0), mid = s;
  mid[dim] = s[dim] / 2;
  ir::Dims start2 = start;
  start2[dim] = s[dim] / 2;
  return {ir::slice(g, x, start, mid), ir::slice(g, x, start2, s)};
}

}  // namespace

Value hardshrink(ir::Graph& g, Value x, Value lambd) { return ir::select(g, within(g, x, lambd), zeros_like(g, x), x); }

Value hardshrink_backward(ir::Graph& g, Value grad, Value x, Value lambd) {
  return ir::select(g, within(g, x, lambd), zeros_like(g, grad), grad);
}

Value softshrink(ir::Graph& g, Value x, Value lambd) {
  // Inside the band x * 0: NaN stays NaN, as in ATen.
  Value inner = mul(g, x, zeros_like(g, x));
  Value r = ir::select(g, cmp(g, x, neg(g, lambd), ir::Compare::LT), add(g, x, lambd), inner);
  return ir::select(g, cmp(g, x, lambd, ir::Compare::GT), sub(g, x, lambd), r);
}

Value softshrink_backward(ir::Graph& g, Value grad, Value x, Value lambd) {
  return ir::select(g, outside(g, x, lambd), grad, zeros_like(g, grad));
}

Value threshold(ir::Graph& g, Value x, Value th, Value value) {
  return ir::select(g, cmp(g, x, th, ir::Compare::LE), value, x);
}

Value log_sigmoid(ir::Graph& g, Value x) {
  Value neg_abs = neg(g, ir::unary(g, ir::Op::Abs, x));
  return sub(g, ir::binary(g, ir::Op::Minimum, x, zeros_like(g, x)),
             ir::unary(g, ir::Op::LogPlusOne, ir::unary(g, ir::Op::Exponential, neg_abs)));
}

Value log_sigmoid_backward(ir::Graph& g, Value grad, Value x) {
  return mul(g, grad, ir::unary(g, ir::Op::Logistic, neg(g, x)));
}

Value prelu(ir::Graph& g, Value x, Value w) {
  return ir::select(g, cmp(g, x, zeros_like(g, x), ir::Compare::GT), x, mul(g, w, x));
}

std::pair<Value, Value> prelu_backward(ir::Graph& g, Value grad, Value x, Value w) {
  Value pos = cmp(g, x, zeros_like(g, x), ir::Compare::GT);
  return {ir::select(g, pos, grad, mul(g, w, grad)), ir::select(g, pos, zeros_like(g, x), mul(g, x, grad))};
}

Value glu(ir::Graph& g, Value x, int64_t dim) {
  auto [a, b] = halves(g, x, dim);
  return mul(g, a, ir::unary(g, ir::Op::Logistic, b));
}

Value glu_backward(ir::Graph& g, Value grad, Value x, int64_t dim) {
  auto [a, b] = halves(g, x, dim);
  Value sig = ir::unary(g, ir::Op::Logistic, b);
  Value ga = mul(g, sig, grad);
  Value gb = mul(g, mul(g, mul(g, a, sig), sub(g, full_like(g, sig, 1), sig)), grad);
  return ir::concatenate(g, {ga, gb}, dim);
}

// ------------------------------------------------------------ more losses

namespace {

// grad (scalar or x's shape) in x's dtype, times the mean's 1/numel.
Value loss_grad(ir::Graph& g, Value grad, Value like, Reduction reduction) {
  const ir::Type& t = g.type(like);
  Value ga = ir::broadcast_to(g, ir::convert(g, grad, t.dtype), t.shape);
  if (reduction == Reduction::Mean) ga = div(g, ga, full_like(g, ga, static_cast<double>(ir::numel(t.shape))));
  return ga;
}

}  // namespace

namespace {

// x - target, in x's accumulation dtype.
Value widened_difference(ir::Graph& g, Value x, Value target) {
  Value xa = acc_of(g, x);
  return sub(g, xa, ir::convert(g, target, g.type(xa).dtype));
}

// The gradient of a loss that is quadratic for |d| < bound and linear beyond:
// `inside` within the bound, +tail above it, -tail below it.
Value with_linear_tails(ir::Graph& g, Value d, Value bound, Value tail, Value inside) {
  Value r = ir::select(g, cmp(g, d, bound, ir::Compare::GE), tail, inside);
  return ir::select(g, cmp(g, d, neg(g, bound), ir::Compare::LE), neg(g, tail), r);
}

// Huber's loss (scaled = false) and smooth L1 (scaled = true: Huber's divided
// by the bound, and plain |x - target| at bound 0): quadratic below the bound,
// linear above it. Each is evaluated as ATen writes it, so results match bit for bit.
Value quadratic_then_linear(ir::Graph& g, Value x, Value target, Reduction reduction, double bound, bool scaled) {
  Value z = ir::unary(g, ir::Op::Abs, widened_difference(g, x, target));
  Value loss = z;
  if (!scaled || bound > 0) {
    Value quad = mul(g, mul(g, full_like(g, z, 0.5), z), z);
    Value lin = sub(g, z, full_like(g, z, 0.5 * bound));
    if (scaled)
      quad = div(g, quad, full_like(g, z, bound));
    else
      lin = mul(g, full_like(g, z, bound), lin);
    loss = ir::select(g, cmp(g, z, full_like(g, z, bound), ir::Compare::LT), quad, lin);
  }
  return reduce_loss(g, loss, reduction);
}

Value quadratic_then_linear_backward(ir::Graph& g, Value grad, Value x, Value target, Reduction reduction,
                                     double bound, bool scaled) {
  Value d = widened_difference(g, x, target);
  Value ga = loss_grad(g, grad, d, reduction);
  Value b = full_like(g, d, bound);
  Value inside = mul(g, d, ga), tail = ga;
  if (scaled)
    inside = bound > 0 ? div(g, inside, b) : zeros_like(g, d);
  else
    tail = mul(g, ga, b);
  return with_linear_tails(g, d, b, tail, inside);
}

}  // namespace

Value huber_loss(ir::Graph& g, Value x, Value target, Reduction reduction, double delta, DType result) {
  return ir::convert(g, quadratic_then_linear(g, x, target, reduction, delta, false), result);
}

Value huber_loss_backward(ir::Graph& g, Value grad, Value x, Value target, Reduction reduction, double delta,
                          DType result) {
  return ir::convert(g, quadratic_then_linear_backward(g, grad, x, target, reduction, delta, false), result);
}

Value smooth_l1_loss(ir::Graph& g, Value x, Value target, Reduction reduction, double beta, DType result) {
  return ir::convert(g, quadratic_then_linear(g, x, target, reduction, beta, true), result);
}

Value smooth_l1_loss_backward(ir::Graph& g, Value grad, Value x, Value target, Reduction reduction, double beta,
                              DType result) {
  return ir::convert(g, quadratic_then_linear_backward(g, grad, x, target, reduction, beta, true), result);
}

namespace {

struct MarginTerms {
  Value onehot;  // pred [N, C]: the target class
  Value active;  // pred [N, C]: z > 0 off the target
  Value z;       // margin - x[y] + x[i], acc [N, C]
  Value w;       // acc [N]: weight of each target (1 without weights)
};

MarginTerms margin_terms(ir::Graph& g, Value xa, Value target, double margin, OptValue weight) {
  DType acc = g.type(xa).dtype;
  const ir::Shape shape = g.type(xa).shape;  // [N, C]
  MarginTerms m;
  Value t = ir::broadcast_in_dim(g, ir::convert(g, target, DType::S64), shape, {0});
  m.onehot = cmp(g, t, ir::iota(g, DType::S64, shape, 1), ir::Compare::EQ);
  Value zero = full_like(g, xa, 0);
  Value x_t = sum(g, ir::select(g, m.onehot, xa, zero), {1}, false, acc, acc);
  m.z = add(g, sub(g, full_like(g, xa, margin), ir::broadcast_in_dim(g, x_t, shape, {0})), xa);
  m.active = land(g, cmp(g, m.z, zero, ir::Compare::GT), lnot(g, m.onehot));
  if (weight) {
    Value wb = ir::broadcast_in_dim(g, ir::convert(g, *weight, acc), shape, {1});
    m.w = sum(g, ir::select(g, m.onehot, wb, zero), {1}, false, acc, acc);
  } else {
    m.w = ir::full(g, acc, 1, {shape[0]});
  }
  return m;
}

// Per-sample losses [N] to the requested reduction.
Value reduce_samples(ir::Graph& g, Value loss, Reduction reduction) { return reduce_loss(g, loss, reduction); }

// grad ([N] for Reduction::None, else a scalar) as [N, C] in acc, with the mean's 1/N.
Value sample_grad(ir::Graph& g, Value grad, const ir::Shape& shape, Reduction reduction, DType acc) {
  Value ga = ir::convert(g, grad, acc);
  if (reduction == Reduction::None) return ir::broadcast_in_dim(g, ga, shape, {0});
  ga = ir::broadcast_in_dim(g, ga, shape, {});
  if (reduction == Reduction::Mean) ga = div(g, ga, ir::full(g, acc, static_cast<double>(shape[0]), shape));
  return ga;
}

}  // namespace

Value multi_margin_loss(ir::Graph& g, Value x, Value target, int64_t p, double margin, OptValue weight,
                        Reduction reduction, DType result) {
  auto [xa, acc, shape] = widened(g, x);
  MarginTerms m = margin_terms(g, xa, target, margin, weight);
  Value h = p == 1 ? m.z : mul(g, m.z, m.z);
  h = ir::select(g, m.active, h, full_like(g, h, 0));
  h = mul(g, h, ir::broadcast_in_dim(g, m.w, shape, {0}));
  Value loss = div(g, sum(g, h, {1}, false, acc, acc), ir::full(g, acc, static_cast<double>(shape[1]), {shape[0]}));
  return ir::convert(g, reduce_samples(g, loss, reduction), result);
}

Value multi_margin_loss_backward(ir::Graph& g, Value grad, Value x, Value target, int64_t p, double margin,
                                 OptValue weight, Reduction reduction, DType result) {
  auto [xa, acc, shape] = widened(g, x);
  MarginTerms m = margin_terms(g, xa, target, margin, weight);
  Value coef = p == 1 ? full_like(g, m.z, 1) : mul(g, full_like(g, m.z, 2), m.z);
  coef = ir::select(g, m.active, coef, full_like(g, coef, 0));
  coef = mul(g, coef, ir::broadcast_in_dim(g, m.w, shape, {0}));
  coef = div(g, coef, full_like(g, coef, static_cast<double>(shape[1])));
  Value total = ir::broadcast_in_dim(g, sum(g, coef, {1}, false, acc, acc), shape, {0});
  Value gi = sub(g, coef, ir::select(g, m.onehot, total, full_like(g, total, 0)));
  return ir::convert(g, mul(g, gi, sample_grad(g, grad, shape, reduction, acc)), result);
}

namespace {

struct MultilabelTerms {
  Value is_target;  // pred [N, C]
  Value pick;       // pred [N, K, C]: valid target k is class c
  Value active;     // pred [N, K, C]: valid k, non-target c, z > 0
  Value z;          // acc [N, K, C]: 1 - x[t_k] + x[c]
};

MultilabelTerms multilabel_terms(ir::Graph& g, Value xa, Value target) {
  DType acc = g.type(xa).dtype;
  const ir::Shape shape = g.type(xa).shape;  // [N, C]
  int64_t n = shape[0], c = shape[1];
  ir::Shape cube{n, c, c};  // [N, K, C]
  Value t = ir::convert(g, target, DType::S64);
  // Target k counts while no -1 came at or before it.
  Value ended = cmp(g, t, ir::full(g, DType::S64, -1, shape), ir::Compare::EQ);
  Value upto = cmp(g, ir::iota(g, DType::S64, cube, 2), ir::iota(g, DType::S64, cube, 1), ir::Compare::LE);
  Value any_end = ir::reduce(g, land(g, ir::broadcast_in_dim(g, ended, cube, {0, 2}), upto),
                             ir::constant_int(g, DType::Pred, 0), {2}, ir::Combiner::Or);
  Value valid = lnot(g, any_end);  // [N, K]
  MultilabelTerms m;
  Value is_class = cmp(g, ir::broadcast_in_dim(g, t, cube, {0, 1}), ir::iota(g, DType::S64, cube, 2), ir::Compare::EQ);
  m.pick = land(g, is_class, ir::broadcast_in_dim(g, valid, cube, {0, 1}));
  m.is_target = ir::reduce(g, m.pick, ir::constant_int(g, DType::Pred, 0), {1}, ir::Combiner::Or);
  Value xc = ir::broadcast_in_dim(g, xa, cube, {0, 2});
  Value zero = ir::full(g, acc, 0, cube);
  Value x_t = sum(g, ir::select(g, is_class, xc, zero), {2}, false, acc, acc);  // [N, K]
  m.z = add(g, sub(g, ir::full(g, acc, 1, cube), ir::broadcast_in_dim(g, x_t, cube, {0, 1})), xc);
  m.active = land(g, land(g, ir::broadcast_in_dim(g, valid, cube, {0, 1}),
                          lnot(g, ir::broadcast_in_dim(g, m.is_target, cube, {0, 2}))),
                  cmp(g, m.z, zero, ir::Compare::GT));
  return m;
}

}  // namespace

MultilabelForward multilabel_margin_loss(ir::Graph& g, Value x, Value target, Reduction reduction, DType result) {
  auto [xa, acc, shape] = widened(g, x);
  MultilabelTerms m = multilabel_terms(g, xa, target);
  Value h = ir::select(g, m.active, m.z, full_like(g, m.z, 0));
  Value loss = div(g, sum(g, h, {1, 2}, false, acc, acc), ir::full(g, acc, static_cast<double>(shape[1]), {shape[0]}));
  return {ir::convert(g, reduce_samples(g, loss, reduction), result), ir::convert(g, m.is_target, result)};
}

Value multilabel_margin_loss_backward(ir::Graph& g, Value grad, Value x, Value target, Reduction reduction,
                                      DType result) {
  auto [xa, acc, shape] = widened(g, x);
  MultilabelTerms m = multilabel_terms(g, xa, target);
  const ir::Shape cube = g.type(m.z).shape;
  Value one = ir::convert(g, m.active, acc);
  Value plus = sum(g, one, {1}, false, acc, acc);  // [N, C]: each non-target class
  Value per_k = sum(g, one, {2}, false, acc, acc);  // [N, K]: each target position
  Value minus = sum(g, ir::select(g, m.pick, ir::broadcast_in_dim(g, per_k, cube, {0, 1}), ir::full(g, acc, 0, cube)),
                    {1}, false, acc, acc);
  Value gi = div(g, sub(g, plus, minus), full_like(g, plus, static_cast<double>(shape[1])));
  return ir::convert(g, mul(g, gi, sample_grad(g, grad, shape, reduction, acc)), result);
}

// ------------------------------------------------------------ embedding_bag

namespace {

Value s64(ir::Graph& g, double v, const ir::Shape& shape) { return ir::full(g, DType::S64, v, shape); }

// Whether each index counts (is not the padding index), [L] pred.
Value counted(ir::Graph& g, Value idx, int64_t padding_idx) {
  const ir::Shape& s = g.type(idx).shape;
  if (padding_idx < 0) return ir::full(g, DType::Pred, 1, s);
  return cmp(g, idx, s64(g, static_cast<double>(padding_idx), s), ir::Compare::NE);
}

}  // namespace

BagForward embedding_bag(ir::Graph& g, Value weight, Value indices, Value offsets, int64_t bags, BagMode mode,
                         OptValue psw, int64_t padding_idx, DType result) {
  DType acc = accumulate_dtype(g.type(weight).dtype);
  int64_t l = g.type(indices).shape[0], d = g.type(weight).shape[1];
  Value idx = ir::convert(g, indices, DType::S64);
  Value off = ir::slice(g, ir::convert(g, offsets, DType::S64), {0}, {bags});
  // bag(i) = #{b : offsets[b] <= i} - 1
  ir::Shape lb{l, bags};
  Value le = cmp(g, ir::broadcast_in_dim(g, off, lb, {1}), ir::iota(g, DType::S64, lb, 0), ir::Compare::LE);
  Value bag = ir::binary(g, ir::Op::Subtract, sum(g, ir::convert(g, le, DType::S64), {1}, false, DType::S64, DType::S64),
                         s64(g, 1, {l}));
  Value valid = counted(g, idx, padding_idx);
  // Indices before the first offset belong to no bag: drop them (bag -1 is outside).
  BagForward f;
  f.offset2bag = bag;
  Value ones = ir::select(g, valid, s64(g, 1, {l}), s64(g, 0, {l}));
  f.bag_size = ir::scatter_rows(g, s64(g, 0, {bags}), bag, ones, ir::Combiner::Add);
  Value rows = ir::convert(g, ir::gather_rows(g, weight, idx), acc);  // [L, D]
  ir::Shape ld{l, d};
  Value valid_ld = ir::broadcast_in_dim(g, valid, ld, {0});
  if (mode == BagMode::Max) {
    Value low = ir::full(g, acc, -std::numeric_limits<double>::infinity(), ld);
    Value vals = ir::select(g, valid_ld, rows, low);
    Value best = ir::scatter_rows(g, ir::full(g, acc, -std::numeric_limits<double>::infinity(), {bags, d}), bag, vals,
                                  ir::Combiner::Max);
    // The first index reaching the maximum (ATen replaces only on a strictly greater value).
    Value at_best = land(g, valid_ld, cmp(g, vals, ir::gather_rows(g, best, ir::binary(g, ir::Op::Maximum, bag, s64(g, 0, {l}))),
                                          ir::Compare::EQ));
    Value pos = ir::select(g, at_best, ir::iota(g, DType::S64, ld, 0), s64(g, static_cast<double>(l), ld));
    Value first = ir::scatter_rows(g, s64(g, static_cast<double>(l), {bags, d}), bag, pos, ir::Combiner::Min);
    Value empty = ir::broadcast_in_dim(g, cmp(g, f.bag_size, s64(g, 0, {bags}), ir::Compare::EQ), {bags, d}, {0});
    Value picked = ir::gather_1d(g, ir::concatenate(g, {idx, s64(g, -1, {1})}, 0), first);
    f.max_indices = ir::select(g, empty, s64(g, -1, {bags, d}), picked);
    f.output = ir::convert(g, ir::select(g, empty, ir::full(g, acc, 0, {bags, d}), best), result);
    return f;
  }
  if (psw) rows = mul(g, rows, ir::broadcast_in_dim(g, ir::convert(g, *psw, acc), ld, {0}));
  rows = ir::select(g, valid_ld, rows, ir::full(g, acc, 0, ld));
  Value total = ir::scatter_rows(g, ir::full(g, acc, 0, {bags, d}), bag, rows, ir::Combiner::Add);
  if (mode == BagMode::Mean) {
    Value n = ir::convert(g, ir::binary(g, ir::Op::Maximum, f.bag_size, s64(g, 1, {bags})), acc);
    total = div(g, total, ir::broadcast_in_dim(g, n, {bags, d}, {0}));
  }
  f.output = ir::convert(g, total, result);
  f.max_indices = s64(g, 0, {bags});
  return f;
}

Value embedding_bag_backward(ir::Graph& g, Value grad, Value indices, Value offset2bag, Value bag_size,
                             Value max_indices, int64_t num_weights, bool scale_grad_by_freq, BagMode mode,
                             OptValue psw, int64_t padding_idx, DType result) {
  DType acc = accumulate_dtype(g.type(grad).dtype);
  int64_t bags = g.type(grad).shape[0], d = g.type(grad).shape[1], l = g.type(indices).shape[0];
  Value ga = ir::convert(g, grad, acc);
  Value idx = ir::convert(g, indices, DType::S64);
  ir::Shape vd{num_weights, d};
  if (mode == BagMode::Max) {
    // grad[b, j] lands on weight[max_indices[b, j], j]; empty bags (-1) are dropped.
    Value mi = ir::convert(g, max_indices, DType::S64);
    Value neg = cmp(g, mi, s64(g, 0, {bags, d}), ir::Compare::LT);
    Value flat = ir::binary(g, ir::Op::Add, ir::binary(g, ir::Op::Multiply, mi, s64(g, static_cast<double>(d), {bags, d})),
                            ir::iota(g, DType::S64, {bags, d}, 1));
    flat = ir::select(g, neg, s64(g, static_cast<double>(num_weights * d), {bags, d}), flat);
    Value r = ir::scatter_1d_combine(g, ir::full(g, acc, 0, {num_weights * d}), ir::reshape(g, flat, {bags * d}),
                                     ir::reshape(g, ga, {bags * d}), ir::Combiner::Add);
    return ir::convert(g, ir::reshape(g, r, vd), result);
  }
  Value bag = ir::convert(g, offset2bag, DType::S64);
  Value inbag = cmp(g, bag, s64(g, 0, {l}), ir::Compare::GE);
  Value rows = ir::gather_rows(g, ga, ir::binary(g, ir::Op::Maximum, bag, s64(g, 0, {l})));  // [L, D]
  ir::Shape ld{l, d};
  Value scale = ir::full(g, acc, 1, {l});
  if (mode == BagMode::Mean) {
    Value n = ir::convert(g, ir::binary(g, ir::Op::Maximum, ir::convert(g, bag_size, DType::S64), s64(g, 1, {bags})), acc);
    scale = div(g, scale, ir::gather_rows(g, n, ir::binary(g, ir::Op::Maximum, bag, s64(g, 0, {l}))));
  }
  if (psw) scale = mul(g, scale, ir::convert(g, *psw, acc));
  Value keep = land(g, inbag, counted(g, idx, padding_idx));
  if (scale_grad_by_freq) {
    Value ones = ir::select(g, keep, ir::full(g, acc, 1, {l}), ir::full(g, acc, 0, {l}));
    Value freq = ir::scatter_rows(g, ir::full(g, acc, 0, {num_weights}), idx, ones, ir::Combiner::Add);
    scale = div(g, scale, ir::binary(g, ir::Op::Maximum, ir::gather_rows(g, freq, idx), ir::full(g, acc, 1, {l})));
  }
  scale = ir::select(g, keep, scale, ir::full(g, acc, 0, {l}));
  rows = mul(g, rows, ir::broadcast_in_dim(g, scale, ld, {0}));
  Value r = ir::scatter_rows(g, ir::full(g, acc, 0, vd), idx, rows, ir::Combiner::Add);
  return ir::convert(g, r, result);
}

Value embedding_bag_per_sample_weights_backward(ir::Graph& g, Value grad, Value weight, Value indices,
                                                Value offset2bag, int64_t padding_idx, DType result) {
  DType acc = accumulate_dtype(g.type(grad).dtype);
  int64_t l = g.type(indices).shape[0];
  Value idx = ir::convert(g, indices, DType::S64);
  Value bag = ir::convert(g, offset2bag, DType::S64);
  Value gr = ir::convert(g, ir::gather_rows(g, grad, ir::binary(g, ir::Op::Maximum, bag, s64(g, 0, {l}))), acc);
  Value wr = ir::convert(g, ir::gather_rows(g, weight, idx), acc);
  Value dot = sum(g, mul(g, gr, wr), {1}, false, acc, acc);
  Value keep = land(g, cmp(g, bag, s64(g, 0, {l}), ir::Compare::GE), counted(g, idx, padding_idx));
  return ir::convert(g, ir::select(g, keep, dot, ir::full(g, acc, 0, {l})), result);
}

Value embedding_renorm(ir::Graph& g, Value weight, Value indices, Value max_norm, double norm_type) {
  DType dtype = g.type(weight).dtype;
  DType acc = accumulate_dtype(dtype);
  int64_t n = g.type(indices).shape.at(0);
  // Only the named rows are read and written back: duplicates compute the
  // same scaled row from the same old one, so whichever write wins is right.
  Value rows = ir::convert(g, ir::gather_rows(g, weight, indices), acc);  // [n, D]
  Value norm = vector_norm(g, rows, norm_type, {1}, false, acc);         // [n]
  Value limit = ir::broadcast_in_dim(g, max_norm, {n}, {});
  Value scale = div(g, limit, add(g, norm, ir::full(g, acc, 1e-7, {n})));
  scale = ir::select(g, ir::compare(g, norm, limit, ir::Compare::GT), scale, ir::full(g, acc, 1, {n}));
  Value scaled = mul(g, rows, ir::broadcast_in_dim(g, scale, g.type(rows).shape, {0}));
  return ir::scatter_rows(g, weight, indices, ir::convert(g, scaled, dtype), ir::Combiner::Replace);
}

// ------------------------------------------------------------ CTC loss

namespace {

struct Ctc {
  ir::Graph& g;
  int64_t t, n, c, s;  // time, batch, classes, extended target length 2 L + 1
  DType dt;
  Value ext;     // [N, S] s64: the extended target (blank, y1, blank, y2, ..., blank)
  Value lp_ext;  // [T, N, S]: log_probs at each extended label
  Value skip;    // [N, S] pred: s may be reached from s - 2 (a label differing from the one before)
  Value in_len, tgt_len;  // [N] s64

  Value neg_inf(const ir::Shape& shape) { return ir::full(g, dt, -INFINITY, shape); }
  Value s64(double v, const ir::Shape& shape) { return ir::full(g, DType::S64, v, shape); }
  // log(exp(a) + exp(b) + exp(c)) with ATen's guard for all -inf.
  Value lse3(Value a, Value b, Value c3) {
    Value m = ir::binary(g, ir::Op::Maximum, ir::binary(g, ir::Op::Maximum, a, b), c3);
    m = ir::select(g, ir::compare(g, m, full_like(g, m, -INFINITY), ir::Compare::EQ), full_like(g, m, 0), m);
    auto e = [&](Value v) { return ir::unary(g, ir::Op::Exponential, sub(g, v, m)); };
    return add(g, ir::unary(g, ir::Op::Log, add(g, add(g, e(a), e(b)), e(c3))), m);
  }
  // x shifted along S by `by` (> 0: toward higher s), -inf filled.
  Value shift(Value x, int64_t by) {
    Value fill = ir::constant(g, dt, -INFINITY);
    if (by > 0) return ir::pad(g, ir::slice(g, x, {0, 0}, {n, s - by}), fill, {0, by}, {0, 0});
    return ir::pad(g, ir::slice(g, x, {0, -by}, {n, s}), fill, {0, 0}, {0, -by});
  }
  // Row t of lp_ext: [N, S].
  Value lp_at(int64_t step) { return ir::reshape(g, ir::slice(g, lp_ext, {step, 0, 0}, {step + 1, n, s}), {n, s}); }
  // [N, S] predicate from a per-sequence [N] s64 comparison against `v`.
  Value per_seq(Value len, double v, ir::Compare cmp_dir) {
    return ir::broadcast_in_dim(g, ir::compare(g, len, s64(v, {n}), cmp_dir), {n, s}, {0});
  }
  Value s_index() { return ir::iota(g, DType::S64, {n, s}, 1); }
  Value twice_len() { return ir::broadcast_in_dim(g, add(g, tgt_len, tgt_len), {n, s}, {0}); }
};

Ctc ctc_setup(ir::Graph& g, Value log_probs, Value targets, Value input_lengths, Value target_lengths, int64_t blank) {
  const ir::Shape lps = g.type(log_probs).shape;
  int64_t l = g.type(targets).shape.at(1);
  Ctc k{g, lps[0], lps[1], lps[2], 2 * l + 1, g.type(log_probs).dtype, {}, {}, {}, input_lengths, target_lengths};
  int64_t n = k.n, s = k.s;
  // ext[b, s] = s odd ? targets[b, s / 2] : blank
  Value sidx = k.s_index();
  Value half = ir::binary(g, ir::Op::Divide, sidx, k.s64(2, {n, s}));
  Value odd = ir::compare(g, ir::binary(g, ir::Op::Remainder, sidx, k.s64(2, {n, s})), k.s64(1, {n, s}),
                          ir::Compare::EQ);
  Value row = ir::iota(g, DType::S64, {n, s}, 0);
  Value flat_t = ir::reshape(g, ir::convert(g, targets, DType::S64), {n * std::max<int64_t>(l, 1)});
  Value label;
  if (l == 0) {
    label = k.s64(static_cast<double>(blank), {n, s});
  } else {
    Value at = add(g, mul(g, row, k.s64(static_cast<double>(l), {n, s})),
                   ir::binary(g, ir::Op::Minimum, half, k.s64(static_cast<double>(l - 1), {n, s})));
    label = ir::gather_1d(g, flat_t, at);
  }
  k.ext = ir::select(g, odd, label, k.s64(static_cast<double>(blank), {n, s}));
  // lp_ext[t, b, s] = log_probs[t, b, ext[b, s]] by one gather over the flattened log_probs.
  ir::Shape tns{k.t, n, s};
  Value tt = ir::iota(g, DType::S64, tns, 0), bb = ir::iota(g, DType::S64, tns, 1);
  Value cls = ir::broadcast_in_dim(g, clamp_index(g, k.ext, k.c), tns, {1, 2});
  Value idx = add(g, mul(g, add(g, mul(g, tt, k.s64(static_cast<double>(n), tns)), bb), k.s64(static_cast<double>(k.c), tns)), cls);
  k.lp_ext = ir::gather_1d(g, ir::reshape(g, log_probs, {k.t * n * k.c}), idx);
  // Skipping a blank is allowed onto a label that differs from the previous label.
  Value prev2 = ir::pad(g, ir::slice(g, k.ext, {0, 0}, {n, std::max<int64_t>(s - 2, 0)}), ir::constant_int(g, DType::S64, -1),
                        {0, std::min<int64_t>(2, s)}, {0, 0});
  k.skip = ir::binary(g, ir::Op::And, odd, ir::compare(g, k.ext, prev2, ir::Compare::NE));
  return k;
}

}  // namespace

CtcForward ctc_loss(ir::Graph& g, Value log_probs, Value targets, Value input_lengths, Value target_lengths,
                    int64_t blank) {
  Ctc k = ctc_setup(g, log_probs, targets, input_lengths, target_lengths, blank);
  int64_t n = k.n, s = k.s;
  ir::Shape ns{n, s};
  // t = 0: the leading blank or the first label.
  Value first = k.lp_at(0);
  Value sidx = k.s_index();
  Value start = ir::binary(g, ir::Op::Or, ir::compare(g, sidx, k.s64(0, ns), ir::Compare::EQ),
                           ir::binary(g, ir::Op::And, ir::compare(g, sidx, k.s64(1, ns), ir::Compare::EQ),
                                      k.per_seq(k.tgt_len, 0, ir::Compare::GT)));
  Value alpha = ir::select(g, start, first, k.neg_inf(ns));
  std::vector<Value> rows{alpha};
  for (int64_t step = 1; step < k.t; ++step) {
    Value next = add(g, k.lse3(alpha, k.shift(alpha, 1), ir::select(g, k.skip, k.shift(alpha, 2), k.neg_inf(ns))),
                     k.lp_at(step));
    // Past a sequence's end its alpha stays as it was at the last step.
    alpha = ir::select(g, k.per_seq(k.in_len, static_cast<double>(step), ir::Compare::GT), next, alpha);
    rows.push_back(alpha);
  }
  // nll = -log(alpha[T_b - 1, 2 L] + alpha[T_b - 1, 2 L - 1]); an empty input: 0 or inf.
  Value two_l = k.twice_len();
  Value end_mask = ir::binary(g, ir::Op::Or, ir::compare(g, sidx, two_l, ir::Compare::EQ),
                              ir::compare(g, sidx, sub(g, two_l, k.s64(1, ns)), ir::Compare::EQ));
  Value ends = ir::select(g, end_mask, alpha, k.neg_inf(ns));
  Value m = ir::reduce(g, ends, ir::constant(g, k.dt, -INFINITY), {1}, ir::Combiner::Max);
  m = ir::select(g, ir::compare(g, m, ir::full(g, k.dt, -INFINITY, {n}), ir::Compare::EQ), ir::full(g, k.dt, 0, {n}), m);
  Value sum = ir::reduce(g, ir::unary(g, ir::Op::Exponential, sub(g, ends, ir::broadcast_in_dim(g, m, ns, {0}))),
                         ir::constant(g, k.dt, 0), {1}, ir::Combiner::Add);
  Value nll = ir::unary(g, ir::Op::Negate, add(g, ir::unary(g, ir::Op::Log, sum), m));
  Value empty_in = ir::compare(g, k.in_len, k.s64(0, {n}), ir::Compare::EQ);
  Value empty_nll = ir::select(g, ir::compare(g, k.tgt_len, k.s64(0, {n}), ir::Compare::EQ), ir::full(g, k.dt, 0, {n}),
                               ir::full(g, k.dt, INFINITY, {n}));
  nll = ir::select(g, empty_in, empty_nll, nll);
  Value la = ir::concatenate(g, rows, 0);  // [T * N, S]
  la = ir::transpose(g, ir::reshape(g, la, {k.t, n, s}), {1, 0, 2});
  return {nll, la};
}

Value ctc_loss_backward(ir::Graph& g, Value grad, Value log_probs, Value targets, Value input_lengths,
                        Value target_lengths, Value nll, Value log_alpha, int64_t blank, bool zero_infinity) {
  Ctc k = ctc_setup(g, log_probs, targets, input_lengths, target_lengths, blank);
  int64_t n = k.n, s = k.s, t = k.t;
  ir::Shape ns{n, s};
  Value sidx = k.s_index();
  Value two_l = k.twice_len();
  Value end_mask = ir::binary(g, ir::Op::Or, ir::compare(g, sidx, two_l, ir::Compare::EQ),
                              ir::binary(g, ir::Op::And, ir::compare(g, sidx, sub(g, two_l, k.s64(1, ns)), ir::Compare::EQ),
                                         k.per_seq(k.tgt_len, 0, ir::Compare::GT)));
  // beta from each sequence's last step backwards; -inf past its end.
  Value skip_up = ir::pad(g, ir::slice(g, k.skip, {0, std::min<int64_t>(2, s)}, {n, s}),
                          ir::constant_int(g, DType::Pred, 0), {0, 0}, {0, std::min<int64_t>(2, s)});
  std::vector<Value> rows(t);
  Value beta = k.neg_inf(ns);
  for (int64_t step = t - 1; step >= 0; --step) {
    Value lp = k.lp_at(step);
    Value init = ir::select(g, end_mask, lp, k.neg_inf(ns));
    Value next = add(g, k.lse3(beta, k.shift(beta, -1), ir::select(g, skip_up, k.shift(beta, -2), k.neg_inf(ns))), lp);
    Value last = k.per_seq(k.in_len, static_cast<double>(step + 1), ir::Compare::EQ);
    Value inside = k.per_seq(k.in_len, static_cast<double>(step + 1), ir::Compare::GT);
    beta = ir::select(g, last, init, ir::select(g, inside, next, k.neg_inf(ns)));
    rows[step] = beta;
  }
  ir::Shape tns{t, n, s};
  Value lb = ir::reshape(g, ir::concatenate(g, rows, 0), tns);
  Value lcab = add(g, ir::transpose(g, log_alpha, {1, 0, 2}), lb);  // [T, N, S]
  // Per class: the log-sum of alpha * beta over the extended positions holding
  // it, accumulated in ATen's order (descending s, pairwise log-add-exp) so
  // that the large terms cancelling below round as on CPU.
  ir::Shape tnc{t, n, k.c};
  Value onehot = ir::compare(g, ir::broadcast_in_dim(g, k.ext, {n, s, k.c}, {0, 1}),
                             ir::iota(g, DType::S64, {n, s, k.c}, 2), ir::Compare::EQ);
  Value ninf = ir::full(g, k.dt, -INFINITY, tnc);
  Value res = ninf;
  for (int64_t pos = s - 1; pos >= 0; --pos) {
    Value v = ir::broadcast_in_dim(g, ir::reshape(g, ir::slice(g, lcab, {0, 0, pos}, {t, n, pos + 1}), {t, n}), tnc, {0, 1});
    Value here = ir::broadcast_in_dim(g, ir::reshape(g, ir::slice(g, onehot, {0, pos, 0}, {n, pos + 1, k.c}), {n, k.c}),
                                      tnc, {1, 2});
    Value mx = ir::binary(g, ir::Op::Maximum, res, v);
    Value lae = add(g, ir::unary(g, ir::Op::Log, add(g, ir::unary(g, ir::Op::Exponential, sub(g, res, mx)),
                                                         ir::unary(g, ir::Op::Exponential, sub(g, v, mx)))),
                    mx);
    Value first = ir::compare(g, res, ninf, ir::Compare::EQ);
    res = ir::select(g, here, ir::select(g, first, v, lae), res);
  }
  Value lp = log_probs;
  Value nllb = ir::broadcast_in_dim(g, nll, tnc, {1});
  Value gi = sub(g, ir::unary(g, ir::Op::Exponential, lp),
                 ir::unary(g, ir::Op::Exponential, sub(g, add(g, res, nllb), lp)));
  gi = mul(g, gi, ir::broadcast_in_dim(g, grad, tnc, {1}));
  Value valid = ir::compare(g, ir::iota(g, DType::S64, tnc, 0), ir::broadcast_in_dim(g, k.in_len, tnc, {1}),
                            ir::Compare::LT);
  if (zero_infinity)
    valid = ir::binary(g, ir::Op::And, valid,
                       ir::compare(g, nllb, ir::full(g, k.dt, INFINITY, tnc), ir::Compare::NE));
  return ir::select(g, valid, gi, ir::full(g, k.dt, 0, tnc));
}

WeightNorm weight_norm(ir::Graph& g, Value v, Value gain, int64_t dim) {
  const ir::Shape shape = g.type(v).shape;
  ir::Dims reduced = dims_except(dim, static_cast<int64_t>(shape.size()));
  DType dt = g.type(v).dtype;
  Value norms = ir::unary(g, ir::Op::Sqrt, sum(g, mul(g, v, v), reduced, true, dt, dt));
  Value scale = div(g, gain, norms);
  return {mul(g, v, ir::broadcast_to(g, scale, shape)), norms};
}

std::pair<Value, Value> weight_norm_backward(ir::Graph& g, Value grad_w, Value v, Value gain, Value norms,
                                             int64_t dim) {
  const ir::Shape shape = g.type(v).shape;
  ir::Dims reduced = dims_except(dim, static_cast<int64_t>(shape.size()));
  DType dt = g.type(v).dtype;
  Value grad_g = div(g, sum(g, mul(g, grad_w, v), reduced, true, dt, dt), norms);
  Value grad_v = mul(g, ir::broadcast_to(g, div(g, gain, norms), shape),
                     sub(g, grad_w, mul(g, v, ir::broadcast_to(g, div(g, grad_g, norms), shape))));
  return {grad_v, grad_g};
}

}  // namespace tpu::lowering
