// Factorizations and the solves built on them: Cholesky (linalg_cholesky_ex,
// cholesky, _cholesky_solve_helper, cholesky_inverse), triangular solves
// (triangular_solve, linalg_solve_triangular), LU (linalg_lu_factor_ex,
// linalg_lu, lu_unpack, linalg_lu_solve) and what ATen builds on LU
// (_linalg_det, _linalg_slogdet, linalg_inv_ex, _linalg_solve_ex), plus
// linalg_matrix_exp. The lowerings are in lowering/factor.*.
//
// Results match the CPU kernels, including which matrix gets factorized:
// ATen's det/slogdet factor A^T when A is contiguous, and their
// backward formulas rely on that. Errors that depend on the data
// (singular/not positive-definite inputs of the raising variants) read `info`
// back through at::_linalg_check_errors, as ATen does. Complex inputs run on
// the CPU (the IR has no complex dtypes here).
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_cholesky_solve_helper_ops.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/_linalg_det_ops.h>
#include <ATen/ops/_linalg_slogdet_ops.h>
#include <ATen/ops/_linalg_solve_ex_ops.h>
#include <ATen/ops/cholesky_inverse_ops.h>
#include <ATen/ops/cholesky_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_cholesky_ex_ops.h>
#include <ATen/ops/linalg_inv_ex_ops.h>
#include <ATen/ops/linalg_lu_factor_ex_ops.h>
#include <ATen/ops/linalg_lu_ops.h>
#include <ATen/ops/linalg_lu_solve_ops.h>
#include <ATen/ops/linalg_matrix_exp_ops.h>
#include <ATen/ops/linalg_solve_triangular_ops.h>
#include <ATen/ops/lu_unpack_ops.h>
#include <ATen/ops/triangular_solve_ops.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <functional>

#include "aten/fallback.h"
#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/factor.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using Values = std::vector<ir::Value>;
using BuildMany = std::function<Values(Program&, ir::Graph&)>;
using Tensors = std::vector<at::Tensor>;
namespace lw = lowering;

// ------------------------------------------------------------ complex inputs: the CPU kernels

#ifndef ATEN_OP  // as ATen/Operators.h spells them, without including all operators
#define ATEN_OP(op_name) at::_ops::op_name
#define ATEN_OP2(op_name, overload) at::_ops::op_name##_##overload
#endif
#define CPU_IF_COMPLEX(t, OP, ...) \
  if ((t).is_complex()) return at::native::call_fallback_fn<&cpu_fallback_for_complex, OP>::call(__VA_ARGS__)

// ATen's functional and out= overloads of `at::Tensor kernel(at::Tensor* out,
// const at::Tensor& first, Args...)`, a tpu kernel for real inputs: complex
// ones (by the first argument's dtype) run ATen's CPU kernel, Op or OutOp.
template <auto kKernel, typename Op, typename OutOp, typename Kernel = decltype(kKernel)>
struct RealOnTpu;
template <auto kKernel, typename Op, typename OutOp, typename... Args>
struct RealOnTpu<kKernel, Op, OutOp, at::Tensor (*)(at::Tensor*, const at::Tensor&, Args...)> {
  static at::Tensor functional(const at::Tensor& first, Args... args) {
    CPU_IF_COMPLEX(first, Op, first, args...);
    return kKernel(nullptr, first, args...);
  }
  static at::Tensor& out(const at::Tensor& first, Args... args, at::Tensor& out) {
    CPU_IF_COMPLEX(first, OutOp, first, args..., out);
    kKernel(&out, first, args...);
    return out;
  }
};

// ------------------------------------------------------------ checks (ATen's messages)

void check_matrix(const at::Tensor& A, const char* name, const char* arg = "A") {
  TORCH_CHECK(A.dim() >= 2, name, ": The input tensor ", arg, " must have at least 2 dimensions.");
}

void check_square(const at::Tensor& A, const char* name, const char* arg = "A") {
  check_matrix(A, name, arg);
  TORCH_CHECK(A.size(-1) == A.size(-2), name, ": ", arg, " must be batches of square matrices, but they are ",
              A.size(-2), " by ", A.size(-1), " matrices");
}

void check_floating(const at::Tensor& A, const char* name, bool allow_low_precision = true) {
  TORCH_CHECK(at::isFloatingType(A.scalar_type()) || A.is_complex(), name,
              ": Expected a floating point or complex tensor as input. Got ", A.scalar_type());
  if (!allow_low_precision)
    TORCH_CHECK(A.scalar_type() != at::kHalf && A.scalar_type() != at::kBFloat16, name,
                ": Low precision dtypes not supported. Got ", A.scalar_type());
}

// The CPU kernels dispatch over float/double (and complex) only.
void check_kernel_dtype(const at::Tensor& A, const char* kernel) {
  c10::ScalarType t = A.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(t == at::kFloat || t == at::kDouble || A.is_complex(), "\"", kernel,
                              "\" not implemented for '", c10::toString(t), "'");
}

