// Typed builders for the StableHLO operations the lowerings use. Each one
// computes its result type and renders its attributes in one place.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace tpu::ir {

using Dims = Ints;

// Constants. Floating values are rendered exactly (hex bit patterns).
Value constant(Graph& g, DType dtype, double value);
Value constant_int(Graph& g, DType dtype, int64_t value);
Value full(Graph& g, DType dtype, double value, const Shape& shape);
Value iota(Graph& g, DType dtype, const Shape& shape, int64_t dimension);

// Shape and layout.
Value convert(Graph& g, Value x, DType dtype);
Value bitcast_convert(Graph& g, Value x, DType dtype, const Shape& shape);
Value reshape(Graph& g, Value x, const Shape& shape);
// A rank-1 value's bytes (a storage's) seen as another element type.
Value reinterpret(Graph& g, Value storage, DType dtype);
Value broadcast_in_dim(Graph& g, Value x, const Shape& shape, const Dims& dims);
// Numpy-style broadcast of `x` (trailing dimensions aligned) to `shape`.
Value broadcast_to(Graph& g, Value x, const Shape& shape);
Value transpose(Graph& g, Value x, const Dims& permutation);
Value slice(Graph& g, Value x, const Dims& start, const Dims& limit, const Dims& strides = {});
Value dynamic_slice(Graph& g, Value x, const std::vector<Value>& start, const Shape& sizes);
Value dynamic_update_slice(Graph& g, Value x, Value update, const std::vector<Value>& start);
Value pad(Graph& g, Value x, Value padding_value, const Dims& low, const Dims& high);
Value concatenate(Graph& g, const std::vector<Value>& xs, int64_t dimension);

// Elementwise.
Value unary(Graph& g, Op op, Value x);
Value binary(Graph& g, Op op, Value a, Value b);  // same shapes required
enum class Compare { EQ, NE, LT, LE, GT, GE };
Value compare(Graph& g, Value a, Value b, Compare direction);
Value select(Graph& g, Value pred, Value on_true, Value on_false);

// Reductions, contractions and indexing.
// `init` must be the combiner's identity: a long reduction may be split in two.
Value reduce(Graph& g, Value x, Value init, const Dims& dims, Combiner combiner);
// Sorts `x` along `dimension` (stable) with comparator LessThan or GreaterThan.
// One operand only: sort keys and indices together by packing them into one
// integer when both are needed.
Value sort(Graph& g, Value x, int64_t dimension, Combiner comparator);
Value dot_general(Graph& g, Value a, Value b, const Dims& batch_a, const Dims& batch_b,
                  const Dims& contract_a, const Dims& contract_b, DType result_dtype);
// Collectives of a replicated graph (Graph::set_replicas): every replica runs the
// op on its own `x`, exchanging values with the replicas of its group. `groups`
// partition the replicas (indices 0..N-1); each group's order is its ranks'.
using ReplicaGroups = std::vector<Dims>;
Value all_reduce(Graph& g, Value x, Combiner combiner, const ReplicaGroups& groups);
// The group's values concatenated along `dim`, in rank order.
Value all_gather(Graph& g, Value x, int64_t dim, const ReplicaGroups& groups);
// The reduction of the group's values, split along `dim`; rank r keeps part r.
Value reduce_scatter(Graph& g, Value x, int64_t dim, Combiner combiner, const ReplicaGroups& groups);
// `x` split along `split_dim` into one part per rank; rank r sends part k to rank k
// and gets the parts sent to it concatenated along `concat_dim`, in rank order.
Value all_to_all(Graph& g, Value x, int64_t split_dim, int64_t concat_dim, const ReplicaGroups& groups);
// Replica `source` sends `x` to `target`, for each (source, target) pair; a
// replica no pair targets gets zeros.
Value collective_permute(Graph& g, Value x, const std::vector<std::pair<int64_t, int64_t>>& pairs);
// The index of the replica running the program (a u32 scalar).
Value replica_id(Graph& g);

// Loops (stablehlo.while). The regions see only the carried values: a value
// from outside the loop is used inside by carrying it unchanged.
using LoopCond = std::function<Value(Graph&, const std::vector<Value>& carried)>;  // -> tensor<i1>
using LoopBody = std::function<std::vector<Value>(Graph&, const std::vector<Value>& carried)>;
std::vector<Value> while_loop(Graph& g, const std::vector<Value>& init, const LoopCond& cond, const LoopBody& body);
// for i in [0, trip_count): carried = body(i, carried), with i an s64 scalar.
using ForBody = std::function<std::vector<Value>(Graph&, Value i, const std::vector<Value>& carried)>;
std::vector<Value> fori_loop(Graph& g, int64_t trip_count, const std::vector<Value>& init, const ForBody& body);
// out[i...] = x[indices[i...]] for a rank-1 x and an integer index tensor.
Value gather_1d(Graph& g, Value x, Value indices);
// x[indices[i...]] = updates[i...] (rank-1 x; a later duplicate index wins).
Value scatter_1d(Graph& g, Value x, Value indices, Value updates);

