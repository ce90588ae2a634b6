// Random ops from the per-device generator: each op reserves as many
// counters as it has elements, so streams never overlap and the same seed
// reproduces the same values.
#include <ATen/core/DistributionsHelper.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/min.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "aten/op_helpers.h"
#include "engine/runtime.h"
#include "ir/ops.h"
#include "lowering/formula.h"
#include "lowering/random.h"
#include "lowering/reduce.h"
#include "lowering/sort.h"
#include "lowering/types.h"
#include "runtime/generator.h"

namespace tpu::aten {
namespace {

using RandomBuild = std::function<ir::Value(Program&, const lowering::RandomBits&, int64_t n)>;

// Reserves `n` counters of the generator of `device` (or `gen`) and returns
// their random words, computed in `p` (seed and offset are runtime parameters).
lowering::RandomBits draw_bits(Program& p, c10::Device device, std::optional<at::Generator> gen, int64_t n) {
  auto* generator = at::get_generator_or_default<runtime::TpuGenerator>(
      gen, runtime::default_generator(device.index()));
  std::pair<uint64_t, uint64_t> state;
  {
    std::lock_guard<std::mutex> lock(generator->mutex_);
    state = generator->philox_engine_inputs(static_cast<uint64_t>(n));
  }
  ir::Value seed = p.scalar(c10::Scalar(static_cast<uint64_t>(state.first)), ir::DType::U64);
  ir::Value offset = p.scalar(c10::Scalar(static_cast<uint64_t>(state.second)), ir::DType::U64);
  return lowering::random_bits(p.graph(), seed, offset, n);
}

// Draws numel counters from the generator and writes build(bits) (a flat
// value of `n` elements) into `self` through its view.
void fill_random(const char* name, const at::Tensor& self, std::optional<at::Generator> gen,
                 const RandomBuild& build) {
  int64_t n = self.numel();
  if (n == 0) return;
  c10::DeviceGuard guard(self.device());
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  lowering::RandomBits bits = draw_bits(p, self.device(), gen, n);
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
    ir::DType dt = float_compute(self);
    return lowering::uniform(p.graph(), bits, p.flat_scalar(from, dt, n), p.flat_scalar(to - from, dt, n),
                             p.flat_scalar(to, dt, n), lowering::to_ir(self.scalar_type()));
  });
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  fill_random("normal_", self, gen, [&](Program& p, const lowering::RandomBits& bits, int64_t n) {
    ir::DType dt = float_compute(self);
    return lowering::normal(p.graph(), bits, p.flat_scalar(mean, dt, n), p.flat_scalar(std, dt, n));
  });
  return self;
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(p >= 0 && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  fill_random("bernoulli_", self, gen, [&](Program& prog, const lowering::RandomBits& bits, int64_t n) {
    return lowering::bernoulli(prog.graph(), bits, prog.flat_scalar(p, ir::DType::F32, n));
  });
  return self;
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  at::Tensor probs = p.to(self.device()).expand(self.sizes());
  fill_random("bernoulli_", self, gen, [&](Program& prog, const lowering::RandomBits& bits, int64_t n) {
    return lowering::bernoulli(prog.graph(), bits, ir::reshape(prog.graph(), prog.read(probs), {n}));
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
    return lowering::random_integers(p.graph(), bits, p.flat_scalar(from, ir::DType::S64, n),
                                     p.flat_scalar(c10::Scalar(range), ir::DType::U64, n));
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
                                 return lowering::dropout_scale(g, v[0], v[1], v[2]);
                               });
  return {out, mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  // As CPU's grad * (mask * scale): an integer or bool gradient gives the default float type.
  c10::ScalarType type = at::isFloatingType(grad.scalar_type()) ? grad.scalar_type()
                                                                : c10::get_default_dtype_as_scalartype();
  return elementwise("native_dropout_backward", {grad, mask, scalar_operand(scale)}, type,
                     type, [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::dropout_scale(g, v[0], v[1], v[2]);
                     });
}

// ------------------------------------------------------------ continuous and discrete samplers
// Each is a transformation of uniform draws, as ATen's CPU kernels do it;
// computed in f32 (f64 for double tensors) and written in the tensor's dtype.

void check_floating_sampler(const char* distribution, const at::Tensor& self) {
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), distribution,
              " distribution is a continuous probability distribution. dtype must be a floating point but you "
              "specified ", self.scalar_type());
}