void check_solver(const at::Tensor& A, const at::Tensor& B, bool left, const char* name) {
  TORCH_CHECK(B.dim() >= 2, name, ": The input tensor B must have at least 2 dimensions.");
  bool ok = left ? A.size(-1) == B.size(-2) : A.size(-1) == B.size(-1);
  TORCH_CHECK(ok, name, ": Incompatible shapes of A and B for the equation ", left ? "AX = B" : "XA = B", " (",
              A.size(-2), "x", A.size(-1), " and ", B.size(-2), "x", B.size(-1), ")");
}

void check_same_dtype(const at::Tensor& A, const at::Tensor& B, const char* name) {
  TORCH_CHECK(A.scalar_type() == B.scalar_type(), name, ": Expected A and B to have the same dtype, but found A of type ",
              A.scalar_type(), " and B of type ", B.scalar_type(), " instead");
}

// The legacy solvers' checks (cholesky_solve, triangular_solve): b is `self`.
void check_linear_solve(const at::Tensor& self, const at::Tensor& A, const char* name) {
  TORCH_CHECK(self.scalar_type() == A.scalar_type(), "Expected b and A to have the same dtype, but found b of type ",
              self.scalar_type(), " and A of type ", A.scalar_type(), " instead.");
  TORCH_CHECK(A.size(-1) == A.size(-2), "A must be batches of square matrices, but they are ", A.size(-2), " by ",
              A.size(-1), " matrices");
  TORCH_CHECK(A.size(-1) == self.size(-2), "Incompatible matrix sizes for ", name, ": each A matrix is ", A.size(-1),
              " by ", A.size(-1), " but each b matrix is ", self.size(-2), " by ", self.size(-1));
}

c10::DimVector batch_sizes(const at::Tensor& t) { return c10::DimVector(t.sizes().begin(), t.sizes().end() - 2); }

// The broadcast batch of two matrix operands.
c10::DimVector broadcast_batch(const at::Tensor& a, const at::Tensor& b) {
  return at::infer_size_dimvector(batch_sizes(a), batch_sizes(b));
}

c10::DimVector with_matrix(c10::DimVector batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

ir::Shape shape_of(c10::IntArrayRef s) { return ir::Shape(s.begin(), s.end()); }

// ------------------------------------------------------------ running

void check_out_dtype(const char* name, const at::Tensor* out, c10::ScalarType dtype) {
  if (out != nullptr)
    TORCH_CHECK(out->scalar_type() == dtype, name, ": Expected out tensor to have dtype ", dtype, ", but got ",
                out->scalar_type(), " instead");
}

// An output: `out` resized as ATen does, or a fresh tensor.
at::Tensor output(const char* name, at::Tensor* out, c10::IntArrayRef shape, c10::ScalarType dtype,
                  c10::Device device) {
  check_out_dtype(name, out, dtype);
  return prepare_output(name, out, shape, dtype, device, false);
}

// A matrix output, batched column-major as LAPACK's (see prepare_matrix_output).
at::Tensor matrix_output(const char* name, at::Tensor* out, c10::IntArrayRef shape, c10::ScalarType dtype,
                         c10::Device device) {
  check_out_dtype(name, out, dtype);
  return prepare_matrix_output(name, out, shape, dtype, device);
}

// One program writing one value per output (outputs without elements are skipped).
void run(const char* name, int device, const Tensors& outputs, const BuildMany& build) {
  bool any = false;
  for (const at::Tensor& t : outputs) any = any || t.numel() > 0;
  if (!any) return;
  Program p(name, device);
  Values vals = build(p, p.graph());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].numel() == 0) continue;
    p.write(outputs[i], ir::reshape(p.graph(), vals.at(i), shape_of(outputs[i].sizes())));
  }
  p.run();
}

ir::Value zeros(ir::Graph& g, ir::DType dtype, c10::IntArrayRef shape) {
  return ir::full(g, dtype, 0, shape_of(shape));
}

// ------------------------------------------------------------ Cholesky

std::tuple<at::Tensor, at::Tensor> cholesky_ex_op(const char* name, const at::Tensor& A, bool upper,
                                                  at::Tensor* L_out, at::Tensor* info_out) {
  check_square(A, name);
  check_floating(A, name);
  check_kernel_dtype(A, "cholesky_cpu");
  c10::DeviceGuard guard(A.device());
  at::Tensor L = matrix_output(name, L_out, A.sizes(), A.scalar_type(), A.device());
  at::Tensor info = output(name, info_out, batch_sizes(A), at::kInt, A.device());
  if (A.numel() == 0) {
    run(name, A.device().index(), {info}, [&](Program&, ir::Graph& g) { return Values{zeros(g, ir::DType::S32, info.sizes())}; });
    return {L, info};
  }
  run(name, A.device().index(), {L, info}, [&](Program& p, ir::Graph& g) {
    lw::CholeskyFactors f = lw::cholesky(g, p.read(A), upper);
    return Values{f.factor, f.info};
  });
  return {L, info};
}

