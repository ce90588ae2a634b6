#include "lowering/linalg.h"

namespace tpu::lowering {

ir::Value contract(ir::Graph& g, ir::Value a, ir::Value b, const ir::Dims& batch_a, const ir::Dims& batch_b,
                   const ir::Dims& contract_a, const ir::Dims& contract_b, ir::DType accumulate) {
  auto widen = [&](ir::Value v) {
    ir::DType t = g.type(v).dtype;
    bool half = t == ir::DType::F16 || t == ir::DType::BF16;
    return half && t != accumulate ? ir::convert(g, v, accumulate) : v;
  };
  return ir::dot_general(g, widen(a), widen(b), batch_a, batch_b, contract_a, contract_b, accumulate);
}

ir::Value matmul_2d(ir::Graph& g, ir::Value a, ir::Value b, ir::DType accumulate) {
  ir::DType dtype = g.type(a).dtype;
  return ir::convert(g, contract(g, a, b, {}, {}, {1}, {0}, accumulate), dtype);
}

ir::Value matmul_batched(ir::Graph& g, ir::Value a, ir::Value b, ir::DType accumulate) {
  ir::DType dtype = g.type(a).dtype;
  return ir::convert(g, contract(g, a, b, {0}, {0}, {2}, {1}, accumulate), dtype);
}

ir::Value cross(ir::Graph& g, ir::Value a, ir::Value b, int64_t dim) {
  const ir::Shape shape = g.type(a).shape;
  auto component = [&](ir::Value v, int64_t i) {
    ir::Dims lo(shape.size(), 0), hi(shape.begin(), shape.end());
    lo[dim] = i;
    hi[dim] = i + 1;
    return ir::slice(g, v, lo, hi);
  };
  auto term = [&](int64_t i, int64_t j) {  // a_i * b_j - a_j * b_i
    return ir::binary(g, ir::Op::Subtract, ir::binary(g, ir::Op::Multiply, component(a, i), component(b, j)),
                      ir::binary(g, ir::Op::Multiply, component(a, j), component(b, i)));
  };
  return ir::concatenate(g, {term(1, 2), term(2, 0), term(0, 1)}, dim);
}

}  // namespace tpu::lowering
