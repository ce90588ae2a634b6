// Neural-network layers and losses: softmax, layer and batch normalisation,
// nll / mse / binary cross-entropy losses, forward and backward. Reductions,
// keepdim and accumulation dtypes come from lowering/reduce.h; everything is
// computed in accumulate_dtype(...) and returned in the requested dtype.
#pragma once

#include <array>
#include <optional>
#include <utility>

#include "ir/graph.h"
#include "ir/ops.h"

namespace tpu::lowering {

using OptValue = std::optional<ir::Value>;

// softmax / log_softmax along `dim`, stabilised by subtracting the max.
ir::Value softmax(ir::Graph& g, ir::Value x, int64_t dim, ir::DType result);
ir::Value log_softmax(ir::Graph& g, ir::Value x, int64_t dim, ir::DType result);
// Gradients from the forward outputs.
ir::Value softmax_backward(ir::Graph& g, ir::Value grad, ir::Value output, int64_t dim, ir::DType result);
ir::Value log_softmax_backward(ir::Graph& g, ir::Value grad, ir::Value output, int64_t dim, ir::DType result);

// Normalisation of x over `dims` given its mean and inverse standard
// deviation (both shaped with kept dims, or per channel), then
// weight * x_hat + bias where weight/bias broadcast along `param_dims`.
struct NormForward {
  ir::Value out;
  ir::Value mean;    // accumulation dtype, kept dims
  ir::Value invstd;  // accumulation dtype, kept dims
  ir::Value var;     // biased variance, accumulation dtype, kept dims
};
// Layer norm: statistics over dims [axis, rank).
NormForward layer_norm(ir::Graph& g, ir::Value x, int64_t axis, OptValue weight, OptValue bias, double eps,
                       ir::DType result);
// Group norm: x is [N, C, *] and not empty, statistics per (n, group) over
// the group's channels and every trailing dim (mean/invstd/var shaped
// [N, groups]); weight/bias per channel.
NormForward group_norm(ir::Graph& g, ir::Value x, int64_t groups, OptValue weight, OptValue bias, double eps,
                       ir::DType result);
// Batch norm in training: statistics over every dim but 1 (the channels).
NormForward batch_norm_train(ir::Graph& g, ir::Value x, OptValue weight, OptValue bias, double eps,
                             ir::DType result);
// Batch norm from given per-channel mean and variance.
ir::Value batch_norm_eval(ir::Graph& g, ir::Value x, OptValue weight, OptValue bias, ir::Value mean, ir::Value var,
                          double eps, ir::DType result);

// 1 / sqrt(var + eps) in the accumulation dtype.
ir::Value inverse_std(ir::Graph& g, ir::Value var, double eps);

struct NormGrads {
  ir::Value input, weight, bias;  // invalid where the mask is false or no weight
};
// Layer norm backward; mean/rstd in any float dtype, shaped x.shape[:axis].
NormGrads layer_norm_backward(ir::Graph& g, ir::Value grad, ir::Value x, int64_t axis, ir::Value mean,
                              ir::Value rstd, OptValue weight, std::array<bool, 3> mask, ir::DType result,
                              ir::DType param_result);
// Group norm backward: x is [N, C, *], mean/rstd [N, groups] (any float
// dtype), weight per channel.
NormGrads group_norm_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value mean, ir::Value rstd,
                              OptValue weight, int64_t groups, std::array<bool, 3> mask, ir::DType result,
                              ir::DType param_result);
// Batch norm backward; mean/invstd per channel. In training the batch
// statistics depend on x; in eval they are constants.
NormGrads batch_norm_backward(ir::Graph& g, ir::Value grad, ir::Value x, OptValue weight, ir::Value mean,
                              ir::Value invstd, bool train, std::array<bool, 3> mask, ir::DType result,
                              ir::DType param_result);

// ATen's loss reductions (at::Reduction).
enum class Reduction : int64_t { None = 0, Mean = 1, Sum = 2 };
ir::Value reduce_loss(ir::Graph& g, ir::Value loss, Reduction reduction);