std::tuple<at::Tensor, at::Tensor> linalg_cholesky_ex(const at::Tensor& A, bool upper, bool check_errors) {
  CPU_IF_COMPLEX(A, ATEN_OP(linalg_cholesky_ex), A, upper, check_errors);
  auto r = cholesky_ex_op("linalg.cholesky", A, upper, nullptr, nullptr);
  if (check_errors) at::_linalg_check_errors(std::get<1>(r), "linalg.cholesky_ex", A.dim() == 2);
  return r;
}
std::tuple<at::Tensor&, at::Tensor&> linalg_cholesky_ex_out(const at::Tensor& A, bool upper, bool check_errors,
                                                            at::Tensor& L, at::Tensor& info) {
  CPU_IF_COMPLEX(A, ATEN_OP2(linalg_cholesky_ex, L), A, upper, check_errors, L, info);
  cholesky_ex_op("linalg.cholesky", A, upper, &L, &info);
  if (check_errors) at::_linalg_check_errors(info, "linalg.cholesky_ex", A.dim() == 2);
  return {L, info};
}

at::Tensor cholesky_legacy_op(at::Tensor* out, const at::Tensor& A, bool upper) {
  if (A.numel() == 0) {  // ATen returns before any check
    at::Tensor r = matrix_output("cholesky", out, A.sizes(), A.scalar_type(), A.device());
    return r;
  }
  check_square(A, "cholesky");
  check_kernel_dtype(A, "cholesky_cpu");
  auto [L, info] = cholesky_ex_op("cholesky", A, upper, out, nullptr);
  at::_linalg_check_errors(info, "cholesky", A.dim() == 2);
  return L;
}
using Cholesky = RealOnTpu<cholesky_legacy_op, ATEN_OP(cholesky), ATEN_OP2(cholesky, out)>;
constexpr auto cholesky = Cholesky::functional;
constexpr auto cholesky_out = Cholesky::out;

// B and A arrive with broadcast batch dims (cholesky_solve's composite).
at::Tensor cholesky_solve_helper_op(at::Tensor* out, const at::Tensor& B, const at::Tensor& A, bool upper) {
  check_kernel_dtype(B, "cholesky_solve_cpu");
  c10::DeviceGuard guard(B.device());
  at::Tensor X = matrix_output("cholesky_solve", out, B.sizes(), B.scalar_type(), B.device());
  run("cholesky_solve", B.device().index(), {X}, [&](Program& p, ir::Graph& g) {
    ir::Shape batch = shape_of(broadcast_batch(B, A));
    ir::Value b = lw::broadcast_batch(g, p.read(B), batch), a = lw::broadcast_batch(g, p.read(A), batch);
    return Values{lw::cholesky_solve(g, b, a, upper)};
  });
  return X;
}
using CholeskySolveHelper =
    RealOnTpu<cholesky_solve_helper_op, ATEN_OP(_cholesky_solve_helper), ATEN_OP2(_cholesky_solve_helper, out)>;
constexpr auto cholesky_solve_helper = CholeskySolveHelper::functional;
constexpr auto cholesky_solve_helper_out = CholeskySolveHelper::out;

at::Tensor cholesky_inverse_op(at::Tensor* out, const at::Tensor& L, bool upper) {
  check_square(L, "cholesky_inverse", "input");
  check_kernel_dtype(L, "cholesky_inverse_out_cpu");
  c10::DeviceGuard guard(L.device());
  at::Tensor X = matrix_output("cholesky_inverse", out, L.sizes(), L.scalar_type(), L.device());
  run("cholesky_inverse", L.device().index(), {X}, [&](Program& p, ir::Graph& g) {
    ir::Value l = p.read(L);
    ir::Value eye = lw::identity(g, g.type(l).dtype, shape_of(batch_sizes(L)), L.size(-1));
    return Values{lw::cholesky_solve(g, eye, l, upper)};
  });
  return X;
}
using CholeskyInverse = RealOnTpu<cholesky_inverse_op, ATEN_OP(cholesky_inverse), ATEN_OP2(cholesky_inverse, out)>;
constexpr auto cholesky_inverse = CholeskyInverse::functional;
constexpr auto cholesky_inverse_out = CholeskyInverse::out;

// ------------------------------------------------------------ triangular solves

