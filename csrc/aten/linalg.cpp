// Matrix products.
#include <ATen/core/Tensor.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/types.h"
#include "lowering/elementwise.h"
#include "lowering/linalg.h"

namespace tpu::aten {
namespace {

using lowering::Binary;

// ------------------------------------------------------------ matrix products

// mm and bmm: operands of rank 2 or 3 with matching inner dims (and batch).
void check_matmul(const char* name, const at::Tensor& a, const at::Tensor& b, int64_t rank) {
  TORCH_CHECK(a.dim() == rank, name, ": Expected ", rank, "-D tensor for self, got ", a.dim(), "-D tensor");
  TORCH_CHECK(b.dim() == rank, name, ": Expected ", rank, "-D tensor for mat2, got ", b.dim(), "-D tensor");
  if (rank == 3)
    TORCH_CHECK(a.size(0) == b.size(0), name, ": batch1 and batch2 must have same number of batches, got ",
                a.size(0), " and ", b.size(0));
  TORCH_CHECK(a.size(rank - 1) == b.size(rank - 2), name, ": mat1 and mat2 shapes cannot be multiplied (",
              a.size(rank - 2), "x", a.size(rank - 1), " and ", b.size(rank - 2), "x", b.size(rank - 1), ")");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
              a.scalar_type(), " != ", b.scalar_type());
}

// beta * self + alpha * (m1 @ m2) for matrices (rank 2) or batches (rank 3);
// `self` null for plain mm/bmm.
at::Tensor matmul_op(const char* name, const at::Tensor* self, const at::Tensor& m1, const at::Tensor& m2,
                     const c10::Scalar& beta, const c10::Scalar& alpha, const at::Tensor* out, bool inplace) {
  int64_t rank = m1.dim() == 3 ? 3 : 2;
  check_matmul(name, m1, m2, rank);
  c10::ScalarType dtype = m1.scalar_type();
  c10::DeviceGuard guard(m1.device());
  c10::DimVector shape;
  if (rank == 3) shape.push_back(m1.size(0));
  shape.push_back(m1.size(rank - 2));
  shape.push_back(m2.size(rank - 1));
  at::Tensor output = prepare_output(name, out, shape, dtype, m1.device(), inplace);
  Program p(name, m1.device().index());
  ir::Graph& g = p.graph();
  ir::DType compute = lowering::to_ir(dtype);
  ir::Value a = p.read(m1), b = p.read(m2);
  ir::Value r = rank == 3 ? lowering::matmul_batched(g, a, b, accumulate_type(dtype))
                          : lowering::matmul_2d(g, a, b, accumulate_type(dtype));
  if (self != nullptr) {
    ir::Shape target = to_shape(shape);
    if (!scalar_is(alpha, 1)) r = lowering::scale(g, r, p.scalar(alpha, compute));
    if (!scalar_is(beta, 0)) {  // beta == 0 ignores self entirely (NaNs included), as ATen does
      ir::Value bias = ir::broadcast_to(g, p.read_as(*self, dtype), target);
      if (!scalar_is(beta, 1)) bias = lowering::scale(g, bias, p.scalar(beta, compute));
      r = lowering::binary(g, Binary::Add, bias, r);
    }
  }
  p.write(output, r);
  p.run();
  return output;
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) { return matmul_op("mm", nullptr, a, b, 0, 1, nullptr, false); }
at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  matmul_op("mm.out", nullptr, a, b, 0, 1, &out, false);
  return out;
}
at::Tensor addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  return matmul_op("addmm", &self, m1, m2, beta, alpha, nullptr, false);
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
  matmul_op("addmm.out", &self, m1, m2, beta, alpha, &out, false);
  return out;
}
at::Tensor& addmm_inplace(at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const c10::Scalar& beta,
                          const c10::Scalar& alpha) {
  // The program reads self before its result replaces self's storage value.
  matmul_op("addmm_", &self, m1, m2, beta, alpha, &self, true);
  return self;
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) { return matmul_op("bmm", nullptr, a, b, 0, 1, nullptr, false); }
at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  matmul_op("bmm.out", nullptr, a, b, 0, 1, &out, false);
  return out;
}
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                   const c10::Scalar& alpha) {
  return matmul_op("baddbmm", &self, b1, b2, beta, alpha, nullptr, false);
}
at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                        const c10::Scalar& alpha, at::Tensor& out) {
  matmul_op("baddbmm.out", &self, b1, b2, beta, alpha, &out, false);
  return out;
}
at::Tensor& baddbmm_inplace(at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                            const c10::Scalar& alpha) {
  matmul_op("baddbmm_", &self, b1, b2, beta, alpha, &self, true);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", mm);
  m.impl("mm.out", mm_out);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_inplace);
  m.impl("bmm", bmm);
  m.impl("bmm.out", bmm_out);
  m.impl("baddbmm", baddbmm);
  m.impl("baddbmm.out", baddbmm_out);
  m.impl("baddbmm_", baddbmm_inplace);
}

}  // namespace tpu::aten