struct NllForward {
  ir::Value output;
  ir::Value total_weight;
};
// Negative log likelihood of `input` ([N, C, ...] or [C]) at integer `target`
// ([N, ...] or []), with optional class weights and an ignored class.
NllForward nll_loss(ir::Graph& g, ir::Value input, ir::Value target, OptValue weight, Reduction reduction,
                    int64_t ignore_index, ir::DType result);
ir::Value nll_loss_backward(ir::Graph& g, ir::Value grad, ir::Value input, ir::Value target, OptValue weight,
                            Reduction reduction, int64_t ignore_index, ir::Value total_weight, ir::DType result);

// Elementwise losses; operands share one shape.
ir::Value mse_loss(ir::Graph& g, ir::Value x, ir::Value target, Reduction reduction, ir::DType result);
ir::Value mse_loss_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value target, Reduction reduction,
                            ir::DType result);
ir::Value binary_cross_entropy(ir::Graph& g, ir::Value x, ir::Value target, OptValue weight, Reduction reduction,
                               ir::DType result);
ir::Value binary_cross_entropy_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value target,
                                        OptValue weight, Reduction reduction, ir::DType result);
// (1 - t) * x - (1 + (pos_weight - 1) * t) * log_sigmoid(x), times weight.
ir::Value binary_cross_entropy_with_logits(ir::Graph& g, ir::Value x, ir::Value target, OptValue weight,
                                           OptValue pos_weight, Reduction reduction, ir::DType result);

// ------------------------------------------------------------ more activations and losses
// Elementwise pieces take operands of one shape and dtype (the compute dtype).

// x in [-lambd, lambd] -> 0, else x.
ir::Value hardshrink(ir::Graph& g, ir::Value x, ir::Value lambd);
ir::Value hardshrink_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value lambd);
// x -/+ lambd outside [-lambd, lambd], else 0 (NaN stays NaN).
ir::Value softshrink(ir::Graph& g, ir::Value x, ir::Value lambd);
ir::Value softshrink_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value lambd);
// x <= threshold -> value, else x.
ir::Value threshold(ir::Graph& g, ir::Value x, ir::Value threshold, ir::Value value);
// min(x, 0) - log1p(exp(-|x|)) and its derivative sigmoid(-x) times grad.
ir::Value log_sigmoid(ir::Graph& g, ir::Value x);
ir::Value log_sigmoid_backward(ir::Graph& g, ir::Value grad, ir::Value x);
// x > 0 ? x : w * x, and its gradients with respect to x and w.
ir::Value prelu(ir::Graph& g, ir::Value x, ir::Value w);
std::pair<ir::Value, ir::Value> prelu_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value w);

// Weight normalisation over every dim but `dim` (0 or the last), all in one
// floating dtype: norms = ||v|| kept as g's shape, w = v * (g / norms).
struct WeightNorm {
  ir::Value w, norms;
};
WeightNorm weight_norm(ir::Graph& g, ir::Value v, ir::Value gain, int64_t dim);
// Its gradients from grad_w and the saved v, g and norms: grad_g = sum(grad_w * v) / norms,
// grad_v = (g / norms) * (grad_w - v * grad_g / norms).
std::pair<ir::Value, ir::Value> weight_norm_backward(ir::Graph& g, ir::Value grad_w, ir::Value v, ir::Value gain,
                                                     ir::Value norms, int64_t dim);
// a * sigmoid(b) for the two halves of x along `dim`; the backward returns the gradient of x.
ir::Value glu(ir::Graph& g, ir::Value x, int64_t dim);
ir::Value glu_backward(ir::Graph& g, ir::Value grad, ir::Value x, int64_t dim);

// Huber (delta) and smooth L1 (beta) losses; operands share one shape, grad
// is that shape (Reduction::None) or a scalar.
ir::Value huber_loss(ir::Graph& g, ir::Value x, ir::Value target, Reduction reduction, double delta,
                     ir::DType result);
ir::Value huber_loss_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value target, Reduction reduction,
                              double delta, ir::DType result);
ir::Value smooth_l1_loss(ir::Graph& g, ir::Value x, ir::Value target, Reduction reduction, double beta,
                         ir::DType result);
ir::Value smooth_l1_loss_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value target, Reduction reduction,
                                  double beta, ir::DType result);

