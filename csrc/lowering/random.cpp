#include "lowering/random.h"

#include <cmath>

#include "ir/ops.h"

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

Value u32(ir::Graph& g, int64_t value, int64_t n) { return ir::full(g, DType::U32, static_cast<double>(value), {n}); }

Value rotate_left(ir::Graph& g, Value x, int bits, int64_t n) {
  Value left = ir::binary(g, ir::Op::ShiftLeft, x, u32(g, bits, n));
  Value right = ir::binary(g, ir::Op::ShiftRightLogical, x, u32(g, 32 - bits, n));
  return ir::binary(g, ir::Op::Or, left, right);
}

}  // namespace

RandomBits random_bits(ir::Graph& g, Value seed, Value offset, int64_t n) {
  // Key words from the seed, counter words from offset + i.
  Value shift32 = ir::constant_int(g, DType::U64, 32);
  Value k0 = ir::convert(g, seed, DType::U32);
  Value k1 = ir::convert(g, ir::binary(g, ir::Op::ShiftRightLogical, seed, shift32), DType::U32);
  Value counter = ir::binary(g, ir::Op::Add, ir::iota(g, DType::U64, {n}, 0),
                             ir::broadcast_in_dim(g, offset, {n}, {}));
  Value c0 = ir::convert(g, counter, DType::U32);
  Value c1 = ir::convert(g, ir::binary(g, ir::Op::ShiftRightLogical, counter,
                                       ir::broadcast_in_dim(g, shift32, {n}, {})),
                         DType::U32);
  Value parity = ir::constant_int(g, DType::U32, 0x1BD11BDA);
  Value ks[3] = {k0, k1, ir::binary(g, ir::Op::Xor, parity, ir::binary(g, ir::Op::Xor, k0, k1))};
  auto key = [&](int i) { return ir::broadcast_in_dim(g, ks[i % 3], {n}, {}); };

  static const int kRotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  Value x0 = ir::binary(g, ir::Op::Add, c0, key(0));
  Value x1 = ir::binary(g, ir::Op::Add, c1, key(1));
  for (int round = 0; round < 20; ++round) {
    x0 = ir::binary(g, ir::Op::Add, x0, x1);
    x1 = rotate_left(g, x1, kRotations[round % 8], n);
    x1 = ir::binary(g, ir::Op::Xor, x1, x0);
    if (round % 4 == 3) {  // key injection every four rounds
      int s = round / 4 + 1;
      x0 = ir::binary(g, ir::Op::Add, x0, key(s));
      x1 = ir::binary(g, ir::Op::Add, ir::binary(g, ir::Op::Add, x1, key(s + 1)), u32(g, s, n));
    }
  }
  return RandomBits{x0, x1};
}

Value uniform_01(ir::Graph& g, Value word, DType dtype) {
  int64_t n = g.type(word).shape[0];
  // The top 24 bits scaled by 2^-24: exactly representable, in [0, 1).
  Value top = ir::binary(g, ir::Op::ShiftRightLogical, word, u32(g, 8, n));
  Value f = ir::binary(g, ir::Op::Multiply, ir::convert(g, top, DType::F32),
                       ir::full(g, DType::F32, 1.0 / 16777216.0, {n}));
  Value out = ir::convert(g, f, dtype);
  if (dtype == DType::F32 || dtype == DType::F64) return out;
  // Rounding to a narrower type can produce 1.0: fold it back to 0, keeping [0, 1).
  Value one = ir::full(g, dtype, 1.0, {n});
  return ir::select(g, ir::compare(g, out, one, ir::Compare::GE), ir::full(g, dtype, 0.0, {n}), out);
}

Value standard_normal(ir::Graph& g, const RandomBits& bits, DType dtype) {
  int64_t n = g.type(bits.word0).shape[0];
  // u1 in (0, 1] so that log(u1) is finite.
  Value u1 = ir::binary(g, ir::Op::Subtract, ir::full(g, DType::F32, 1.0, {n}), uniform_01(g, bits.word0, DType::F32));
  Value u2 = uniform_01(g, bits.word1, DType::F32);
  Value radius = ir::unary(g, ir::Op::Sqrt, ir::binary(g, ir::Op::Multiply, ir::full(g, DType::F32, -2.0, {n}),
                                                          ir::unary(g, ir::Op::Log, u1)));
  Value angle = ir::binary(g, ir::Op::Multiply, ir::full(g, DType::F32, 2.0 * M_PI, {n}), u2);
  return ir::convert(g, ir::binary(g, ir::Op::Multiply, radius, ir::unary(g, ir::Op::Cosine, angle)), dtype);
}

Value uniform(ir::Graph& g, const RandomBits& bits, Value lo, Value range, Value hi, DType out) {
  Value u = uniform_01(g, bits.word0, g.type(lo).dtype);
  Value value = ir::convert(g, ir::binary(g, ir::Op::Add, lo, ir::binary(g, ir::Op::Multiply, u, range)), out);
  return ir::select(g, ir::compare(g, value, ir::convert(g, hi, out), ir::Compare::GE), ir::convert(g, lo, out),
                    value);
}

Value normal(ir::Graph& g, const RandomBits& bits, Value mean, Value std) {
  Value z = standard_normal(g, bits, g.type(mean).dtype);
  return ir::binary(g, ir::Op::Add, mean, ir::binary(g, ir::Op::Multiply, z, std));
}

Value bernoulli(ir::Graph& g, const RandomBits& bits, Value p) {
  Value u = uniform_01(g, bits.word0, DType::F32);
  return ir::compare(g, u, ir::convert(g, p, DType::F32), ir::Compare::LT);
}

Value random_integers(ir::Graph& g, const RandomBits& bits, Value from, Value range) {
  int64_t n = g.type(from).shape[0];
  Value hi = ir::binary(g, ir::Op::ShiftLeft, ir::convert(g, bits.word1, DType::U64), ir::full(g, DType::U64, 32, {n}));
  Value r = ir::binary(g, ir::Op::Or, hi, ir::convert(g, bits.word0, DType::U64));
  r = ir::binary(g, ir::Op::Remainder, r, range);
  return ir::binary(g, ir::Op::Add, ir::convert(g, r, DType::S64), from);
}

Value dropout_scale(ir::Graph& g, Value x, Value mask, Value scale) {
  return ir::binary(g, ir::Op::Multiply, ir::binary(g, ir::Op::Multiply, x, mask), scale);
}

}  // namespace tpu::lowering
