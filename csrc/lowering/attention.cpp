#include "lowering/attention.h"

#include <limits>

#include "ir/ops.h"
#include "lowering/linalg.h"
#include "lowering/reduce.h"

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

constexpr double kInf = std::numeric_limits<double>::infinity();

Value mul(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Multiply, a, b); }
Value sub(ir::Graph& g, Value a, Value b) { return ir::binary(g, ir::Op::Subtract, a, b); }
Value full_like(ir::Graph& g, Value x, double v) { return ir::full(g, g.type(x).dtype, v, g.type(x).shape); }
Value eq(ir::Graph& g, Value x, double v) { return ir::compare(g, x, full_like(g, x, v), ir::Compare::EQ); }

// The attention's sizes; query heads are grouped [B, Hk, G, L, *] so that each
// group of G query heads meets its key head in one batched contraction.
struct Sizes {
  int64_t b, hk, groups, l, s;
  ir::Shape grouped(int64_t last) const { return {b, hk, groups, l, last}; }
  ir::Shape heads(int64_t last) const { return {b, hk * groups, l, last}; }
};
Sizes sizes_of(ir::Graph& g, Value q, Value k) {
  const ir::Shape qs = g.type(q).shape, ks = g.type(k).shape;
  return {qs[0], ks[1], qs[1] / ks[1], qs[2], ks[2]};
}

Value widen(ir::Graph& g, Value x) { return ir::convert(g, x, accumulate_dtype(g.type(x).dtype)); }

// The probabilities [B, Hk, G, L, S] (0 where masked, rows with nothing kept
// all 0), with each row's shift and sum for the log-sum-exp.
struct Probabilities {
  Value p, shift, sum;
};
Probabilities probabilities(ir::Graph& g, const Sizes& n, Value qg, Value ka, std::optional<Value> bias,
                            bool causal, double scale) {
  DType acc = g.type(qg).dtype;
  const ir::Shape shape = n.grouped(n.s);
  Value s = contract(g, qg, ka, {0, 1}, {0, 1}, {4}, {3}, acc);
  s = mul(g, s, ir::full(g, acc, scale, shape));
  if (bias) {
    Value b = ir::broadcast_to(g, *bias, n.heads(n.s));
    b = g.type(b).dtype == DType::Pred ? ir::select(g, b, ir::full(g, acc, 0, n.heads(n.s)),
                                                    ir::full(g, acc, -kInf, n.heads(n.s)))
                                       : ir::convert(g, b, acc);
    s = ir::binary(g, ir::Op::Add, s, ir::reshape(g, b, shape));
  }
  if (causal) {
    const ir::Shape ls{n.l, n.s};
    Value keep = ir::compare(g, ir::iota(g, DType::S64, ls, 1), ir::iota(g, DType::S64, ls, 0), ir::Compare::LE);
    s = ir::select(g, ir::broadcast_in_dim(g, keep, shape, {3, 4}), s, ir::full(g, acc, -kInf, shape));
  }
  // A row whose every score is -inf shifts by 0: exp gives 0s, not NaNs.
  Value m = shift_max(g, s, {4});
  m = ir::select(g, eq(g, m, -kInf), full_like(g, m, 0), m);
  Value e = ir::unary(g, ir::Op::Exponential, sub(g, s, expand_reduced(g, m, shape, {4})));
  Value sum = lowering::sum(g, e, {4}, false, acc, acc);
  Value safe = ir::select(g, eq(g, sum, 0), full_like(g, sum, 1), sum);
  return {ir::binary(g, ir::Op::Divide, e, expand_reduced(g, safe, shape, {4})), m, sum};
}

}  // namespace

AttentionForward attention(ir::Graph& g, Value q, Value k, Value v, std::optional<Value> bias, bool causal,
                           double scale, DType result) {
  const Sizes n = sizes_of(g, q, k);
  const int64_t e = g.type(q).shape[3], ev = g.type(v).shape[3];
  Value qg = ir::reshape(g, widen(g, q), n.grouped(e));
  Value va = widen(g, v);
  Probabilities pr = probabilities(g, n, qg, widen(g, k), bias, causal, scale);
  Value out = contract(g, pr.p, va, {0, 1}, {0, 1}, {4}, {2}, g.type(va).dtype);
  Value lse = ir::binary(g, ir::Op::Add, pr.shift, ir::unary(g, ir::Op::Log, pr.sum));
  return {ir::convert(g, ir::reshape(g, out, n.heads(ev)), result),
          ir::convert(g, ir::reshape(g, lse, {n.b, n.hk * n.groups, n.l}), DType::F32)};
}

AttentionGrads attention_backward(ir::Graph& g, Value grad_out, Value q, Value k, Value v,
                                  std::optional<Value> bias, bool causal, double scale, std::array<bool, 4> mask) {
  const Sizes n = sizes_of(g, q, k);
  const int64_t e = g.type(q).shape[3], ev = g.type(v).shape[3];
  const DType qt = g.type(q).dtype, kt = g.type(k).dtype, vt = g.type(v).dtype;
  Value qg = ir::reshape(g, widen(g, q), n.grouped(e));
  Value ka = widen(g, k), va = widen(g, v);
  DType acc = g.type(ka).dtype;
  Value go = ir::reshape(g, ir::convert(g, grad_out, acc), n.grouped(ev));
  Value p = probabilities(g, n, qg, ka, bias, causal, scale).p;
  AttentionGrads r;
  // A group's query heads all read one key head: their gradients sum into it.
  if (mask[2]) r.v = ir::convert(g, contract(g, p, go, {0, 1}, {0, 1}, {2, 3}, {2, 3}, acc), vt);
  if (!(mask[0] || mask[1] || mask[3])) return r;
  const ir::Shape shape = n.grouped(n.s);
  Value dp = contract(g, go, va, {0, 1}, {0, 1}, {4}, {3}, acc);
  Value row = lowering::sum(g, mul(g, p, dp), {4}, false, acc, acc);
  Value ds = mul(g, p, sub(g, dp, expand_reduced(g, row, shape, {4})));  // the scores' gradient
  if (mask[3] && bias) {
    const ir::Shape bs = g.type(*bias).shape, full = n.heads(n.s);
    Value d = ir::reshape(g, ds, full);
    ir::Dims dims;  // the dims the bias was broadcast along
    const int64_t lead = static_cast<int64_t>(full.size() - bs.size());
    for (int64_t i = 0; i < static_cast<int64_t>(full.size()); ++i)
      if (i < lead || (bs[i - lead] == 1 && full[i] != 1)) dims.push_back(i);
    if (!dims.empty()) d = lowering::sum(g, d, dims, false, acc, acc);
    r.bias = ir::convert(g, ir::reshape(g, d, bs), g.type(*bias).dtype);
  }
  Value scaled = mul(g, ds, ir::full(g, acc, scale, shape));
  if (mask[0])
    r.q = ir::convert(g, ir::reshape(g, contract(g, scaled, ka, {0, 1}, {0, 1}, {4}, {2}, acc), n.heads(e)), qt);
  if (mask[1]) r.k = ir::convert(g, contract(g, scaled, qg, {0, 1}, {0, 1}, {2, 3}, {2, 3}, acc), kt);
  return r;
}

}  // namespace tpu::lowering
