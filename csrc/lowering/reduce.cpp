#include "lowering/reduce.h"

#include <algorithm>
#include <stdexcept>

namespace tpu::lowering {

ir::Dims reduction_dims(const std::vector<int64_t>& dims, int64_t rank) {
  ir::Dims out;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) {
    int64_t wrapped = d < 0 ? d + std::max<int64_t>(rank, 1) : d;
    if (wrapped < 0 || wrapped >= std::max<int64_t>(rank, 1))
      throw std::out_of_range("Dimension out of range (expected to be in range of [" +
                              std::to_string(-std::max<int64_t>(rank, 1)) + ", " +
                              std::to_string(std::max<int64_t>(rank, 1) - 1) + "], but got " + std::to_string(d) + ")");
    if (rank == 0) continue;  // reducing a 0-dim tensor over dim 0/-1 is the identity
    out.push_back(wrapped);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

ir::Value keep_dims(ir::Graph& g, ir::Value reduced, const ir::Shape& input_shape, const ir::Dims& dims) {
  ir::Shape shape = input_shape;
  for (int64_t d : dims) shape[d] = 1;
  return ir::reshape(g, reduced, shape);
}

ir::Value sum(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim, ir::DType accumulate,
              ir::DType result) {
  ir::Shape shape = g.type(x).shape;
  ir::Value acc = ir::convert(g, x, accumulate);
  ir::Value r = ir::reduce(g, acc, ir::constant(g, accumulate, 0), dims,
                           accumulate == ir::DType::Pred ? ir::Combiner::Or : ir::Combiner::Add);
  if (keepdim) r = keep_dims(g, r, shape, dims);
  return ir::convert(g, r, result);
}

ir::Value mean(ir::Graph& g, ir::Value x, const ir::Dims& dims, bool keepdim, ir::DType accumulate,
               ir::DType result) {
  ir::Shape shape = g.type(x).shape;
  int64_t count = 1;
  for (int64_t d : dims) count *= shape[d];
  ir::Value s = sum(g, x, dims, keepdim, accumulate, accumulate);
  // count == 0 gives 0/0 = NaN, as in ATen.
  ir::Value n = ir::full(g, accumulate, static_cast<double>(count), g.type(s).shape);
  return ir::convert(g, ir::binary(g, "stablehlo.divide", s, n), result);
}

}  // namespace tpu::lowering
