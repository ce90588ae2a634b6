// Orthogonal factorizations: geqrf, householder_product (orgqr), ormqr,
// linalg_qr, symmetric eigendecomposition (_linalg_eigh), SVD (_linalg_svd)
// and least squares (linalg_lstsq). The lowerings are in lowering/spectral.*;
// the composites built on them (svdvals, matrix_rank, pinv, matrix_norm,
// cond, svd_lowrank, ...) and their backward formulas follow from these.
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/all.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/elementwise.h"
#include "lowering/linalg.h"
#include "lowering/factor.h"  // triu
#include "lowering/spectral.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using Values = std::vector<ir::Value>;
using at::Tensor;

// ------------------------------------------------------------ shapes and checks

c10::DimVector batch_sizes(const Tensor& t, int64_t drop = 2) {
  return c10::DimVector(t.sizes().begin(), t.sizes().end() - drop);
}
int64_t batch_count(const Tensor& t, int64_t drop = 2) {
  int64_t b = 1;
  for (int64_t i = 0; i < t.dim() - drop; ++i) b *= t.size(i);
  return b;
}
c10::DimVector with(c10::DimVector v, std::initializer_list<int64_t> tail) {
  v.insert(v.end(), tail.begin(), tail.end());
  return v;
}

// float32/float64 only: half types and integers raise as on CPU (there the
// dispatch macro raises NotImplementedError naming the kernel).
void check_dtype(const char* kernel, const Tensor& t) {
  TORCH_CHECK(!t.is_complex(), kernel, ": complex tensors are not supported on tpu");
  c10::ScalarType s = t.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(s == c10::kFloat || s == c10::kDouble, "\"", kernel, "\" not implemented for '",
                              c10::toString(s), "'");
}
// linalg.qr/svd's "floating point or complex" check, ahead of the kernel's.
void check_floating(const char* op, const Tensor& t) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()) || t.is_complex(), op,
              ": Expected a floating point or complex tensor as input. Got ", t.scalar_type());
}
void check_matrix(const char* op, const Tensor& t) {
  TORCH_CHECK(t.dim() >= 2, op, ": The input tensor A must have at least 2 dimensions.");
}

// One program reading `inputs` (each as [batch, rows, cols] per `flat`) and
// writing one value per output, reshaped to the output's sizes.
void run_program(const char* name, const std::vector<Tensor>& inputs, const std::vector<ir::Shape>& flat,
                 const std::vector<Tensor>& outputs,
                 const std::function<Values(ir::Graph&, const Values&)>& build) {
  Program p(name, inputs.at(0).device());
  ir::Graph& g = p.graph();
  Values in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(ir::reshape(g, p.read(inputs[i]), flat[i]));
  Values out = build(g, in);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (out[i].valid() && outputs[i].numel() > 0)
      p.write(outputs[i], ir::reshape(g, out[i], to_shape(outputs[i].sizes())));
  p.run();
}

// Writes identity matrices into `t` ([..., r, c]) with no input.
void fill_eye(const char* name, const Tensor& t) {
  if (t.numel() == 0) return;
  Program p(name, t.device());
  ir::Graph& g = p.graph();
  int64_t r = t.size(-2), c = t.size(-1);
  ir::Value e = lowering::eye(g, lowering::to_ir(t.scalar_type()), batch_count(t), r, c);
  p.write(t, ir::reshape(g, e, to_shape(t.sizes())));
  p.run();
}
void fill_zero(const char* name, const Tensor& t) {
  if (t.numel() == 0) return;
  Program p(name, t.device());
  ir::Graph& g = p.graph();
  p.write(t, ir::full(g, lowering::to_ir(t.scalar_type()), 0, to_shape(t.sizes())));
  p.run();
}

// ------------------------------------------------------------ QR family

