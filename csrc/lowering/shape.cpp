#include "lowering/shape.h"

namespace tpu::lowering {

using ir::DType;
using ir::Value;

Value triangular(ir::Graph& g, Value x, int64_t diagonal, bool lower) {
  const ir::Type t = g.type(x);
  int64_t r = t.rank();
  // col - row compared with the diagonal, over the last two dims.
  Value row = ir::iota(g, DType::S64, t.shape, r - 2);
  Value col = ir::iota(g, DType::S64, t.shape, r - 1);
  Value offset = ir::binary(g, ir::Op::Subtract, col, row);
  Value diag = ir::full(g, DType::S64, static_cast<double>(diagonal), t.shape);
  Value keep = ir::compare(g, offset, diag, lower ? ir::Compare::LE : ir::Compare::GE);
  return ir::select(g, keep, x, ir::full(g, t.dtype, 0, t.shape));
}

Value roll(ir::Graph& g, Value x, const ir::Dims& shifts, const ir::Dims& dims) {
  ir::Shape shape = g.type(x).shape;
  if (dims.empty()) {  // roll the flattened tensor, then restore the shape
    int64_t n = ir::numel(shape);
    return ir::reshape(g, roll(g, ir::reshape(g, x, {n}), shifts, {0}), shape);
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = dims[i], n = shape[d], s = shifts[i];
    if (n == 0 || s == 0) continue;
    // out[j] = x[(j - s) mod n]: the last s elements come first.
    ir::Dims start(shape.size(), 0), limit = shape;
    start[d] = n - s;
    Value tail = ir::slice(g, x, start, limit);
    start[d] = 0;
    limit[d] = n - s;
    Value head = ir::slice(g, x, start, limit);
    x = ir::concatenate(g, {tail, head}, d);
  }
  return x;
}

Value pad_constant(ir::Graph& g, Value x, const ir::Dims& low, const ir::Dims& high, Value value) {
  return ir::pad(g, x, value, low, high);
}

Value repeat(ir::Graph& g, Value x, const ir::Dims& repeats) {
  ir::Shape shape = g.type(x).shape;
  ir::Shape tiled, result;
  ir::Dims dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    tiled.push_back(repeats[d]);
    dims.push_back(static_cast<int64_t>(tiled.size()));
    tiled.push_back(shape[d]);
    result.push_back(repeats[d] * shape[d]);
  }
  return ir::reshape(g, ir::broadcast_in_dim(g, x, tiled, dims), result);
}

Value arange(ir::Graph& g, Value start, Value step, int64_t size, DType compute, DType result) {
  ir::Shape shape{size};
  Value i = ir::convert(g, ir::iota(g, DType::S64, shape, 0), compute);  // exact beyond 2^24
  Value v = ir::binary(g, ir::Op::Multiply, ir::broadcast_in_dim(g, step, shape, {}), i);
  v = ir::binary(g, ir::Op::Add, ir::broadcast_in_dim(g, start, shape, {}), v);
  return ir::convert(g, v, result);
}

Value linspace(ir::Graph& g, Value start, Value end, Value step, int64_t size, DType compute, DType result) {
  ir::Shape shape{size};
  Value i = ir::convert(g, ir::iota(g, DType::S64, shape, 0), compute);  // exact beyond 2^24
  Value stepv = ir::broadcast_in_dim(g, step, shape, {});
  Value front = ir::binary(g, ir::Op::Add, ir::broadcast_in_dim(g, start, shape, {}),
                           ir::binary(g, ir::Op::Multiply, stepv, i));
  Value from_end = ir::binary(g, ir::Op::Subtract, ir::full(g, compute, static_cast<double>(size - 1), shape), i);
  Value back = ir::binary(g, ir::Op::Subtract, ir::broadcast_in_dim(g, end, shape, {}),
                          ir::binary(g, ir::Op::Multiply, stepv, from_end));
  Value first_half = ir::compare(g, ir::iota(g, DType::S64, shape, 0), ir::full(g, DType::S64, size / 2, shape),
                                 ir::Compare::LT);
  return ir::convert(g, ir::select(g, first_half, front, back), result);
}

}  // namespace tpu::lowering