std::tuple<at::Tensor, at::Tensor> triangular_solve_op(const at::Tensor& B, const at::Tensor& A, bool upper,
                                                       bool transpose, bool unitriangular, at::Tensor* X_out,
                                                       at::Tensor* M_out) {
  TORCH_CHECK(B.dim() >= 2, "torch.triangular_solve: Expected b to have at least 2 dimensions, but it has ", B.dim(),
              " dimensions instead");
  TORCH_CHECK(A.dim() >= 2, "torch.triangular_solve: Expected A to have at least 2 dimensions, but it has ", A.dim(),
              " dimensions instead");
  check_linear_solve(B, A, "triangular_solve");
  check_kernel_dtype(A, "triangular_solve_cpu");
  c10::DeviceGuard guard(A.device());
  c10::DimVector batch = broadcast_batch(B, A);
  at::Tensor X = matrix_output("triangular_solve", X_out, with_matrix(batch, B.size(-2), B.size(-1)), B.scalar_type(),
                        B.device());
  at::Tensor M = matrix_output("triangular_solve", M_out, with_matrix(batch, A.size(-2), A.size(-1)), A.scalar_type(),
                        A.device());
  run("triangular_solve", A.device().index(), {X, M}, [&](Program& p, ir::Graph& g) {
    ir::Value a = lw::broadcast_batch(g, p.read(A), shape_of(batch));
    ir::Value b = lw::broadcast_batch(g, p.read(B), shape_of(batch));
    if (X.numel() == 0) return Values{b, a};
    return Values{lw::triangular_solve(g, a, b, upper, true, unitriangular, transpose), a};
  });
  return {X, M};
}
std::tuple<at::Tensor, at::Tensor> triangular_solve(const at::Tensor& B, const at::Tensor& A, bool upper,
                                                    bool transpose, bool unitriangular) {
  CPU_IF_COMPLEX(A, ATEN_OP(triangular_solve), B, A, upper, transpose, unitriangular);
  return triangular_solve_op(B, A, upper, transpose, unitriangular, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&> triangular_solve_out(const at::Tensor& B, const at::Tensor& A, bool upper,
                                                          bool transpose, bool unitriangular, at::Tensor& X,
                                                          at::Tensor& M) {
  CPU_IF_COMPLEX(A, ATEN_OP2(triangular_solve, X), B, A, upper, transpose, unitriangular, X, M);
  triangular_solve_op(B, A, upper, transpose, unitriangular, &X, &M);
  return {X, M};
}

at::Tensor solve_triangular_op(const at::Tensor& A, const at::Tensor& B, bool upper, bool left, bool unitriangular,
                               at::Tensor* out) {
  const char* name = "linalg.solve_triangular";
  check_square(A, name);
  check_floating(A, name);
  check_solver(A, B, left, name);
  check_same_dtype(A, B, name);
  check_kernel_dtype(A, "triangular_solve_cpu");
  c10::DeviceGuard guard(A.device());
  c10::DimVector batch = broadcast_batch(B, A);
  c10::DimVector shape = with_matrix(batch, B.size(-2), B.size(-1));
  at::Tensor X = matrix_output(name, out, shape, B.scalar_type(), B.device());
  run(name, A.device().index(), {X}, [&](Program& p, ir::Graph& g) {
    ir::Value a = lw::broadcast_batch(g, p.read_logical(A), shape_of(batch));
    ir::Value b = lw::broadcast_batch(g, p.read_logical(B), shape_of(batch));
    return Values{p.apply_lazy_bits(X, lw::triangular_solve(g, a, b, upper, left, unitriangular))};
  });
  return X;
}
at::Tensor linalg_solve_triangular(const at::Tensor& A, const at::Tensor& B, bool upper, bool left,
                                   bool unitriangular) {
  CPU_IF_COMPLEX(A, ATEN_OP(linalg_solve_triangular), A, B, upper, left, unitriangular);
  return solve_triangular_op(A, B, upper, left, unitriangular, nullptr);
}
at::Tensor& linalg_solve_triangular_out(const at::Tensor& A, const at::Tensor& B, bool upper, bool left,
                                        bool unitriangular, at::Tensor& out) {
  CPU_IF_COMPLEX(A, ATEN_OP2(linalg_solve_triangular, out), A, B, upper, left, unitriangular, out);
  solve_triangular_op(A, B, upper, left, unitriangular, &out);
  return out;
}

// ------------------------------------------------------------ LU

void check_pivot(bool pivot) {
  TORCH_CHECK(pivot, "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lu_factor_ex_op(const at::Tensor& A, bool pivot, bool check_errors,
                                                               at::Tensor* LU_out, at::Tensor* piv_out,
                                                               at::Tensor* info_out) {
  TORCH_CHECK(A.dim() >= 2, "torch.lu_factor: Expected tensor with 2 or more dimensions. Got size: ", A.sizes(),
              " instead");
  check_pivot(pivot);
  check_kernel_dtype(A, "lu_cpu");
  c10::DeviceGuard guard(A.device());
  int64_t k = std::min(A.size(-2), A.size(-1));
  c10::DimVector piv_shape = batch_sizes(A);
  piv_shape.push_back(k);
  const char* name = "linalg.lu_factor_ex";
  at::Tensor LU = matrix_output(name, LU_out, A.sizes(), A.scalar_type(), A.device());
  at::Tensor piv = output(name, piv_out, piv_shape, at::kInt, A.device());
  at::Tensor info = output(name, info_out, batch_sizes(A), at::kInt, A.device());
  run(name, A.device().index(), {LU, piv, info}, [&](Program& p, ir::Graph& g) {
    if (A.numel() == 0) return Values{ir::Value{}, ir::Value{}, zeros(g, ir::DType::S32, info.sizes())};
    lw::LUFactors f = lw::lu_factor(g, p.read(A));
    return Values{f.lu, f.pivots, f.info};
  });
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.lu_factor_ex", A.dim() == 2);
  return {LU, piv, info};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_lu_factor_ex(const at::Tensor& A, bool pivot,
                                                                   bool check_errors) {
  CPU_IF_COMPLEX(A, ATEN_OP(linalg_lu_factor_ex), A, pivot, check_errors);
  return lu_factor_ex_op(A, pivot, check_errors, nullptr, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_factor_ex_out(const at::Tensor& A, bool pivot,
                                                                          bool check_errors, at::Tensor& LU,
                                                                          at::Tensor& piv, at::Tensor& info) {
  CPU_IF_COMPLEX(A, ATEN_OP2(linalg_lu_factor_ex, out), A, pivot, check_errors, LU, piv, info);
  lu_factor_ex_op(A, pivot, check_errors, &LU, &piv, &info);
  return {LU, piv, info};
}

// P, L, U of A = P L U: from A (factorizing it) or from packed LU factors.
std::tuple<at::Tensor, at::Tensor, at::Tensor> plu_op(const char* name, const at::Tensor& A,
                                                      const at::Tensor* pivots, bool unpack_data, bool unpack_pivots,
                                                      at::Tensor* P_out, at::Tensor* L_out, at::Tensor* U_out) {
  c10::DeviceGuard guard(A.device());
  int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  c10::DimVector batch = batch_sizes(A);
  auto sized = [&](bool wanted, c10::DimVector shape) { return wanted ? shape : c10::DimVector{0}; };
  at::Tensor P = output(name, P_out, sized(unpack_pivots, with_matrix(batch, m, m)), A.scalar_type(), A.device());
  at::Tensor L = output(name, L_out, sized(unpack_data, with_matrix(batch, m, k)), A.scalar_type(), A.device());
  at::Tensor U = output(name, U_out, sized(unpack_data, with_matrix(batch, k, n)), A.scalar_type(), A.device());
  run(name, A.device().index(), {P, L, U}, [&](Program& p, ir::Graph& g) {
    ir::DType dt = lw::to_ir(A.scalar_type());
    ir::Value lu, piv;
    if (pivots == nullptr) {
      if (A.numel() > 0) {
        lw::LUFactors f = lw::lu_factor(g, p.read(A));
        lu = f.lu;
        piv = f.pivots;
      }
    } else {
      if (A.numel() > 0 && unpack_data) lu = p.read(A);
      if (pivots->numel() > 0 && unpack_pivots) piv = p.read(*pivots);
    }
    ir::Value perm;
    if (P.numel() > 0) {
      perm = piv.valid() ? lw::pivots_to_permutation(g, piv, m)
                         : ir::broadcast_to(g, ir::iota(g, ir::DType::S32, {m}, 0), shape_of(with_matrix(batch, 1, m)));
      perm = ir::reshape(g, perm, ir::Shape(P.sizes().begin(), P.sizes().end() - 1));
    }
    return Values{P.numel() > 0 ? lw::permutation_matrix(g, perm, dt) : ir::Value{},
                  L.numel() > 0 ? lw::lu_unpack_l(g, lu) : ir::Value{}, U.numel() > 0 ? lw::lu_unpack_u(g, lu) : ir::Value{}};
  });
  return {P, L, U};
}

void check_lu(const at::Tensor& A, bool pivot) {
  TORCH_CHECK(A.dim() >= 2, "linalg.lu: Expected tensor with 2 or more dimensions. Got size: ", A.sizes(), " instead");
  check_pivot(pivot);
  check_kernel_dtype(A, "lu_cpu");
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_lu(const at::Tensor& A, bool pivot) {
  CPU_IF_COMPLEX(A, ATEN_OP(linalg_lu), A, pivot);
  check_lu(A, pivot);
  return plu_op("linalg.lu", A, nullptr, true, true, nullptr, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_out(const at::Tensor& A, bool pivot, at::Tensor& P,
                                                                at::Tensor& L, at::Tensor& U) {
  CPU_IF_COMPLEX(A, ATEN_OP2(linalg_lu, out), A, pivot, P, L, U);
  check_lu(A, pivot);
  plu_op("linalg.lu", A, nullptr, true, true, &P, &L, &U);
  return {P, L, U};
}

void check_lu_unpack(const at::Tensor& LU, const at::Tensor& pivots, bool unpack_pivots) {
  TORCH_CHECK(LU.dim() >= 2, "torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: ", LU.sizes(),
              " instead");
  if (unpack_pivots) {
    TORCH_CHECK(pivots.scalar_type() == at::kInt,
                "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 dtype.\n"
                "Note: this function is intended to be used with the output produced by torch.linalg.lu_factor");
    c10::DimVector expected = batch_sizes(LU);
    expected.push_back(std::min(LU.size(-2), LU.size(-1)));
    TORCH_CHECK(pivots.sizes().equals(expected), "torch.lu_unpack: Expected pivots of shape ", expected,
                ", but got ", pivots.sizes());
  }
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> lu_unpack(const at::Tensor& LU, const at::Tensor& pivots,
                                                         bool unpack_data, bool unpack_pivots) {
  CPU_IF_COMPLEX(LU, ATEN_OP(lu_unpack), LU, pivots, unpack_data, unpack_pivots);
  check_lu_unpack(LU, pivots, unpack_pivots);
  return plu_op("lu_unpack", LU, &pivots, unpack_data, unpack_pivots, nullptr, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> lu_unpack_out(const at::Tensor& LU, const at::Tensor& pivots,
                                                                bool unpack_data, bool unpack_pivots, at::Tensor& P,
                                                                at::Tensor& L, at::Tensor& U) {
  CPU_IF_COMPLEX(LU, ATEN_OP2(lu_unpack, out), LU, pivots, unpack_data, unpack_pivots, P, L, U);
  check_lu_unpack(LU, pivots, unpack_pivots);
  plu_op("lu_unpack", LU, &pivots, unpack_data, unpack_pivots, &P, &L, &U);
  return {P, L, U};
}

at::Tensor lu_solve_op(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left, bool adjoint,
                       at::Tensor* out) {
  const char* name = "linalg.lu_solve";
  check_floating(LU, "torch.linalg.lu_solve");
  TORCH_CHECK(LU.scalar_type() == B.scalar_type(),
              "linalg.lu_solve: Expected LU and B to have the same dtype, but found LU of type ", LU.scalar_type(),
              " and B of type ", B.scalar_type(), " instead");
  TORCH_CHECK(pivots.scalar_type() == at::kInt, "linalg.lu_solve: pivots should be a Tensor of scalar type torch.int32");
  check_square(LU, "torch.linalg.lu_solve", "LU");
  check_solver(LU, B, left, name);
  TORCH_CHECK(LU.size(-1) == pivots.size(-1),
              "linalg.lu_solve: Number of pivots per batch should be same as the dimension of the matrix");
  TORCH_CHECK(LU.sizes().slice(0, LU.dim() - 1).equals(pivots.sizes()),
              "linalg.lu_solve: Expected LU.shape[:-1] and pivots.shape to be the same, but got pivots with shape ",
              pivots.sizes(), " instead");
  check_kernel_dtype(LU, "linalg.lu_solve_cpu");
  c10::DeviceGuard guard(LU.device());
  c10::DimVector batch = broadcast_batch(B, LU);
  at::Tensor X = matrix_output(name, out, with_matrix(batch, B.size(-2), B.size(-1)), B.scalar_type(), B.device());
  run(name, LU.device().index(), {X}, [&](Program& p, ir::Graph& g) {
    ir::Shape bs = shape_of(batch);
    ir::Value lu = lw::broadcast_batch(g, p.read(LU), bs);
    ir::Shape ps = bs;
    ps.push_back(pivots.size(-1));
    ir::Value piv = ir::broadcast_to(g, p.read(pivots), ps);
    return Values{lw::lu_solve(g, lu, piv, lw::broadcast_batch(g, p.read(B), bs), left, adjoint)};
  });
  return X;
}
at::Tensor linalg_lu_solve(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left,
                           bool adjoint) {
  CPU_IF_COMPLEX(LU, ATEN_OP(linalg_lu_solve), LU, pivots, B, left, adjoint);
  return lu_solve_op(LU, pivots, B, left, adjoint, nullptr);
}
at::Tensor& linalg_lu_solve_out(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left,
                                bool adjoint, at::Tensor& out) {
  CPU_IF_COMPLEX(LU, ATEN_OP2(linalg_lu_solve, out), LU, pivots, B, left, adjoint, out);
  lu_solve_op(LU, pivots, B, left, adjoint, &out);
  return out;
}

// ------------------------------------------------------------ built on LU

// The matrix ATen factorizes for det/slogdet: A^T when A is contiguous (saves
// the CPU a copy; the backward formulas assume it). solve/inv factor A.
bool factor_transposed(const at::Tensor& A) { return A.is_contiguous() && !A.is_complex(); }

ir::Value factor_input(Program& p, const at::Tensor& A, bool transposed) {
  ir::Value a = p.read(A);
  return transposed ? lw::matrix_transpose(p.graph(), a) : a;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> det_op(const at::Tensor& A, at::Tensor* det_out, at::Tensor* LU_out,
                                                      at::Tensor* piv_out) {
  const char* name = "linalg.det";
  check_square(A, name);
  check_floating(A, name);
  check_kernel_dtype(A, "lu_cpu");
  c10::DeviceGuard guard(A.device());
  at::Tensor det = output(name, det_out, batch_sizes(A), A.scalar_type(), A.device());
  at::Tensor LU = matrix_output(name, LU_out, A.sizes(), A.scalar_type(), A.device());
  at::Tensor piv = output(name, piv_out, A.sizes().slice(0, A.dim() - 1), at::kInt, A.device());
  bool transposed = factor_transposed(A);
  run(name, A.device().index(), {det, LU, piv}, [&](Program& p, ir::Graph& g) {
    if (A.numel() == 0) return Values{ir::full(g, lw::to_ir(A.scalar_type()), 1, shape_of(det.sizes())), {}, {}};
    lw::LUFactors f = lw::lu_factor(g, factor_input(p, A, transposed));
    return Values{lw::lu_det(g, f.lu, f.pivots), f.lu, f.pivots};
  });
  return {det, LU, piv};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_det(const at::Tensor& A) {
  CPU_IF_COMPLEX(A, ATEN_OP(_linalg_det), A);
  return det_op(A, nullptr, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_det_out(const at::Tensor& A, at::Tensor& det, at::Tensor& LU,
                                                                 at::Tensor& piv) {
  CPU_IF_COMPLEX(A, ATEN_OP2(_linalg_det, result), A, det, LU, piv);
  det_op(A, &det, &LU, &piv);
  return {det, LU, piv};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> slogdet_op(const at::Tensor& A, at::Tensor* sign_out,
                                                                      at::Tensor* logabs_out, at::Tensor* LU_out,
                                                                      at::Tensor* piv_out) {
  const char* name = "linalg.slogdet";
  check_square(A, name);
  check_floating(A, name, false);
  check_kernel_dtype(A, "lu_cpu");
  c10::DeviceGuard guard(A.device());
  at::Tensor sign = output(name, sign_out, batch_sizes(A), A.scalar_type(), A.device());
  at::Tensor logabs = output(name, logabs_out, batch_sizes(A), A.scalar_type(), A.device());
  at::Tensor LU = matrix_output(name, LU_out, A.sizes(), A.scalar_type(), A.device());
  at::Tensor piv = output(name, piv_out, A.sizes().slice(0, A.dim() - 1), at::kInt, A.device());
  bool transposed = factor_transposed(A);
  run(name, A.device().index(), {sign, logabs, LU, piv}, [&](Program& p, ir::Graph& g) {
    ir::DType dt = lw::to_ir(A.scalar_type());
    if (A.numel() == 0)
      return Values{ir::full(g, dt, 1, shape_of(sign.sizes())), ir::full(g, dt, 0, shape_of(sign.sizes())), {}, {}};
    lw::LUFactors f = lw::lu_factor(g, factor_input(p, A, transposed));
    auto [s, l] = lw::lu_slogdet(g, f.lu, f.pivots);
    return Values{s, l, f.lu, f.pivots};
  });
  return {sign, logabs, LU, piv};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> linalg_slogdet(const at::Tensor& A) {
  CPU_IF_COMPLEX(A, ATEN_OP(_linalg_slogdet), A);
  return slogdet_op(A, nullptr, nullptr, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> linalg_slogdet_out(const at::Tensor& A,
                                                                                  at::Tensor& sign,
                                                                                  at::Tensor& logabs, at::Tensor& LU,
                                                                                  at::Tensor& piv) {
  CPU_IF_COMPLEX(A, ATEN_OP2(_linalg_slogdet, sign), A, sign, logabs, LU, piv);
  slogdet_op(A, &sign, &logabs, &LU, &piv);
  return {sign, logabs, LU, piv};
}

std::tuple<at::Tensor, at::Tensor> inv_ex_op(const at::Tensor& A, bool check_errors, at::Tensor* inv_out,
                                             at::Tensor* info_out) {
  const char* name = "linalg.inv_ex";
  check_square(A, name);
  check_floating(A, "linalg.inv", false);
  check_kernel_dtype(A, "lu_cpu");
  c10::DeviceGuard guard(A.device());
  at::Tensor inv = matrix_output(name, inv_out, A.sizes(), A.scalar_type(), A.device());
  at::Tensor info = output(name, info_out, batch_sizes(A), at::kInt, A.device());
  // As ATen: solve A X = I through the LU factors of A.
  bool transposed = false;
  run(name, A.device().index(), {inv, info}, [&](Program& p, ir::Graph& g) {
    if (A.numel() == 0) return Values{{}, zeros(g, ir::DType::S32, info.sizes())};
    lw::LUFactors f = lw::lu_factor(g, factor_input(p, A, transposed));
    ir::Value eye = lw::identity(g, lw::to_ir(A.scalar_type()), shape_of(batch_sizes(A)), A.size(-1));
    return Values{lw::lu_solve(g, f.lu, f.pivots, eye, true, transposed), f.info};
  });
  if (check_errors) at::_linalg_check_errors(info, "linalg.inv_ex", A.dim() == 2);
  return {inv, info};
}
std::tuple<at::Tensor, at::Tensor> linalg_inv_ex(const at::Tensor& A, bool check_errors) {
  CPU_IF_COMPLEX(A, ATEN_OP(linalg_inv_ex), A, check_errors);
  return inv_ex_op(A, check_errors, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&> linalg_inv_ex_out(const at::Tensor& A, bool check_errors, at::Tensor& inverse,
                                                       at::Tensor& info) {
  CPU_IF_COMPLEX(A, ATEN_OP2(linalg_inv_ex, inverse), A, check_errors, inverse, info);
  inv_ex_op(A, check_errors, &inverse, &info);
  return {inverse, info};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> solve_ex_op(const at::Tensor& A, const at::Tensor& B,
                                                                       bool left, bool check_errors,
                                                                       at::Tensor* X_out, at::Tensor* LU_out,
                                                                       at::Tensor* piv_out, at::Tensor* info_out) {
  const char* name = "linalg.solve";
  check_floating(A, name);
  TORCH_CHECK(A.scalar_type() == B.scalar_type(), "linalg.solve: Expected A and B to have the same dtype, but found A of type ",
              A.scalar_type(), " and B of type ", B.scalar_type(), " instead");
  // B is a (batch of) vector(s) when it is 1-D or A's shape without its last dim.
  bool vector_case = B.dim() == 1 || (A.dim() - 1 == B.dim() && B.sizes().equals(A.sizes().slice(0, A.dim() - 1)));
  at::Tensor B_ = vector_case ? B.unsqueeze(-1) : B;
  check_square(A, name);
  check_solver(A, B_, left, name);
  TORCH_CHECK(left || !vector_case,
              "linalg.solve: Vector broadcasting of the left hand side is not supported for left=False. In this case "
              "linalg.solve is equivalent to B / A.squeeze(-1)");
  check_kernel_dtype(A, "lu_cpu");
  c10::DeviceGuard guard(A.device());
  c10::DimVector batch = broadcast_batch(B_, A);
  c10::DimVector xs = with_matrix(batch, B_.size(-2), B_.size(-1));
  if (vector_case) xs.pop_back();
  at::Tensor X = matrix_output(name, X_out, xs, B.scalar_type(), B.device());
  at::Tensor LU = matrix_output(name, LU_out, A.sizes(), A.scalar_type(), A.device());
  at::Tensor piv = output(name, piv_out, A.sizes().slice(0, A.dim() - 1), at::kInt, A.device());
  at::Tensor info = output(name, info_out, batch_sizes(A), at::kInt, A.device());
  bool transposed = false;  // this ATen version factors A itself here (its backward expects that)
  run(name, A.device().index(), {X, LU, piv, info}, [&](Program& p, ir::Graph& g) {
    if (A.numel() == 0) return Values{{}, {}, {}, zeros(g, ir::DType::S32, info.sizes())};
    lw::LUFactors f = lw::lu_factor(g, factor_input(p, A, transposed));
    ir::Value x;
    if (X.numel() > 0) {
      ir::Shape bs = shape_of(batch);
      ir::Value b = p.read(B);
      if (vector_case) b = ir::reshape(g, b, shape_of(B_.sizes()));
      ir::Shape ps = bs;
      ps.push_back(A.size(-1));
      x = lw::lu_solve(g, lw::broadcast_batch(g, f.lu, bs), ir::broadcast_to(g, f.pivots, ps),
                       lw::broadcast_batch(g, b, bs), left, transposed);
    }
    return Values{x, f.lu, f.pivots, f.info};
  });
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.solve_ex", A.dim() == 2);
  return {X, LU, piv, info};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> linalg_solve_ex(const at::Tensor& A, const at::Tensor& B,
                                                                           bool left, bool check_errors) {
  CPU_IF_COMPLEX(A, ATEN_OP(_linalg_solve_ex), A, B, left, check_errors);
  return solve_ex_op(A, B, left, check_errors, nullptr, nullptr, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> linalg_solve_ex_out(
    const at::Tensor& A, const at::Tensor& B, bool left, bool check_errors, at::Tensor& X, at::Tensor& LU,
    at::Tensor& piv, at::Tensor& info) {
  CPU_IF_COMPLEX(A, ATEN_OP2(_linalg_solve_ex, result), A, B, left, check_errors, X, LU, piv, info);
  solve_ex_op(A, B, left, check_errors, &X, &LU, &piv, &info);
  return {X, LU, piv, info};
}

// ------------------------------------------------------------ matrix exponential

at::Tensor matrix_exp_op(at::Tensor* out, const at::Tensor& A) {
  const char* name = "linalg.matrix_exp";
  check_square(A, name);
  check_floating(A, name);
  c10::DeviceGuard guard(A.device());
  at::Tensor r = output(name, out, A.sizes(), A.scalar_type(), A.device());
  run(name, A.device().index(), {r}, [&](Program& p, ir::Graph& g) { return Values{lw::matrix_exp(g, p.read(A))}; });
  return r;
}
using MatrixExp = RealOnTpu<matrix_exp_op, ATEN_OP(linalg_matrix_exp), ATEN_OP2(linalg_matrix_exp, out)>;
constexpr auto linalg_matrix_exp = MatrixExp::functional;
constexpr auto linalg_matrix_exp_out = MatrixExp::out;

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_cholesky_ex", linalg_cholesky_ex);
  m.impl("linalg_cholesky_ex.L", linalg_cholesky_ex_out);
  m.impl("cholesky", cholesky);
  m.impl("cholesky.out", cholesky_out);
  m.impl("_cholesky_solve_helper", cholesky_solve_helper);
  m.impl("_cholesky_solve_helper.out", cholesky_solve_helper_out);
  m.impl("cholesky_inverse", cholesky_inverse);
  m.impl("cholesky_inverse.out", cholesky_inverse_out);
  m.impl("triangular_solve", triangular_solve);
  m.impl("triangular_solve.X", triangular_solve_out);
  m.impl("linalg_solve_triangular", linalg_solve_triangular);
  m.impl("linalg_solve_triangular.out", linalg_solve_triangular_out);
  m.impl("linalg_lu_factor_ex", linalg_lu_factor_ex);
  m.impl("linalg_lu_factor_ex.out", linalg_lu_factor_ex_out);
  m.impl("linalg_lu", linalg_lu);
  m.impl("linalg_lu.out", linalg_lu_out);
  m.impl("lu_unpack", lu_unpack);
  m.impl("lu_unpack.out", lu_unpack_out);
  m.impl("linalg_lu_solve", linalg_lu_solve);
  m.impl("linalg_lu_solve.out", linalg_lu_solve_out);
  m.impl("_linalg_det", linalg_det);
  m.impl("_linalg_det.result", linalg_det_out);
  m.impl("_linalg_slogdet", linalg_slogdet);
  m.impl("_linalg_slogdet.sign", linalg_slogdet_out);
  m.impl("linalg_inv_ex", linalg_inv_ex);
  m.impl("linalg_inv_ex.inverse", linalg_inv_ex_out);
  m.impl("_linalg_solve_ex", linalg_solve_ex);
  m.impl("_linalg_solve_ex.result", linalg_solve_ex_out);
  m.impl("linalg_matrix_exp", linalg_matrix_exp);
  m.impl("linalg_matrix_exp.out", linalg_matrix_exp_out);
}

}  // namespace tpu::aten
