// Random ops from the per-device generator: each op reserves as many
// counters as it has elements, so streams never overlap and the same seed
// reproduces the same values.
#include <ATen/core/DistributionsHelper.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/random.h"
#include "lowering/types.h"
#include "runtime/generator.h"

namespace tpu::aten {
namespace {

using RandomBuild = std::function<ir::Value(Program&, const lowering::RandomBits&, int64_t n)>;

// Draws numel counters from the generator and writes build(bits) (a flat
// value of `n` elements) into `self` through its view.
void fill_random(const char* name, const at::Tensor& self, std::optional<at::Generator> gen,
                 const RandomBuild& build) {
  int64_t n = self.numel();
  if (n == 0) return;
  c10::DeviceGuard guard(self.device());
  auto* generator = at::get_generator_or_default<runtime::TpuGenerator>(
      gen, runtime::default_generator(self.device().index()));
  std::pair<uint64_t, uint64_t> state;
  {
    std::lock_guard<std::mutex> lock(generator->mutex_);
    state = generator->philox_engine_inputs(static_cast<uint64_t>(n));
  }
  Program p(name, self.device().index());
  ir::Graph& g = p.graph();
  ir::Value seed = p.scalar(c10::Scalar(static_cast<uint64_t>(state.first)), ir::DType::U64);
  ir::Value offset = p.scalar(c10::Scalar(static_cast<uint64_t>(state.second)), ir::DType::U64);
  lowering::RandomBits bits = lowering::random_bits(g, seed, offset, n);
  ir::Value flat = build(p, bits, n);
  p.write(self, ir::reshape(g, flat, to_shape(self.sizes())));
  p.run();
}

ir::DType float_compute(const at::Tensor& self) {
  return self.scalar_type() == c10::kDouble ? ir::DType::F64 : ir::DType::F32;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  fill_random("uniform_", self, gen, [&](Program& p, const lowering::RandomBits& bits, int64_t n) {
    ir::Graph& g = p.graph();
    ir::DType dt = float_compute(self);
    ir::Value u = lowering::uniform_01(g, bits.word0, dt);
    ir::Value lo = ir::broadcast_in_dim(g, p.scalar(from, dt), {n}, {});
    ir::Value range = ir::broadcast_in_dim(g, p.scalar(to - from, dt), {n}, {});
    ir::Value value = ir::binary(g, "stablehlo.add", lo, ir::binary(g, "stablehlo.multiply", u, range));
    // Rounding to the tensor's dtype can reach `to`; fold it back to `from`
    // (as ATen does) so the range stays [from, to).
    ir::DType out = lowering::to_ir(self.scalar_type());
    value = ir::convert(g, value, out);
    ir::Value hi = ir::convert(g, ir::broadcast_in_dim(g, p.scalar(to, dt), {n}, {}), out);
    return ir::select(g, ir::compare(g, value, hi, ir::Compare::GE), ir::convert(g, lo, out), value);
  });
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  fill_random("normal_", self, gen, [&](Program& p, const lowering::RandomBits& bits, int64_t n) {
    ir::Graph& g = p.graph();
    ir::DType dt = float_compute(self);
    ir::Value z = lowering::standard_normal(g, bits, dt);
    ir::Value m = ir::broadcast_in_dim(g, p.scalar(mean, dt), {n}, {});
    ir::Value s = ir::broadcast_in_dim(g, p.scalar(std, dt), {n}, {});
    return ir::binary(g, "stablehlo.add", m, ir::binary(g, "stablehlo.multiply", z, s));
  });
  return self;
}

// 1 where a uniform draw falls below p (a flat [n] value or a scalar), else 0.
ir::Value bernoulli_mask(ir::Graph& g, const lowering::RandomBits& bits, ir::Value p_flat) {
  ir::Value u = lowering::uniform_01(g, bits.word0, ir::DType::F32);
  return ir::compare(g, u, ir::convert(g, p_flat, ir::DType::F32), ir::Compare::LT);
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(p >= 0 && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  fill_random("bernoulli_", self, gen, [&](Program& prog, const lowering::RandomBits& bits, int64_t n) {
    ir::Value pv = ir::broadcast_in_dim(prog.graph(), prog.scalar(p, ir::DType::F32), {n}, {});
    return bernoulli_mask(prog.graph(), bits, pv);
  });
  return self;
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  at::Tensor probs = p.to(self.device()).expand(self.sizes());
  fill_random("bernoulli_", self, gen, [&](Program& prog, const lowering::RandomBits& bits, int64_t n) {
    ir::Value pv = ir::reshape(prog.graph(), prog.read(probs), {n});
    return bernoulli_mask(prog.graph(), bits, pv);
  });
  return self;
}

at::Tensor bernoulli(const at::Tensor& self, std::optional<at::Generator> gen) {
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  return bernoulli_tensor(out, self, gen);
}

// Integers uniform in [from, from + range) (range as u64), in self's dtype.
at::Tensor& random_range(const char* name, at::Tensor& self, int64_t from, uint64_t range,
                         std::optional<at::Generator> gen) {
  TORCH_CHECK(range > 0, name, " expects 'from' to be less than 'to'");
  fill_random(name, self, gen, [&](Program& p, const lowering::RandomBits& bits, int64_t n) {
    ir::Graph& g = p.graph();
    ir::Value hi = ir::binary(g, "stablehlo.shift_left", ir::convert(g, bits.word1, ir::DType::U64),
                              ir::full(g, ir::DType::U64, 32, {n}));
    ir::Value r = ir::binary(g, "stablehlo.or", hi, ir::convert(g, bits.word0, ir::DType::U64));
    r = ir::binary(g, "stablehlo.remainder", r, ir::broadcast_in_dim(g, p.scalar(c10::Scalar(range), ir::DType::U64), {n}, {}));
    ir::Value v = ir::binary(g, "stablehlo.add", ir::convert(g, r, ir::DType::S64),
                             ir::broadcast_in_dim(g, p.scalar(from, ir::DType::S64), {n}, {}));
    return v;
  });
  return self;
}

// Largest value random_() draws for a dtype: all integers a float represents exactly.
uint64_t default_random_limit(c10::ScalarType t) {
  switch (t) {
    case c10::kBool: return 2;
    case c10::kFloat: return (uint64_t(1) << 24) + 1;
    case c10::kDouble: return (uint64_t(1) << 53) + 1;
    case c10::kHalf: return (uint64_t(1) << 11) + 1;
    case c10::kBFloat16: return (uint64_t(1) << 8) + 1;
    case c10::kByte: return 256;
    case c10::kChar: return 128;
    case c10::kShort: return 32768;
    case c10::kInt: return uint64_t(1) << 31;
    default: return uint64_t(1) << 63;
  }
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> gen) {
  uint64_t range = to.has_value() ? static_cast<uint64_t>(*to - from)
                                  : default_random_limit(self.scalar_type()) - static_cast<uint64_t>(from);
  return random_range("random_", self, from, range, gen);
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_range("random_", self, 0, static_cast<uint64_t>(to), gen);
}

at::Tensor& random_default(at::Tensor& self, std::optional<at::Generator> gen) {
  return random_range("random_", self, 0, default_random_limit(self.scalar_type()), gen);
}

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  at::Tensor mask = at::empty(input.sizes(), input.options().dtype(c10::kBool));
  if (train.has_value() && !*train) {
    mask.fill_(true);
    return {input.clone(), mask};
  }
  bernoulli_float(mask, 1.0 - p, std::nullopt);
  double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  at::Tensor scale_t = scalar_operand(scale);
  at::Tensor out = elementwise("native_dropout", {input, mask, scale_t}, input.scalar_type(), input.scalar_type(),
                               [](ir::Graph& g, const std::vector<ir::Value>& v) {
                                 return ir::binary(g, "stablehlo.multiply", ir::binary(g, "stablehlo.multiply", v[0], v[1]), v[2]);
                               });
  return {out, mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  // As CPU's grad * (mask * scale): an integer or bool gradient gives the default float type.
  c10::ScalarType type = at::isFloatingType(grad.scalar_type()) ? grad.scalar_type()
                                                                : c10::get_default_dtype_as_scalartype();
  return elementwise("native_dropout_backward", {grad, mask, scalar_operand(scale)}, type,
                     type, [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return ir::binary(g, "stablehlo.multiply", ir::binary(g, "stablehlo.multiply", v[0], v[1]), v[2]);
                     });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", uniform_);
  m.impl("normal_", normal_);
  m.impl("bernoulli_.float", bernoulli_float);
  m.impl("bernoulli_.Tensor", bernoulli_tensor);
  m.impl("bernoulli", bernoulli);
  m.impl("random_.from", random_from);
  m.impl("random_.to", random_to);
  m.impl("random_", random_default);
  m.impl("native_dropout", native_dropout);
  m.impl("native_dropout_backward", native_dropout_backward);
}

}  // namespace tpu::aten
