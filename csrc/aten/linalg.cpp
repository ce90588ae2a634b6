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

void check_matmul(const char* name, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2, name, ": self must be a matrix");
  TORCH_CHECK(b.dim() == 2, name, ": mat2 must be a matrix");
  TORCH_CHECK(a.size(1) == b.size(0), name, ": mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x",
              a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
              a.scalar_type(), " != ", b.scalar_type());
}

// beta * self + alpha * (m1 @ m2); `self` undefined for plain mm.
at::Tensor matmul_op(const char* name, const at::Tensor* self, const at::Tensor& m1, const at::Tensor& m2,
                     const c10::Scalar& beta, const c10::Scalar& alpha, const at::Tensor* out, bool inplace) {
  check_matmul(name, m1, m2);
  c10::ScalarType dtype = m1.scalar_type();
  c10::DeviceGuard guard(m1.device());
  c10::DimVector shape{m1.size(0), m2.size(1)};
  at::Tensor output = prepare_output(name, out, shape, dtype, m1.device(), inplace);
  Program p(name, m1.device().index());
  ir::Graph& g = p.graph();
  ir::DType compute = lowering::to_ir(dtype);
  ir::Value r = lowering::matmul_2d(g, p.read(m1), p.read(m2), accumulate_type(dtype));
  if (self != nullptr) {
    ir::Shape target = to_shape(shape);
    if (!scalar_is(alpha, 1))
      r = lowering::scale(g, r, p.scalar(alpha, compute));
    bool beta_zero = scalar_is(beta, 0);
    if (!beta_zero) {  // beta == 0 ignores self entirely (NaNs included), as ATen does
      ir::Value bias = ir::broadcast_to(g, p.read_as(*self, dtype), target);
      if (!scalar_is(beta, 1))
        bias = lowering::scale(g, bias, p.scalar(beta, compute));
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
  at::Tensor input = self.clone();  // read before the write lands in the same storage
  matmul_op("addmm_", &input, m1, m2, beta, alpha, &self, true);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", mm);
  m.impl("mm.out", mm_out);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_inplace);
}

}  // namespace tpu::aten