// A uniform draw in (0, 1): [0, 1) with 0 replaced by 2^-25, so logs are finite.
ir::Value open_uniform(ir::Graph& g, ir::Value word, ir::DType dt) {
  lowering::Formula f{g};
  ir::Value u = lowering::uniform_01(g, word, dt);
  return f.max(u, f.c(u, 1.0 / 33554432.0));
}

at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
  TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
  check_floating_sampler("Cauchy", self);
  fill_random("cauchy_", self, gen, [&](Program& p, const lowering::RandomBits& bits, int64_t n) {
    lowering::Formula f{p.graph()};
    ir::DType dt = float_compute(self);
    ir::Value u = lowering::uniform_01(f.g, bits.word0, dt);
    ir::Value m = ir::broadcast_in_dim(f.g, p.scalar(median, dt), {n}, {});
    ir::Value s = ir::broadcast_in_dim(f.g, p.scalar(sigma, dt), {n}, {});
    // median + sigma * tan(pi * (u - 1/2))
    return f.add(m, f.mul(s, f.tan(f.mul(f.c(u, M_PI), f.sub(u, f.c(u, 0.5))))));
  });
  return self;
}

at::Tensor& exponential_(at::Tensor& self, double lambda, std::optional<at::Generator> gen) {
  TORCH_CHECK(lambda > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambda);
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "Exponential distribution is a continuous probability "
              "distribution. dtype must be a floating point but you specified ", c10::toString(self.scalar_type()));
  fill_random("exponential_", self, gen, [&](Program& p, const lowering::RandomBits& bits, int64_t n) {
    lowering::Formula f{p.graph()};
    ir::DType dt = float_compute(self);
    ir::Value u = lowering::uniform_01(f.g, bits.word0, dt);
    ir::Value inv = ir::broadcast_in_dim(f.g, p.scalar(1.0 / lambda, dt), {n}, {});
    // -log(1 - u) / lambda with 1 - u in (0, 1]; 0 - x keeps the zero positive.
    return f.sub(f.c(u, 0.0), f.mul(f.log(f.sub(f.c(u, 1.0), u)), inv));
  });
  return self;
}

at::Tensor& geometric_(at::Tensor& self, double prob, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 < prob && prob < 1, "geometric_ expects p to be in (0, 1), but got p=", prob);
  fill_random("geometric_", self, gen, [&](Program& p, const lowering::RandomBits& bits, int64_t n) {
    lowering::Formula f{p.graph()};
    ir::DType dt = float_compute(self);
    ir::Value u = open_uniform(f.g, bits.word0, dt);
    ir::Value log_q = ir::broadcast_in_dim(f.g, p.scalar(std::log1p(-prob), dt), {n}, {});
    // Trials until the first success: ceil(log(u) / log(1 - p)) >= 1 for u in (0, 1).
    return f.un(ir::Op::Ceil, f.div(f.log(u), log_q));
  });
  return self;
}

at::Tensor& log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()), "\"log_normal_\" not implemented for '",
                              c10::toString(self.scalar_type()), "'");
  fill_random("log_normal_", self, gen, [&](Program& p, const lowering::RandomBits& bits, int64_t n) {
    lowering::Formula f{p.graph()};
    ir::DType dt = float_compute(self);
    ir::Value z = lowering::standard_normal(f.g, bits, dt);
    ir::Value m = ir::broadcast_in_dim(f.g, p.scalar(mean, dt), {n}, {});
    ir::Value s = ir::broadcast_in_dim(f.g, p.scalar(std, dt), {n}, {});
    return f.exp(f.add(m, f.mul(z, s)));
  });
  return self;
}

// ------------------------------------------------------------ normal with tensor mean / std

// out = mean + std * z, mean and std (tensors or wrapped scalars) broadcast to out's shape.
at::Tensor& normal_fill(const char* name, at::Tensor& out, const at::Tensor& mean, const at::Tensor& std,
                        std::optional<at::Generator> gen) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(out.scalar_type()), "\"normal_kernel\" not implemented for '",
                              c10::toString(out.scalar_type()), "'");
  fill_random(name, out, gen, [&](Program& p, const lowering::RandomBits& bits, int64_t n) {
    ir::Graph& g = p.graph();
    ir::DType dt = float_compute(out);
    ir::Shape shape = to_shape(out.sizes());
    auto operand = [&](const at::Tensor& t) {
      return ir::reshape(g, ir::broadcast_to(g, p.read_as(t, lowering::to_aten(dt)), shape), {n});
    };
    return lowering::normal(g, bits, operand(mean), operand(std));
  });
  return out;
}

