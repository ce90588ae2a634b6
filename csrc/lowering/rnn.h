// The fused LSTM and GRU cells that PyTorch's recurrent layers call on an
// accelerator (aten::_thnn_fused_lstm_cell / _thnn_fused_gru_cell and their
// backward): the gate nonlinearities and state updates of one time step, given
// the gates' matrix products. Gates are [..., k * hidden] in PyTorch's order
// (LSTM: input, forget, cell, output; GRU: reset, update, new); biases are
// [k * hidden]. Computed in accumulate_dtype(...) (float for half types),
// returned in the gates' dtype. The workspace holds what backward needs, laid
// out as CUDA's kernels lay it out.
#pragma once

#include <optional>

#include "ir/graph.h"

namespace tpu::lowering {

struct LstmCell {
  ir::Value hy, cy;
  ir::Value workspace;  // [..., 4 * hidden]: the activated gates i, f, g, o
};
LstmCell lstm_cell(ir::Graph& g, ir::Value input_gates, ir::Value hidden_gates, ir::Value cx,
                   std::optional<ir::Value> input_bias, std::optional<ir::Value> hidden_bias);

struct LstmCellGrad {
  ir::Value gates;                // [..., 4 * hidden]: for the input and the hidden gates alike
  ir::Value cx;
  std::optional<ir::Value> bias;  // [4 * hidden], when the cell had biases
};
// Missing output gradients count as zeros.
LstmCellGrad lstm_cell_backward(ir::Graph& g, std::optional<ir::Value> grad_hy, std::optional<ir::Value> grad_cy,
                                ir::Value cx, ir::Value cy, ir::Value workspace, bool has_bias);

struct GruCell {
  ir::Value hy;
  ir::Value workspace;  // [..., 5 * hidden]: r, z, n, hx, and the hidden new-gate (with its bias)
};
GruCell gru_cell(ir::Graph& g, ir::Value input_gates, ir::Value hidden_gates, ir::Value hx,
                 std::optional<ir::Value> input_bias, std::optional<ir::Value> hidden_bias);

struct GruCellGrad {
  ir::Value input_gates, hidden_gates, hx;
  std::optional<ir::Value> input_bias, hidden_bias;  // when the cell had biases
};
GruCellGrad gru_cell_backward(ir::Graph& g, ir::Value grad_hy, ir::Value workspace, bool has_bias);

}  // namespace tpu::lowering