// Multi-class hinge loss of x [N, C] at integer target [N]: per sample
// sum_{i != y} w[y] * max(0, margin - x[y] + x[i])^p / C.
ir::Value multi_margin_loss(ir::Graph& g, ir::Value x, ir::Value target, int64_t p, double margin, OptValue weight,
                            Reduction reduction, ir::DType result);
ir::Value multi_margin_loss_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value target, int64_t p,
                                     double margin, OptValue weight, Reduction reduction, ir::DType result);
// Multi-label hinge loss of x [N, C] at target [N, C] (class lists ended by -1).
struct MultilabelForward {
  ir::Value output;
  ir::Value is_target;  // [N, C] in `result`: 1 where the class is a target
};
MultilabelForward multilabel_margin_loss(ir::Graph& g, ir::Value x, ir::Value target, Reduction reduction,
                                         ir::DType result);
ir::Value multilabel_margin_loss_backward(ir::Graph& g, ir::Value grad, ir::Value x, ir::Value target,
                                          Reduction reduction, ir::DType result);

// embedding_bag: rows of weight [V, D] picked by indices [L], reduced per bag
// (bags start at offsets[b], b < B) by sum (optionally weighted per sample),
// mean or max; entries equal to padding_idx (>= 0) are skipped. Empty bags give 0.
enum class BagMode : int64_t { Sum = 0, Mean = 1, Max = 2 };
struct BagForward {
  ir::Value output;       // [B, D] in `result`
  ir::Value offset2bag;   // [L] s64: the bag of each index
  ir::Value bag_size;     // [B] s64: indices counted per bag
  ir::Value max_indices;  // [B, D] s64 (max mode; -1 for empty bags), else [B] zeros
};
BagForward embedding_bag(ir::Graph& g, ir::Value weight, ir::Value indices, ir::Value offsets, int64_t bags,
                         BagMode mode, OptValue per_sample_weights, int64_t padding_idx, ir::DType result);
// Dense gradient of weight [num_weights, D] from grad [B, D].
ir::Value embedding_bag_backward(ir::Graph& g, ir::Value grad, ir::Value indices, ir::Value offset2bag,
                                 ir::Value bag_size, ir::Value max_indices, int64_t num_weights,
                                 bool scale_grad_by_freq, BagMode mode, OptValue per_sample_weights,
                                 int64_t padding_idx, ir::DType result);
// Gradient of the per-sample weights [L] (sum mode): <grad[bag(i)], weight[indices[i]]>.
ir::Value embedding_bag_per_sample_weights_backward(ir::Graph& g, ir::Value grad, ir::Value weight,
                                                    ir::Value indices, ir::Value offset2bag, int64_t padding_idx,
                                                    ir::DType result);

// embedding_renorm_: the rows of weight [V, D] named by `indices` (rank 1,
// s64, in range) whose p-norm exceeds max_norm are scaled by
// max_norm / (norm + 1e-7); returns the whole new weight. `max_norm` is a
// scalar of the accumulation dtype.
ir::Value embedding_renorm(ir::Graph& g, ir::Value weight, ir::Value indices, ir::Value max_norm, double norm_type);

// CTC loss (ATen's CPU algorithm in log space): log_probs [T, N, C],
// targets [N, L] (s64, padded), input/target lengths [N] (s64 values, so
// changing lengths do not recompile), blank class index. The recursions over
// time are unrolled T times (the IR has no loops): fine for the sequence
// lengths of tests and small models, a long compile for long sequences.
struct CtcForward {
  ir::Value nll;        // [N]
  ir::Value log_alpha;  // [N, T, 2 L + 1]; -inf (or stale) outside each sequence
};
CtcForward ctc_loss(ir::Graph& g, ir::Value log_probs, ir::Value targets, ir::Value input_lengths,
                    ir::Value target_lengths, int64_t blank);
// Gradient of log_probs [T, N, C] from grad [N] of the per-sequence nll; zero
// past each input length, and for infinite losses when zero_infinity.
ir::Value ctc_loss_backward(ir::Graph& g, ir::Value grad, ir::Value log_probs, ir::Value targets,
                            ir::Value input_lengths, ir::Value target_lengths, ir::Value nll, ir::Value log_alpha,
                            int64_t blank, bool zero_infinity);

}  // namespace tpu::lowering