std::tuple<Tensor, Tensor> geqrf_op(const Tensor& self, Tensor* a_out, Tensor* tau_out) {
  TORCH_CHECK(self.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  check_dtype("geqrf_tpu", self);
  int64_t m = self.size(-2), n = self.size(-1), k = std::min(m, n);
  c10::DeviceGuard guard(self.device());
  Tensor a = prepare_matrix_output("geqrf", a_out, self.sizes(), self.scalar_type(), self.device());
  Tensor tau = prepare_output("geqrf", tau_out, with(batch_sizes(self), {k}), self.scalar_type(), self.device(), false);
  if (self.numel() == 0) return {a, tau};
  run_program("geqrf", {self}, {{batch_count(self), m, n}}, {a, tau}, [](ir::Graph& g, const Values& x) -> Values {
    auto h = lowering::geqrf(g, x[0]);
    return {h.packed, h.tau};
  });
  return {a, tau};
}
std::tuple<Tensor, Tensor> geqrf(const Tensor& self) { return geqrf_op(self, nullptr, nullptr); }
std::tuple<Tensor&, Tensor&> geqrf_out(const Tensor& self, Tensor& a, Tensor& tau) {
  geqrf_op(self, &a, &tau);
  return {a, tau};
}

void check_tau_batch(const char* op, const Tensor& input, const Tensor& tau) {
  TORCH_CHECK(tau.dim() == input.dim() - 1, op, ": Expected tau to have one dimension less than input, but got "
              "tau.ndim equal to ", tau.dim(), " and input.ndim is equal to ", input.dim());
  auto expected = batch_sizes(input);
  auto got = batch_sizes(tau, 1);
  TORCH_CHECK(got == expected, op, ": Expected batch dimensions of tau to be equal to input.shape[:-2], but got ",
              c10::IntArrayRef(got));
}

Tensor householder_product_op(const Tensor& input, const Tensor& tau, Tensor* out) {
  const char* op = "torch.linalg.householder_product";
  TORCH_CHECK(input.dim() >= 2, op, ": input must have at least 2 dimensions.");
  TORCH_CHECK(input.size(-2) >= input.size(-1), op,
              ": input.shape[-2] must be greater than or equal to input.shape[-1]");
  TORCH_CHECK(tau.dim() >= 1 && input.size(-1) >= tau.size(-1), op,
              ": input.shape[-1] must be greater than or equal to tau.shape[-1]");
  check_tau_batch(op, input, tau);
  TORCH_CHECK(tau.scalar_type() == input.scalar_type(), op, ": tau dtype ", tau.scalar_type(),
              " does not match input dtype ", input.scalar_type());
  check_dtype("orgqr_tpu", input);
  c10::DeviceGuard guard(input.device());
  Tensor result = prepare_matrix_output("linalg_householder_product", out, input.sizes(), input.scalar_type(),
                                        input.device());
  if (result.numel() == 0) return result;
  int64_t b = batch_count(input), m = input.size(-2), n = input.size(-1), k = tau.size(-1);
  if (k == 0) {
    fill_eye("linalg_householder_product", result);
    return result;
  }
  run_program("linalg_householder_product", {input, tau}, {{b, m, n}, {b, k}}, {result},
              [](ir::Graph& g, const Values& x) -> Values { return {lowering::householder_product(g, x[0], x[1])}; });
  return result;
}
Tensor householder_product(const Tensor& input, const Tensor& tau) {
  return householder_product_op(input, tau, nullptr);
}
Tensor& householder_product_out(const Tensor& input, const Tensor& tau, Tensor& out) {
  householder_product_op(input, tau, &out);
  return out;
}

Tensor ormqr_op(const Tensor& input, const Tensor& tau, const Tensor& other, bool left, bool transpose, Tensor* out) {
  const char* op = "torch.ormqr";
  TORCH_CHECK(input.dim() >= 2, op, ": input must have at least 2 dimensions.");
  TORCH_CHECK(other.dim() >= 2, op, ": other must have at least 2 dimensions.");
  int64_t side = left ? -2 : -1;
  TORCH_CHECK(other.size(side) == input.size(-2), op, ": other.shape[", side, "] must be equal to input.shape[-2]");
  TORCH_CHECK(tau.dim() >= 1 && tau.size(-1) == std::min(other.size(side), input.size(-1)), op, ": tau.shape[-1] must be "
              "equal to min(other.shape[", side, "], input.shape[-1])");
  check_tau_batch(op, input, tau);
  TORCH_CHECK(other.dim() == input.dim(), op, ": Expected other to have the same number of dimensions as input, "
              "but got other.ndim equal to ", other.dim(), " and input.ndim is equal to ", input.dim());
  auto other_batch = batch_sizes(other);
  TORCH_CHECK(other_batch == batch_sizes(input), op, ": Expected batch dimensions of other to be equal to "
              "input.shape[:-2], but got ", c10::IntArrayRef(other_batch));
  TORCH_CHECK(input.scalar_type() == tau.scalar_type(), op, ": Expected input and tau to have the same dtype, but "
              "input has dtype", input.scalar_type(), " and tau has dtype ", tau.scalar_type());
  TORCH_CHECK(input.scalar_type() == other.scalar_type(), op, ": Expected input and other to have the same dtype, "
              "but input has dtype", input.scalar_type(), " and other has dtype ", other.scalar_type());
  check_dtype("ormqr_tpu", input);
  c10::DeviceGuard guard(input.device());
  Tensor result = prepare_output("ormqr", out, other.sizes(), other.scalar_type(), other.device(), false);
  if (result.numel() == 0) return result;
  int64_t b = batch_count(input), q = input.size(-2), kk = input.size(-1), k = tau.size(-1);
  run_program("ormqr", {input, tau, other}, {{b, q, kk}, {b, k}, {b, other.size(-2), other.size(-1)}}, {result},
              [&](ir::Graph& g, const Values& x) -> Values {
                return {lowering::apply_reflectors(g, x[0], x[1], x[2], left, transpose)};
              });
  return result;
}
Tensor ormqr(const Tensor& input, const Tensor& tau, const Tensor& other, bool left, bool transpose) {
  return ormqr_op(input, tau, other, left, transpose, nullptr);
}
Tensor& ormqr_out(const Tensor& input, const Tensor& tau, const Tensor& other, bool left, bool transpose,
                  Tensor& out) {
  ormqr_op(input, tau, other, left, transpose, &out);
  return out;
}

std::tuple<Tensor, Tensor> linalg_qr_op(const Tensor& A, c10::string_view mode, Tensor* q_out, Tensor* r_out) {
  check_matrix("linalg.qr", A);
  check_floating("linalg.qr", A);
  bool reduced = mode == "reduced", complete = mode == "complete", r_only = mode == "r";
  TORCH_CHECK(reduced || complete || r_only, "qr received unrecognized mode '", mode,
              "' but expected one of 'reduced' (default), 'r', or 'complete'");
  check_dtype("geqrf_tpu", A);
  int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  c10::DeviceGuard guard(A.device());
  auto batch = batch_sizes(A);
  c10::DimVector q_shape = r_only ? c10::DimVector{0} : with(batch, {m, complete ? m : k});
  Tensor Q = prepare_matrix_output("linalg_qr", q_out, q_shape, A.scalar_type(), A.device());
  Tensor R = prepare_matrix_output("linalg_qr", r_out, with(batch, {complete ? m : k, n}), A.scalar_type(), A.device());
  if (A.numel() == 0) {
    fill_zero("linalg_qr", R);
    if (!r_only) fill_eye("linalg_qr", Q);
    return {Q, R};
  }
  int64_t b = batch_count(A), q_cols = complete ? m : k;
  run_program("linalg_qr", {A}, {{b, m, n}}, {Q, R}, [&](ir::Graph& g, const Values& x) -> Values {
    auto h = lowering::geqrf(g, x[0]);
    ir::Value r = lowering::triu(g, h.packed, 0);
    if (!complete) r = ir::slice(g, r, {0, 0, 0}, {b, k, n});
    if (r_only) return {ir::Value{}, r};
    // The reflectors are the first k columns; Q's extra columns start as the identity's.
    ir::Value v = ir::slice(g, h.packed, {0, 0, 0}, {b, m, k});
    if (q_cols > k) v = ir::pad(g, v, ir::constant(g, g.type(v).dtype, 0), {0, 0, 0}, {0, 0, q_cols - k});
    return {lowering::householder_product(g, v, h.tau), r};
  });
  return {Q, R};
}
std::tuple<Tensor, Tensor> linalg_qr(const Tensor& A, c10::string_view mode) {
  return linalg_qr_op(A, mode, nullptr, nullptr);
}
std::tuple<Tensor&, Tensor&> linalg_qr_out(const Tensor& A, c10::string_view mode, Tensor& Q, Tensor& R) {
  linalg_qr_op(A, mode, &Q, &R);
  return {Q, R};
}

// ------------------------------------------------------------ eigh / svd

std::tuple<Tensor, Tensor> eigh_op(const Tensor& A, c10::string_view uplo, bool compute_v, Tensor* values_out,
                                   Tensor* vectors_out) {
  check_matrix("linalg.eigh", A);
  TORCH_CHECK(A.size(-1) == A.size(-2), "linalg.eigh: A must be batches of square matrices, but they are ",
              A.size(-2), " by ", A.size(-1), " matrices");
  TORCH_CHECK(uplo == "L" || uplo == "U" || uplo == "l" || uplo == "u",
              "Expected UPLO argument to be 'L' or 'U', but got ", uplo);
  check_dtype("linalg_eigh_tpu", A);
  bool upper = uplo == "U" || uplo == "u";
  int64_t n = A.size(-1);
  c10::DeviceGuard guard(A.device());
  Tensor values = prepare_output("linalg_eigh", values_out, with(batch_sizes(A), {n}), A.scalar_type(),
                                 A.device(), false);
  c10::DimVector vshape = compute_v ? c10::DimVector(A.sizes().begin(), A.sizes().end()) : c10::DimVector{0};
  Tensor vectors = prepare_matrix_output("linalg_eigh", vectors_out, vshape, A.scalar_type(), A.device());
  if (A.numel() == 0) return {values, vectors};
  run_program("linalg_eigh", {A}, {{batch_count(A), n, n}}, {values, vectors},
              [&](ir::Graph& g, const Values& x) -> Values {
                auto e = lowering::eigh(g, x[0], upper, compute_v);
                return {e.values, e.vectors};
              });
  return {values, vectors};
}
std::tuple<Tensor, Tensor> linalg_eigh(const Tensor& A, c10::string_view uplo, bool compute_v) {
  return eigh_op(A, uplo, compute_v, nullptr, nullptr);
}
std::tuple<Tensor&, Tensor&> linalg_eigh_out(const Tensor& A, c10::string_view uplo, bool compute_v, Tensor& values,
                                             Tensor& vectors) {
  eigh_op(A, uplo, compute_v, &values, &vectors);
  return {values, vectors};
}

std::tuple<Tensor, Tensor, Tensor> svd_op(const Tensor& A, bool full_matrices, bool compute_uv,
                                          std::optional<c10::string_view> driver, Tensor* u_out, Tensor* s_out,
                                          Tensor* vh_out) {
  check_matrix("linalg.svd", A);
  check_floating("linalg.svd", A);
  TORCH_CHECK(!driver.has_value(), "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs "
              "with cuSOLVER backend.");
  check_dtype("linalg_svd_tpu", A);
  int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  c10::DeviceGuard guard(A.device());
  auto batch = batch_sizes(A);
  c10::DimVector u_shape{0}, vh_shape{0};
  if (compute_uv) {
    u_shape = with(batch, {m, full_matrices ? m : k});
    vh_shape = with(batch, {full_matrices ? n : k, n});
  }
  Tensor U = prepare_matrix_output("linalg_svd", u_out, u_shape, A.scalar_type(), A.device());
  Tensor S = prepare_output("linalg_svd", s_out, with(batch, {k}), A.scalar_type(), A.device(), false);
  Tensor Vh = prepare_matrix_output("linalg_svd", vh_out, vh_shape, A.scalar_type(), A.device());
  if (A.numel() == 0) {
    if (compute_uv) {  // no singular vectors: the bases are the identity's
      fill_eye("linalg_svd", U);
      fill_eye("linalg_svd", Vh);
    }
    return {U, S, Vh};
  }
  run_program("linalg_svd", {A}, {{batch_count(A), m, n}}, {U, S, Vh}, [&](ir::Graph& g, const Values& x) -> Values {
    auto r = lowering::svd(g, x[0], full_matrices, compute_uv);
    return {r.u, r.s, r.vh};
  });
  return {U, S, Vh};
}
std::tuple<Tensor, Tensor, Tensor> linalg_svd(const Tensor& A, bool full_matrices, bool compute_uv,
                                              std::optional<c10::string_view> driver) {
  return svd_op(A, full_matrices, compute_uv, driver, nullptr, nullptr, nullptr);
}
std::tuple<Tensor&, Tensor&, Tensor&> linalg_svd_out(const Tensor& A, bool full_matrices, bool compute_uv,
                                                     std::optional<c10::string_view> driver, Tensor& U, Tensor& S,
                                                     Tensor& Vh) {
  svd_op(A, full_matrices, compute_uv, driver, &U, &S, &Vh);
  return {U, S, Vh};
}


// ------------------------------------------------------------ least squares

// linalg_lstsq through the SVD of A for every driver: x = V diag(1/s) U^T b
// over the singular values above rcond * s_max (the minimum-norm solution,
// which is what gelsy/gelsd/gelss give and what gels gives for full rank).
// Which outputs are filled follows ATen: rank unless gels, singular values
// for gelsd/gelss, residuals when m > n and the driver is not gelsy (for
// gelsd/gelss only when every matrix has full rank).
std::tuple<Tensor&, Tensor&, Tensor&, Tensor&> linalg_lstsq_out(const Tensor& input, const Tensor& other,
                                                               std::optional<double> rcond,
                                                               std::optional<c10::string_view> driver,
                                                               Tensor& solution, Tensor& residuals, Tensor& rank,
                                                               Tensor& singular_values) {
  const char* op = "torch.linalg.lstsq";
  TORCH_CHECK(input.dim() >= 2, op, ": input must have at least 2 dimensions.");
  TORCH_CHECK(other.dim() >= 1, op, ": other must have at least 1 dimension.");
  TORCH_CHECK(input.scalar_type() == other.scalar_type(), op, ": Expected input and other to have the same dtype, "
              "but got input's dtype ", input.scalar_type(), " and other's dtype ", other.scalar_type());
  int64_t dim_diff = input.dim() - other.dim();
  TORCH_CHECK(0 <= dim_diff && dim_diff <= 1, op, ": input.dim() must be greater or equal to other.dim() and "
              "(input.dim() - other.dim()) <= 1");
  auto rhs_vector_shape = c10::IntArrayRef(input.sizes().data(), input.dim() - 1);
  bool vector_case = other.dim() == 1 || (dim_diff == 1 && other.sizes().equals(rhs_vector_shape));
  Tensor other_2d = vector_case ? other.unsqueeze(-1) : other;
  TORCH_CHECK(input.size(-2) == other_2d.size(-2), op, vector_case ? ": input.size(-2) should match other.size(-1)"
                                                                   : ": input.size(-2) should match other.size(-2)");
  std::string name = driver.has_value() ? std::string(*driver) : std::string("gelsy");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  TORCH_CHECK(name == "gels" || name == "gelsy" || name == "gelsd" || name == "gelss", op,
              ": parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  check_dtype("linalg_lstsq_tpu", input);
  int64_t m = input.size(-2), n = input.size(-1), k = std::min(m, n), nrhs = other_2d.size(-1);
  double eps = input.scalar_type() == c10::kDouble ? std::numeric_limits<double>::epsilon()
                                                   : std::numeric_limits<float>::epsilon();
  double rcond_value = rcond.has_value() ? *rcond : eps * static_cast<double>(std::max(m, n));
  auto a_batch = batch_sizes(input);
  auto batch = at::infer_size_dimvector(a_batch, batch_sizes(other_2d));
  c10::DeviceGuard guard(input.device());
  auto dtype = input.scalar_type();
  c10::DimVector sol_shape = vector_case ? with(batch, {n}) : with(batch, {n, nrhs});
  prepare_output("linalg_lstsq", &solution, sol_shape, dtype, input.device(), false);
  bool want_rank = name != "gels", want_sv = name == "gelsd" || name == "gelss";
  if (want_rank) prepare_output("linalg_lstsq", &rank, a_batch, c10::kLong, input.device(), false);
  if (want_sv) prepare_output("linalg_lstsq", &singular_values, with(a_batch, {k}), dtype, input.device(), false);
  int64_t ba = batch_count(input), bs = 1;
  for (int64_t d : batch) bs *= d;
  if (ba == 0 || bs == 0) return {solution, residuals, rank, singular_values};
  if (k == 0) {
    fill_zero("linalg_lstsq", solution);
    if (want_rank) fill_zero("linalg_lstsq", rank);
  } else {
    Program p("linalg_lstsq", input.device());
    ir::Graph& g = p.graph();
    ir::Value A = ir::reshape(g, p.read(input), {ba, m, n});
    // b and the factors broadcast to the solution's batch.
    auto to_batch = [&](ir::Value v, int64_t r, int64_t c) {
      ir::Shape from = to_shape(a_batch), to = to_shape(batch);
      from.insert(from.end(), {r, c});
      to.insert(to.end(), {r, c});
      return ir::reshape(g, ir::broadcast_to(g, ir::reshape(g, v, from), to), {bs, r, c});
    };
    ir::Shape b_full = to_shape(batch);
    b_full.insert(b_full.end(), {m, nrhs});
    ir::Value b = ir::reshape(g, ir::broadcast_to(g, ir::reshape(g, p.read(other), to_shape(other_2d.sizes())), b_full),
                              {bs, m, nrhs});
    auto f = lowering::svd(g, A, false, true);
    lowering::PseudoInverse pinv = lowering::pseudo_inverse(g, f.s, rcond_value);
    ir::Value inverse_s = ir::reshape(g, to_batch(ir::reshape(g, pinv.inverse_s, {ba, k, 1}), k, 1), {bs, k});
    ir::Value x = lowering::svd_solve(g, to_batch(f.u, m, k), to_batch(f.vh, k, n), inverse_s, b);
    p.write(solution, ir::reshape(g, x, to_shape(solution.sizes())));
    if (want_rank) {
      ir::Value r = ir::reduce(g, ir::convert(g, pinv.kept, ir::DType::S64), ir::constant_int(g, ir::DType::S64, 0), {1},
                               ir::Combiner::Add);
      p.write(rank, ir::reshape(g, r, to_shape(rank.sizes())));
    }
    if (want_sv) p.write(singular_values, ir::reshape(g, f.s, to_shape(singular_values.sizes())));
    p.run();
  }
  if (m > n && name != "gelsy") {
    bool full_rank = name == "gels" || at::all(at::eq(rank, n)).item<bool>();
    if (full_rank) {
      // The residual sum of squares of each column, |b - A x|^2.
      prepare_output("linalg_lstsq", &residuals, with(batch, {vector_case ? 1 : nrhs}), dtype, input.device(), false);
      Program p("linalg_lstsq", input.device());
      ir::Graph& g = p.graph();
      ir::Shape b_full = to_shape(batch);
      b_full.insert(b_full.end(), {m, nrhs});
      ir::Value r = ir::broadcast_to(g, ir::reshape(g, p.read(other), to_shape(other_2d.sizes())), b_full);
      if (n > 0) {
        ir::Shape a_full = to_shape(batch), x_full = to_shape(batch);
        a_full.insert(a_full.end(), {m, n});
        x_full.insert(x_full.end(), {n, nrhs});
        ir::Value A = ir::reshape(g, ir::broadcast_to(g, p.read(input), a_full), {bs, m, n});
        ir::Value x = ir::reshape(g, p.read(solution), {bs, n, nrhs});
        ir::Value ax = ir::dot_general(g, A, x, {0}, {0}, {2}, {1}, g.type(A).dtype);
        r = ir::binary(g, ir::Op::Subtract, ir::reshape(g, r, {bs, m, nrhs}), ax);
      }
      r = ir::reshape(g, r, {bs, m, nrhs});
      ir::Value sq = ir::binary(g, ir::Op::Multiply, r, r);
      ir::Value total = ir::reduce(g, sq, ir::constant(g, g.type(sq).dtype, 0), {1}, ir::Combiner::Add);
      p.write(residuals, ir::reshape(g, total, to_shape(residuals.sizes())));
      p.run();
    }
  }
  return {solution, residuals, rank, singular_values};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("geqrf", geqrf);
  m.impl("geqrf.a", geqrf_out);
  m.impl("linalg_householder_product", householder_product);
  m.impl("linalg_householder_product.out", householder_product_out);
  m.impl("ormqr", ormqr);
  m.impl("ormqr.out", ormqr_out);
  m.impl("linalg_qr", linalg_qr);
  m.impl("linalg_qr.out", linalg_qr_out);
  m.impl("_linalg_eigh", linalg_eigh);
  m.impl("_linalg_eigh.eigenvalues", linalg_eigh_out);
  m.impl("_linalg_svd", linalg_svd);
  m.impl("_linalg_svd.U", linalg_svd_out);
  m.impl("linalg_lstsq.out", linalg_lstsq_out);
}

}  // namespace tpu::aten
