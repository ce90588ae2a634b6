#include "lowering/nn.h"

#include <cmath>

#include "lowering/reduce.h"

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

Value add(ir::Graph& g, Value a, Value b) { return ir::binary(g, "stablehlo.add", a, b); }
Value sub(ir::Graph& g, Value a, Value b) { return ir::binary(g, "stablehlo.subtract", a, b); }
Value mul(ir::Graph& g, Value a, Value b) { return ir::binary(g, "stablehlo.multiply", a, b); }
Value div(ir::Graph& g, Value a, Value b) { return ir::binary(g, "stablehlo.divide", a, b); }
Value full_like(ir::Graph& g, Value x, double v) { return ir::full(g, g.type(x).dtype, v, g.type(x).shape); }
Value acc_of(ir::Graph& g, Value x) { return ir::convert(g, x, accumulate_dtype(g.type(x).dtype)); }

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

}  // namespace

// ------------------------------------------------------------ softmax

Value softmax(ir::Graph& g, Value x, int64_t dim, DType result) {
  ir::Dims dims = softmax_dims(g, x, dim);
  Value xa = acc_of(g, ir::convert(g, x, result));
  const ir::Shape& shape = g.type(xa).shape;
  Value e = ir::unary(g, "stablehlo.exponential", sub(g, xa, expand_reduced(g, amax(g, xa, dims, false), shape, dims)));
  DType acc = g.type(e).dtype;
  Value s = sum(g, e, dims, false, acc, acc);
  return ir::convert(g, div(g, e, expand_reduced(g, s, shape, dims)), result);
}

Value log_softmax(ir::Graph& g, Value x, int64_t dim, DType result) {
  ir::Dims dims = softmax_dims(g, x, dim);
  Value xa = acc_of(g, ir::convert(g, x, result));
  const ir::Shape& shape = g.type(xa).shape;
  Value shifted = sub(g, xa, expand_reduced(g, amax(g, xa, dims, false), shape, dims));
  DType acc = g.type(xa).dtype;
  Value s = sum(g, ir::unary(g, "stablehlo.exponential", shifted), dims, false, acc, acc);
  Value lse = ir::unary(g, "stablehlo.log", s);
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
  Value p = ir::unary(g, "stablehlo.exponential", oa);
  return ir::convert(g, sub(g, ga, mul(g, p, expand_reduced(g, s, shape, dims))), result);
}

// ------------------------------------------------------------ normalisation

