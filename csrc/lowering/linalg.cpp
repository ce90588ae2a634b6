#include "lowering/linalg.h"

namespace tpu::lowering {

ir::Value matmul_2d(ir::Graph& g, ir::Value a, ir::Value b, ir::DType accumulate) {
  ir::DType dtype = g.type(a).dtype;
  ir::Value r = ir::dot_general(g, a, b, {}, {}, {1}, {0}, accumulate);
  return ir::convert(g, r, dtype);
}

ir::Value matmul_batched(ir::Graph& g, ir::Value a, ir::Value b, ir::DType accumulate) {
  ir::DType dtype = g.type(a).dtype;
  ir::Value r = ir::dot_general(g, a, b, {0}, {0}, {2}, {1}, accumulate);
  return ir::convert(g, r, dtype);
}

}  // namespace tpu::lowering
