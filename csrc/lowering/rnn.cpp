#include "lowering/rnn.h"

#include <vector>

#include "ir/ops.h"
#include "lowering/formula.h"
#include "lowering/reduce.h"

namespace tpu::lowering {
namespace {

using ir::Value;

// The k-th of `parts` equal chunks of x's last dimension.
Value chunk(ir::Graph& g, Value x, int64_t parts, int64_t k) {
  const ir::Shape& shape = g.type(x).shape;
  int64_t last = static_cast<int64_t>(shape.size()) - 1, width = shape[last] / parts;
  ir::Dims start(shape.size(), 0), limit(shape.begin(), shape.end());
  start[last] = k * width;
  limit[last] = (k + 1) * width;
  return ir::slice(g, x, start, limit);
}

Value in(ir::Graph& g, Value x, ir::DType dtype) { return ir::convert(g, x, dtype); }

// gates (+ bias broadcast along the last dimension), in `dtype`.
Value with_bias(ir::Graph& g, Value gates, std::optional<Value> bias, ir::DType dtype) {
  Value x = in(g, gates, dtype);
  if (!bias) return x;
  const ir::Shape& shape = g.type(x).shape;
  Value b = ir::broadcast_in_dim(g, in(g, *bias, dtype), shape, {static_cast<int64_t>(shape.size()) - 1});
  return Formula{g}.add(x, b);
}

// Sum over every dimension but the last: a bias's gradient.
Value bias_grad(ir::Graph& g, Value grad, ir::DType result) {
  ir::Dims leading;
  for (int64_t d = 0; d + 1 < g.type(grad).rank(); ++d) leading.push_back(d);
  return sum(g, grad, leading, false, g.type(grad).dtype, result);
}

}  // namespace

LstmCell lstm_cell(ir::Graph& g, Value input_gates, Value hidden_gates, Value cx, std::optional<Value> input_bias,
                   std::optional<Value> hidden_bias) {
  ir::DType result = g.type(input_gates).dtype, acc = accumulate_dtype(result);
  Formula f{g};
  Value gates = f.add(with_bias(g, input_gates, input_bias, acc), with_bias(g, hidden_gates, hidden_bias, acc));
  auto sigmoid = [&](Value x) { return unary(g, Unary::Sigmoid, x); };
  Value i = sigmoid(chunk(g, gates, 4, 0)), fg = sigmoid(chunk(g, gates, 4, 1));
  Value c = f.tanh(chunk(g, gates, 4, 2)), o = sigmoid(chunk(g, gates, 4, 3));
  Value cy = f.add(f.mul(fg, in(g, cx, acc)), f.mul(i, c));
  Value hy = f.mul(o, f.tanh(cy));
  int64_t last = g.type(gates).rank() - 1;
  return {in(g, hy, result), in(g, cy, result), in(g, ir::concatenate(g, {i, fg, c, o}, last), result)};
}

LstmCellGrad lstm_cell_backward(ir::Graph& g, std::optional<Value> grad_hy, std::optional<Value> grad_cy, Value cx,
                                Value cy, Value workspace, bool has_bias) {
  ir::DType result = g.type(workspace).dtype, acc = accumulate_dtype(result);
  Formula f{g};
  Value w = in(g, workspace, acc);
  Value i = chunk(g, w, 4, 0), fg = chunk(g, w, 4, 1), c = chunk(g, w, 4, 2), o = chunk(g, w, 4, 3);
  Value cy_acc = in(g, cy, acc), tanh_cy = f.tanh(cy_acc);
  Value zero = f.c(cy_acc, 0.0);
  Value go = grad_hy ? in(g, *grad_hy, acc) : zero, gc = grad_cy ? in(g, *grad_cy, acc) : zero;
  auto one_minus = [&](Value x) { return f.sub(f.c(x, 1.0), x); };
  // d cy: from cy itself and through hy = o * tanh(cy).
  Value gcy = f.add(f.mul(f.mul(go, o), one_minus(f.mul(tanh_cy, tanh_cy))), gc);
  Value gi = f.mul(f.mul(gcy, c), f.mul(i, one_minus(i)));
  Value gf = f.mul(f.mul(gcy, in(g, cx, acc)), f.mul(fg, one_minus(fg)));
  Value gg = f.mul(f.mul(gcy, i), one_minus(f.mul(c, c)));
  Value gout = f.mul(f.mul(go, tanh_cy), f.mul(o, one_minus(o)));
  Value gates = ir::concatenate(g, {gi, gf, gg, gout}, g.type(w).rank() - 1);
  LstmCellGrad grad{in(g, gates, result), in(g, f.mul(gcy, fg), result), std::nullopt};
  if (has_bias) grad.bias = bias_grad(g, gates, result);
  return grad;
}

GruCell gru_cell(ir::Graph& g, Value input_gates, Value hidden_gates, Value hx, std::optional<Value> input_bias,
                 std::optional<Value> hidden_bias) {
  ir::DType result = g.type(input_gates).dtype, acc = accumulate_dtype(result);
  Formula f{g};
  Value x = with_bias(g, input_gates, input_bias, acc), h = with_bias(g, hidden_gates, hidden_bias, acc);
  auto sigmoid = [&](Value v) { return unary(g, Unary::Sigmoid, v); };
  Value r = sigmoid(f.add(chunk(g, x, 3, 0), chunk(g, h, 3, 0)));
  Value z = sigmoid(f.add(chunk(g, x, 3, 1), chunk(g, h, 3, 1)));
  Value hn = chunk(g, h, 3, 2);
  Value n = f.tanh(f.add(chunk(g, x, 3, 2), f.mul(r, hn)));
  Value h_old = in(g, hx, acc);
  Value hy = f.add(n, f.mul(z, f.sub(h_old, n)));
  int64_t last = g.type(x).rank() - 1;
  return {in(g, hy, result), in(g, ir::concatenate(g, {r, z, n, h_old, hn}, last), result)};
}

GruCellGrad gru_cell_backward(ir::Graph& g, Value grad_hy, Value workspace, bool has_bias) {
  ir::DType result = g.type(workspace).dtype, acc = accumulate_dtype(result);
  Formula f{g};
  Value w = in(g, workspace, acc), go = in(g, grad_hy, acc);
  Value r = chunk(g, w, 5, 0), z = chunk(g, w, 5, 1), n = chunk(g, w, 5, 2), hx = chunk(g, w, 5, 3),
        hn = chunk(g, w, 5, 4);
  auto one_minus = [&](Value v) { return f.sub(f.c(v, 1.0), v); };
  Value gz = f.mul(f.mul(go, f.sub(hx, n)), f.mul(z, one_minus(z)));
  Value gn = f.mul(f.mul(go, one_minus(z)), one_minus(f.mul(n, n)));
  Value ghn = f.mul(gn, r);
  Value gr = f.mul(f.mul(gn, hn), f.mul(r, one_minus(r)));
  int64_t last = g.type(w).rank() - 1;
  Value input_gates = ir::concatenate(g, {gr, gz, gn}, last);
  Value hidden_gates = ir::concatenate(g, {gr, gz, ghn}, last);
  GruCellGrad grad{in(g, input_gates, result), in(g, hidden_gates, result), in(g, f.mul(go, z), result),
                   std::nullopt, std::nullopt};
  if (has_bias) {
    grad.input_bias = bias_grad(g, input_gates, result);
    grad.hidden_bias = bias_grad(g, hidden_gates, result);
  }
  return grad;
}

}  // namespace tpu::lowering
