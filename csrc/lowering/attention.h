// Scaled dot-product attention, forward and backward, as one program each:
// what F.scaled_dot_product_attention runs on tpu (ATen's "overrideable"
// fused backend) instead of its ~20-op math decomposition.
//
// Shapes: q [B, Hq, L, E], k [B, Hk, S, E], v [B, Hk, S, Ev], with Hq a
// multiple of Hk (grouped-query attention: query head h reads key head
// h / (Hq / Hk), as repeat_interleave of k and v would). An optional additive
// bias (a pred one keeps where true) broadcasts to [B, Hq, L, S]; `causal`
// keeps key positions s <= l (top-left aligned, as PyTorch's is_causal).
// Rows with nothing kept give 0 (as ATen's _safe_softmax), not NaN.
// Everything is computed in the accumulation dtype (f32 for half types).
#pragma once

#include <array>
#include <optional>

#include "ir/graph.h"

namespace tpu::lowering {

struct AttentionForward {
  ir::Value out;        // [B, Hq, L, Ev] in `result`
  ir::Value logsumexp;  // [B, Hq, L] f32; -inf for a row with nothing kept
};
AttentionForward attention(ir::Graph& g, ir::Value q, ir::Value k, ir::Value v, std::optional<ir::Value> bias,
                           bool causal, double scale, ir::DType result);

struct AttentionGrads {
  ir::Value q, k, v, bias;  // invalid where the mask is false; bias summed to the bias's shape
};
// Gradients from grad_out [B, Hq, L, Ev]; the probabilities are recomputed.
AttentionGrads attention_backward(ir::Graph& g, ir::Value grad_out, ir::Value q, ir::Value k, ir::Value v,
                                  std::optional<ir::Value> bias, bool causal, double scale,
                                  std::array<bool, 4> mask);

}  // namespace tpu::lowering