void check_std_tensor(const at::Tensor& std) {
  TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
  // A data-dependent check (one sync), as ATen makes it on every backend.
  TORCH_CHECK(std.numel() == 0 || at::min(std).ge(0).item<bool>(), "normal expects all elements of std >= 0.0");
}
void check_std_scalar(double std) { TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std); }

at::Tensor normal_tt(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  check_std_tensor(std);
  c10::DeviceGuard guard(mean.device());
  at::Tensor out = at::empty(at::infer_size(mean.sizes(), std.sizes()), mean.options());
  return normal_fill("normal.Tensor_Tensor", out, mean, std, gen);
}
at::Tensor& normal_tt_out(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen,
                          at::Tensor& out) {
  check_std_tensor(std);
  at::native::resize_output(out, at::infer_size(mean.sizes(), std.sizes()));
  return normal_fill("normal.Tensor_Tensor_out", out, mean, std, gen);
}
at::Tensor normal_tf(const at::Tensor& mean, double std, std::optional<at::Generator> gen) {
  check_std_scalar(std);
  c10::DeviceGuard guard(mean.device());
  at::Tensor out = at::empty(mean.sizes(), mean.options());
  return normal_fill("normal.Tensor_float", out, mean, scalar_operand(std), gen);
}
at::Tensor& normal_tf_out(const at::Tensor& mean, double std, std::optional<at::Generator> gen, at::Tensor& out) {
  check_std_scalar(std);
  at::native::resize_output(out, mean.sizes());
  return normal_fill("normal.Tensor_float_out", out, mean, scalar_operand(std), gen);
}
at::Tensor normal_ft(double mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  check_std_tensor(std);
  c10::DeviceGuard guard(std.device());
  at::Tensor out = at::empty(std.sizes(), std.options());
  return normal_fill("normal.float_Tensor", out, scalar_operand(mean), std, gen);
}
at::Tensor& normal_ft_out(double mean, const at::Tensor& std, std::optional<at::Generator> gen, at::Tensor& out) {
  check_std_tensor(std);
  at::native::resize_output(out, std.sizes());
  return normal_fill("normal.float_Tensor_out", out, scalar_operand(mean), std, gen);
}

// ------------------------------------------------------------ multinomial