namespace {

NormForward normalise_over(ir::Graph& g, Value x, const ir::Dims& dims, double eps) {
  Value xa = acc_of(g, x);
  DType acc = g.type(xa).dtype;
  Moments m = moments(g, xa, dims, true, 0, acc);
  Value invstd = ir::unary(g, "stablehlo.rsqrt", add(g, m.var, full_like(g, m.var, eps)));
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
  return ir::unary(g, "stablehlo.rsqrt", add(g, va, full_like(g, va, eps)));
}

Value batch_norm_eval(ir::Graph& g, Value x, OptValue weight, OptValue bias, Value mean, Value var, double eps,
                      DType result) {
  Value xa = acc_of(g, x);
  DType acc = g.type(xa).dtype;
  const ir::Shape shape = g.type(xa).shape;
  Value invstd = inverse_std(g, var, eps);
  Value out = mul(g, sub(g, xa, channel(g, mean, shape, acc)), channel(g, invstd, shape, acc));
  if (weight) out = mul(g, out, channel(g, *weight, shape, acc));
  if (bias) out = add(g, out, channel(g, *bias, shape, acc));
  return ir::convert(g, out, result);
}

NormGrads layer_norm_backward(ir::Graph& g, Value grad, Value x, int64_t axis, Value mean, Value rstd,
                              OptValue weight, std::array<bool, 3> mask, DType result, DType param_result) {
  Value xa = acc_of(g, x);
  DType acc = g.type(xa).dtype;
  const ir::Shape shape = g.type(xa).shape;
  int64_t rank = static_cast<int64_t>(shape.size());
  ir::Dims dims = dims_from(axis, rank), batch = dims_from(0, axis);
  ir::Shape stat_shape = reduced_shape(shape, dims, false);
  Value mu = ir::reshape(g, ir::convert(g, mean, acc), stat_shape);
  Value rs = ir::reshape(g, ir::convert(g, rstd, acc), stat_shape);
  Value x_hat = normalise(g, xa, mu, rs, dims);
  Value ga = ir::convert(g, grad, acc);
  NormGrads r;
  if (mask[0]) {
    Value gw = weight ? mul(g, ga, ir::broadcast_in_dim(g, ir::convert(g, *weight, acc), shape, dims)) : ga;
    r.input = ir::convert(g, normalisation_input_grad(g, gw, x_hat, expand_reduced(g, rs, shape, dims), dims), result);
  }
  if (mask[1] && weight) r.weight = sum(g, mul(g, ga, x_hat), batch, false, acc, param_result);
  if (mask[2]) r.bias = sum(g, ga, batch, false, acc, param_result);
  return r;
}

NormGrads batch_norm_backward(ir::Graph& g, Value grad, Value x, OptValue weight, Value mean, Value invstd,
                              bool train, std::array<bool, 3> mask, DType result, DType param_result) {
  Value xa = acc_of(g, x);
  DType acc = g.type(xa).dtype;
  const ir::Shape shape = g.type(xa).shape;
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
  Value tb = ir::broadcast_in_dim(g, t, shape, p.target_dims);
  p.onehot = ir::compare(g, tb, ir::iota(g, DType::S64, shape, p.class_dim), ir::Compare::EQ);
  const ir::Shape& tshape = g.type(t).shape;
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
  Value xa = acc_of(g, input);
  DType acc = g.type(xa).dtype;
  const ir::Shape shape = g.type(xa).shape;
  Picked p = pick(g, shape, target, weight, ignore_index, acc);
  // A select, not a product with the one-hot: other classes may hold -inf.
  Value x_t = sum(g, ir::select(g, p.onehot, xa, full_like(g, xa, 0)), {p.class_dim}, false, acc, acc);
  // Ignored targets contribute exactly 0 (never 0 * inf).
  Value loss = ir::select(g, p.valid, ir::unary(g, "stablehlo.negate", mul(g, x_t, p.weight)),
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
  Value coef = ir::select(g, p.valid, ir::unary(g, "stablehlo.negate", mul(g, ga, p.weight)),
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
  Value xa = acc_of(g, x);
  DType acc = g.type(xa).dtype;
  const ir::Shape& shape = g.type(xa).shape;
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
  Value log_x = ir::binary(g, "stablehlo.maximum", ir::unary(g, "stablehlo.log", xa), floor);
  Value log_1mx = ir::binary(g, "stablehlo.maximum",
                             ir::unary(g, "stablehlo.log_plus_one", ir::unary(g, "stablehlo.negate", xa)), floor);
  Value loss = sub(g, mul(g, sub(g, t, full_like(g, t, 1)), log_1mx), mul(g, t, log_x));
  if (weight) loss = mul(g, loss, ir::convert(g, *weight, acc));
  return ir::convert(g, reduce_loss(g, loss, reduction), result);
}

Value binary_cross_entropy_backward(ir::Graph& g, Value grad, Value x, Value target, OptValue weight,
                                    Reduction reduction, DType result) {
  Value xa = acc_of(g, x);
  DType acc = g.type(xa).dtype;
  const ir::Shape& shape = g.type(xa).shape;
  Value t = ir::convert(g, target, acc);
  Value one = full_like(g, xa, 1);
  Value denom = ir::binary(g, "stablehlo.maximum", mul(g, sub(g, one, xa), xa), full_like(g, xa, 1e-12));
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
  Value neg_abs = ir::unary(g, "stablehlo.negate", ir::unary(g, "stablehlo.abs", xa));
  Value log_sig = sub(g, ir::binary(g, "stablehlo.minimum", xa, full_like(g, xa, 0)),
                      ir::unary(g, "stablehlo.log_plus_one", ir::unary(g, "stablehlo.exponential", neg_abs)));
  if (pos_weight) {
    Value pw = ir::convert(g, *pos_weight, acc);
    log_sig = mul(g, add(g, mul(g, sub(g, pw, one), t), one), log_sig);
  }
  Value loss = sub(g, mul(g, sub(g, one, t), xa), log_sig);
  if (weight) loss = mul(g, loss, ir::convert(g, *weight, acc));
  return ir::convert(g, reduce_loss(g, loss, reduction), result);
}

}  // namespace tpu::lowering