// ---- conv builders
// Where batch, feature and spatial dimensions sit in a convolution's operands
// and result; spatial entry i of each list is the same spatial axis.
struct ConvDims {
  int64_t input_batch = 0, input_feature = 1;
  Dims input_spatial;
  int64_t kernel_output = 0, kernel_input = 1;
  Dims kernel_spatial;
  int64_t output_batch = 0, output_feature = 1;
  Dims output_spatial;
  // [b, f, 0, 1, ...]x[o, i, 0, 1, ...]->[b, f, 0, 1, ...]
  static ConvDims channels_first(int64_t spatial_rank);
};
using Padding = std::vector<std::pair<int64_t, int64_t>>;  // (low, high) per spatial/window dim
Value convolution(Graph& g, Value lhs, Value rhs, const ConvDims& dn, const Dims& window_strides,
                  const Padding& padding, const Dims& lhs_dilation, const Dims& rhs_dilation,
                  int64_t feature_group_count, int64_t batch_group_count, DType result_dtype);
// Reduces every window of `x` (padded with `init`) with `combiner`.
Value reduce_window(Graph& g, Value x, Value init, const Dims& window_dimensions, const Dims& window_strides,
                    const Dims& base_dilations, const Dims& window_dilations, const Padding& padding,
                    Combiner combiner);
Value reverse(Graph& g, Value x, const Dims& dims);
// x[indices[i...]] = combiner(x[...], updates[i...]) for a rank-1 x; duplicate indices all combine.
Value scatter_1d_combine(Graph& g, Value x, Value indices, Value updates, Combiner combiner);

}  // namespace tpu::ir

// ---- index/shape builders
namespace tpu::ir {

// out[b..., w...] = x[indices[b...], w...]: whole rows of x (along dim 0)
// picked by an integer index tensor. Out-of-range rows are clamped to the
// valid range (StableHLO gather semantics): callers must check or say so.
Value gather_rows(Graph& g, Value x, Value indices);
// x[indices[b...], w...] = combine(x[...], updates[b..., w...]), combining
// duplicates with `combiner` (Replace: one of them wins). Rows outside x are
// dropped (StableHLO scatter semantics).
Value scatter_rows(Graph& g, Value x, Value indices, Value updates, Combiner combiner);

}  // namespace tpu::ir

// ---- nn builders
namespace tpu::ir {

// A constant tensor of `shape` holding `values` (row-major, numel(shape) of
// them) converted to `dtype`: host-computed tables such as interpolation weights.
Value constant_tensor(Graph& g, DType dtype, const Shape& shape, const std::vector<double>& values);
// pad() with interior padding: `interior[i]` padding values between adjacent elements of dim i.
Value pad_interior(Graph& g, Value x, Value padding_value, const Dims& low, const Dims& high, const Dims& interior);

}  // namespace tpu::ir

// ---- linalg factor builders
namespace tpu::ir {

// Solves op(a) x = b (left_side) or x op(a) = b for triangular `a`
// ([batch..., n, n]; b [batch..., n, k] or [batch..., k, n], same batch dims),
// op = transpose when `transpose_a`. Reads only the `lower`/upper triangle of a,
// and not its diagonal when `unit_diagonal`. Returns x, shaped like b.
Value triangular_solve(Graph& g, Value a, Value b, bool left_side, bool lower, bool unit_diagonal,
                       bool transpose_a);

}  // namespace tpu::ir

// ---- complex/fft builders
namespace tpu::ir {

// complex(re, im) from two real tensors of one type (F32 -> C64, F64 -> C128).
Value complex(Graph& g, Value re, Value im);
// The real / imaginary part of a complex tensor (real(x) = x, imag(x) = 0 for real x).
Value real(Graph& g, Value x);
Value imag(Graph& g, Value x);
// |x| of a complex tensor: a real tensor of x's part type.
Value complex_abs(Graph& g, Value x);
// stablehlo.fft over the innermost lengths.size() (1 to 3) dimensions. RFFT
// takes a real operand and keeps n/2+1 entries of the last dimension; IRFFT
// takes those and returns a real tensor whose last dimensions are `lengths`.
// IFFT and IRFFT divide by the product of the lengths.
enum class FftType { FFT, IFFT, RFFT, IRFFT };
Value fft(Graph& g, Value x, FftType type, const Dims& lengths);

}  // namespace tpu::ir