// ATen's checks of the probabilities (one sync, as on CPU and CUDA): negative
// or NaN entries, infinities, rows summing to zero.
void check_multinomial_probs(const at::Tensor& probs, bool replacement_path) {
  Program p("multinomial_check", probs.device());
  lowering::Formula f{p.graph()};
  ir::DType dt = probs.scalar_type() == c10::kDouble ? ir::DType::F64 : ir::DType::F32;
  ir::Value x = p.read_as(probs, lowering::to_aten(dt));
  ir::Shape shape = f.g.type(x).shape;
  ir::Dims all(shape.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  auto any = [&](ir::Value pred, const ir::Dims& dims) {
    return ir::reduce(f.g, pred, ir::constant_int(f.g, ir::DType::Pred, 0), dims, ir::Combiner::Or);
  };
  ir::Value negative = any(f.not_(f.ge(x, 0.0)), all);  // NaN too
  ir::Value infinite = any(f.eq(x, INFINITY), all);
  ir::Value sums = ir::reduce(f.g, x, ir::constant(f.g, dt, 0), {static_cast<int64_t>(shape.size()) - 1},
                              ir::Combiner::Add);
  ir::Value zero_row = shape.size() == 1 ? f.le(sums, 0.0) : any(f.le(sums, 0.0), {0});
  auto bit = [&](ir::Value pred, int64_t v) {
    return ir::select(f.g, pred, ir::constant_int(f.g, ir::DType::S64, v), ir::constant_int(f.g, ir::DType::S64, 0));
  };
  ir::Value code = f.add(f.add(bit(negative, 1), bit(infinite, 2)), bit(zero_row, 4));
  engine::BufferRef buffer = p.run_for_result(code);
  int64_t flags = 0;
  engine::Runtime::get().download(*buffer, &flags, sizeof(flags));
  if (replacement_path) {
    TORCH_CHECK(!(flags & 1), "invalid multinomial distribution (encountering probability entry < 0)");
    TORCH_CHECK(!(flags & 2), "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
  } else {
    TORCH_CHECK(!(flags & 3), "probability tensor contains either `inf`, `nan` or element < 0");
  }
  TORCH_CHECK(!(flags & 4), "invalid multinomial distribution (sum of probabilities <= 0)");
}

at::Tensor multinomial_op(const at::Tensor& self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen,
                          at::Tensor* out) {
  TORCH_CHECK(!(out != nullptr && out->is_same(self)), "multinomial(): result and self must be different tensors");
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point dtypes for input, got: ",
              self.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  int64_t k = self.size(-1);
  TORCH_CHECK(replacement || n_sample <= k, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(k <= (int64_t(1) << 24), "number of categories cannot exceed 2^24");
  c10::DeviceGuard guard(self.device());
  c10::DimVector shape(self.sizes().begin(), self.sizes().end());
  shape.back() = n_sample;
  at::Tensor result = prepare_output("multinomial", out, shape, c10::kLong, self.device(), false);
  int64_t rows = self.dim() == 2 ? self.size(0) : 1;
  if (rows == 0) return result;
  check_multinomial_probs(self, replacement && n_sample > 1);
  Program p(out != nullptr ? "multinomial.out" : "multinomial", self.device());
  lowering::Formula f{p.graph()};
  ir::DType dt = self.scalar_type() == c10::kDouble ? ir::DType::F64 : ir::DType::F32;
  ir::Value probs = ir::reshape(f.g, p.read_as(self, lowering::to_aten(dt)), {rows, k});
  ir::Value picked;
  if (replacement) {
    // Inverse CDF: the first category whose normalised cumulative sum exceeds
    // u in [0, 1). Dividing by the row's own total makes its last entry
    // exactly 1, and zero-probability categories can never be picked.
    ir::Value cdf = lowering::cumulative(f.g, probs, 1, ir::Combiner::Add, dt);
    ir::Value total = ir::broadcast_in_dim(f.g, ir::reshape(f.g, ir::slice(f.g, cdf, {0, k - 1}, {rows, k}), {rows}),
                                           {rows, k}, {0});
    ir::Value u = lowering::uniform_01(f.g, draw_bits(p, self.device(), gen, rows * n_sample).word0, dt);
    picked = lowering::search_sorted(f.g, f.div(cdf, total), ir::reshape(f.g, u, {rows, n_sample}), /*right=*/true);
  } else {
    // Exponential races (ATen's algorithm): the n_sample largest p / E with
    // E ~ Exp(1) are a sample without replacement.
    ir::Value u = lowering::uniform_01(f.g, draw_bits(p, self.device(), gen, rows * k).word0, dt);
    ir::Value e = f.neg(f.log(f.sub(f.c(u, 1.0), u)));
    e = f.max(e, f.c(e, 1e-30));  // p / 0 would be NaN for p == 0
    ir::Value keys = f.div(probs, ir::reshape(f.g, e, {rows, k}));
    picked = lowering::topk(f.g, keys, n_sample, 1, /*largest=*/true).indices;
  }
  p.write(result, ir::reshape(f.g, picked, to_shape(result.sizes())));
  p.run();
  return result;
}
at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen) {
  return multinomial_op(self, n_sample, replacement, gen, nullptr);
}
at::Tensor& multinomial_out(const at::Tensor& self, int64_t n_sample, bool replacement,
                            std::optional<at::Generator> gen, at::Tensor& out) {
  multinomial_op(self, n_sample, replacement, gen, &out);
  return out;
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
  m.impl("cauchy_", cauchy_);
  m.impl("exponential_", exponential_);
  m.impl("geometric_", geometric_);
  m.impl("log_normal_", log_normal_);
  m.impl("normal.Tensor_Tensor", normal_tt);
  m.impl("normal.Tensor_Tensor_out", normal_tt_out);
  m.impl("normal.Tensor_float", normal_tf);
  m.impl("normal.Tensor_float_out", normal_tf_out);
  m.impl("normal.float_Tensor", normal_ft);
  m.impl("normal.float_Tensor_out", normal_ft_out);
  m.impl("multinomial", multinomial);
  m.impl("multinomial.out", multinomial_out);
}

}  // namespace tpu::aten
