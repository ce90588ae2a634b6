// The fused recurrent cells PyTorch's LSTM and GRU layers (and LSTMCell,
// GRUCell) call on a privateuse1 device: ATen's contract (shapes, optional
// biases and gradients); the math is lowering/rnn.*. One program per call.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/op_helpers.h"
#include "lowering/rnn.h"

namespace tpu::aten {
namespace {

at::Tensor like(const at::Tensor& t, c10::IntArrayRef shape) { return at::empty(shape, t.options()); }

// Gates [..., k * hidden] with a state of [..., hidden] and biases of [k * hidden], as ATen checks them.
void check_cell(const char* name, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const at::Tensor& state, const OptTensor& input_bias, const OptTensor& hidden_bias, int64_t k) {
  TORCH_CHECK(input_gates.dim() >= 1 && input_gates.sizes() == hidden_gates.sizes(), name,
              ": input_gates and hidden_gates must have the same shape, got ", input_gates.sizes(), " and ",
              hidden_gates.sizes());
  int64_t gates = input_gates.size(-1);
  TORCH_CHECK(gates % k == 0, name, ": the gates' last dimension (", gates, ") must be ", k, " times the hidden size");
  std::vector<int64_t> expected(input_gates.sizes().begin(), input_gates.sizes().end());
  expected.back() = gates / k;
  TORCH_CHECK(state.sizes() == c10::IntArrayRef(expected), name, ": the state must have shape ",
              c10::IntArrayRef(expected), ", got ", state.sizes());
  TORCH_CHECK(defined(input_bias) == defined(hidden_bias), name, ": input_bias and hidden_bias must be both given or both None");
  for (const OptTensor* bias : {&input_bias, &hidden_bias})
    TORCH_CHECK(!defined(*bias) || ((*bias)->dim() == 1 && (*bias)->size(0) == gates), name,
                ": a bias must have shape [", gates, "], got ", (*bias)->sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                         const at::Tensor& cx, const OptTensor& input_bias,
                                                         const OptTensor& hidden_bias) {
  check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias, hidden_bias, 4);
  c10::DeviceGuard guard(input_gates.device());
  at::Tensor hy = like(input_gates, cx.sizes()), cy = like(input_gates, cx.sizes());
  at::Tensor workspace = like(input_gates, input_gates.sizes());
  Program p("_thnn_fused_lstm_cell", input_gates.device());
  lowering::LstmCell cell = lowering::lstm_cell(p.graph(), p.read(input_gates), p.read(hidden_gates), p.read(cx),
                                                read_opt(p, input_bias), read_opt(p, hidden_bias));
  p.write(hy, cell.hy);
  p.write(cy, cell.cy);
  p.write(workspace, cell.workspace);
  p.run();
  return {hy, cy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const OptTensor& grad_hy, const OptTensor& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK(workspace.dim() >= 1 && workspace.size(-1) == 4 * cx.size(-1) && cx.sizes() == cy.sizes(),
              "_thnn_fused_lstm_cell_backward_impl: workspace ", workspace.sizes(), " does not match the state ",
              cx.sizes());
  if (!defined(grad_hy) && !defined(grad_cy)) return {at::Tensor(), at::Tensor(), at::Tensor()};
  c10::DeviceGuard guard(workspace.device());
  at::Tensor grad_gates = like(workspace, workspace.sizes()), grad_cx = like(workspace, cx.sizes());
  at::Tensor grad_bias = has_bias ? like(workspace, {workspace.size(-1)}) : at::Tensor();
  Program p("_thnn_fused_lstm_cell_backward_impl", workspace.device());
  lowering::LstmCellGrad grad = lowering::lstm_cell_backward(p.graph(), read_opt(p, grad_hy), read_opt(p, grad_cy),
                                                             p.read(cx), p.read(cy), p.read(workspace), has_bias);
  p.write(grad_gates, grad.gates);
  p.write(grad_cx, grad.cx);
  if (has_bias) p.write(grad_bias, *grad.bias);
  p.run();
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const OptTensor& input_bias,
                                            const OptTensor& hidden_bias) {
  check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, input_bias, hidden_bias, 3);
  c10::DeviceGuard guard(input_gates.device());
  std::vector<int64_t> wide(hx.sizes().begin(), hx.sizes().end());
  wide.back() *= 5;
  at::Tensor hy = like(input_gates, hx.sizes()), workspace = like(input_gates, wide);
  Program p("_thnn_fused_gru_cell", input_gates.device());
  lowering::GruCell cell = lowering::gru_cell(p.graph(), p.read(input_gates), p.read(hidden_gates), p.read(hx),
                                              read_opt(p, input_bias), read_opt(p, hidden_bias));
  p.write(hy, cell.hy);
  p.write(workspace, cell.workspace);
  p.run();
  return {hy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK(workspace.dim() >= 1 && workspace.size(-1) == 5 * grad_hy.size(-1),
              "_thnn_fused_gru_cell_backward: workspace ", workspace.sizes(), " does not match grad_hy ",
              grad_hy.sizes());
  c10::DeviceGuard guard(workspace.device());
  std::vector<int64_t> gates(grad_hy.sizes().begin(), grad_hy.sizes().end());
  gates.back() *= 3;
  at::Tensor grad_input = like(workspace, gates), grad_hidden = like(workspace, gates);
  at::Tensor grad_hx = like(workspace, grad_hy.sizes());
  at::Tensor grad_input_bias = has_bias ? like(workspace, {gates.back()}) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? like(workspace, {gates.back()}) : at::Tensor();
  Program p("_thnn_fused_gru_cell_backward", workspace.device());
  lowering::GruCellGrad grad = lowering::gru_cell_backward(p.graph(), p.read(grad_hy), p.read(workspace), has_bias);
  p.write(grad_input, grad.input_gates);
  p.write(grad_hidden, grad.hidden_gates);
  p.write(grad_hx, grad.hx);
  if (has_bias) {
    p.write(grad_input_bias, *grad.input_bias);
    p.write(grad_hidden_bias, *grad.hidden_bias);
  }
  p.run();
  return {grad_input, grad_hidden, grad_hx, grad_input_bias, grad_hidden_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace tpu::aten
