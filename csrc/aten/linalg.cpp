// Matrix products.
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ScalarOps.h>
#include <ATen/ops/empty.h>
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
  if (rank == 3) {  // CPU's batched kernels dispatch on self's dtype, then read mat2 as that type
    TORCH_CHECK_NOT_IMPLEMENTED(a.scalar_type() != c10::kBool, "\"bmm\" not implemented for 'Bool'");
    TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected scalar type ", a.scalar_type(), " but found ",
                b.scalar_type());
    return;
  }
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ", a.dtype(),
              " != ", b.dtype());
  // As CPU: Bool has no kernel, needed only when there is something to multiply.
  TORCH_CHECK_NOT_IMPLEMENTED(a.scalar_type() != c10::kBool || a.numel() == 0 || b.numel() == 0, "\"", name,
                              "\" not implemented for 'Bool'");
}

// CPU's bmm returns before it looks at dtypes when there is nothing to multiply (an empty
// result, or an empty contraction: zeros), in mat2's dtype.
bool bmm_without_products(const at::Tensor& m1, const at::Tensor& m2) {
  return m1.dim() == 3 && m2.dim() == 3 && m1.size(0) == m2.size(0) && m1.size(2) == m2.size(1) &&
         (m1.numel() == 0 || m2.numel() == 0);
}

// beta * self + alpha * (m1 @ m2) for matrices (rank 2) or batches (rank 3);
// `self` null for plain mm/bmm.
at::Tensor matmul_op(const char* name, const at::Tensor* self, const at::Tensor& m1, const at::Tensor& m2,
                     const c10::Scalar& beta, const c10::Scalar& alpha, const at::Tensor* out, bool inplace) {
  int64_t rank = m1.dim() == 3 ? 3 : 2;
  c10::DeviceGuard guard(m1.device());
  c10::DimVector shape;
  if (rank == 3) shape.push_back(m1.size(0));
  shape.push_back(m1.size(rank - 2));
  shape.push_back(m2.size(rank - 1));
  if (self == nullptr && bmm_without_products(m1, m2))
    return prepare_output(name, out, shape, m2.scalar_type(), m1.device(), inplace).zero_();
  check_matmul(name, m1, m2, rank);
  c10::ScalarType dtype = m1.scalar_type();
  at::Tensor output = prepare_output(name, out, shape, dtype, m1.device(), inplace);
  if (self == nullptr && (m1.numel() == 0 || m2.numel() == 0)) return output.zero_();  // an empty contraction
  Program p(name, m1.device());
  ir::DType compute = lowering::to_ir(dtype);
  const bool scaled = self != nullptr && !scalar_is(alpha, 1);
  const bool biased = self != nullptr && !scalar_is(beta, 0);  // beta == 0 ignores self entirely (NaNs included), as ATen does
  const bool bias_scaled = biased && !scalar_is(beta, 1);
  at::Tensor alpha_t = scaled ? at::native::wrapped_scalar_tensor(alpha) : at::Tensor();
  at::Tensor beta_t = bias_scaled ? at::native::wrapped_scalar_tensor(beta) : at::Tensor();
  auto build = [&](Program& q) {
    ir::Graph& g = q.graph();
    ir::Value a = q.read_logical(m1), b = q.read_logical(m2);
    ir::Value r = rank == 3 ? lowering::matmul_batched(g, a, b, accumulate_type(dtype))
                            : lowering::matmul_2d(g, a, b, accumulate_type(dtype));
    if (scaled) r = lowering::scale(g, r, q.scalar_of(alpha_t, compute));
    if (biased) {
      ir::Value bias = ir::broadcast_to(g, q.apply_lazy_bits(*self, q.read_as(*self, dtype)), to_shape(shape));
      if (bias_scaled) bias = lowering::scale(g, bias, q.scalar_of(beta_t, compute));
      r = lowering::binary(g, Binary::Add, bias, r);
    }
    q.write(output, q.apply_lazy_bits(output, r));
  };
  const at::Tensor none;
  const at::Tensor* tensors[] = {&m1, &m2, self != nullptr ? self : &none, &alpha_t, &beta_t, &output};
  const int64_t captures[] = {scaled | biased << 1 | bias_scaled << 2, static_cast<int64_t>(p.graph().dot_precision())};
  build_or_apply(p, name, tensors, captures, build);
  p.run();
  return output;
}

// mm and bmm.
at::Tensor product_op(Overload o, const at::Tensor& a, const at::Tensor& b) {
  return matmul_op(o.name, nullptr, a, b, 0, 1, o.out, o.inplace);
}
constexpr auto mm = functional_overload<product_op, "mm">;
constexpr auto mm_out = out_overload<product_op, "mm.out">;
constexpr auto bmm = functional_overload<product_op, "bmm">;
constexpr auto bmm_out = out_overload<product_op, "bmm.out">;
// addmm and baddbmm. In place, the program reads self before its result
// replaces self's storage value.
at::Tensor add_product_op(Overload o, const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                          const c10::Scalar& beta, const c10::Scalar& alpha) {
  return matmul_op(o.name, &self, m1, m2, beta, alpha, o.out, o.inplace);
}
constexpr auto addmm = functional_overload<add_product_op, "addmm">;
constexpr auto addmm_out = out_overload<add_product_op, "addmm.out">;
constexpr auto addmm_inplace = inplace_overload<add_product_op, "addmm_">;
constexpr auto baddbmm = functional_overload<add_product_op, "baddbmm">;
constexpr auto baddbmm_out = out_overload<add_product_op, "baddbmm.out">;
constexpr auto baddbmm_inplace = inplace_overload<add_product_op, "baddbmm_">;


// ------------------------------------------------------------ vector products

// dot, and vdot (`conjugate_self`).
at::Tensor dot_op(const char* name, const at::Tensor& self, const at::Tensor& other, bool conjugate_self) {
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(), "D and ",
              other.dim(), "D tensors");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), name, " : expected both vectors to have same dtype, but "
              "found ", self.scalar_type(), " and ", other.scalar_type());
  TORCH_CHECK(self.numel() == other.numel(), "inconsistent tensor size, expected tensor [", self.numel(),
              "] and src [", other.numel(), "] to have the same number of elements, but got ", self.numel(), " and ",
              other.numel(), " elements respectively");
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != c10::kBool, "\"", name, "\" not implemented for 'Bool'");
  c10::DeviceGuard guard(self.device());
  at::Tensor output = at::empty({}, self.options());
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  ir::Value x = p.read_logical(self);
  if (conjugate_self) x = lowering::conj(g, x);
  ir::Value r = lowering::contract(g, x, p.read_logical(other), {}, {}, {0}, {0}, accumulate_type(self.scalar_type()));
  p.write(output, r);
  p.run();
  return output;
}
at::Tensor dot(const at::Tensor& self, const at::Tensor& other) { return dot_op("dot", self, other, false); }
at::Tensor vdot(const at::Tensor& self, const at::Tensor& other) { return dot_op("vdot", self, other, true); }

// beta * self + alpha * product, with product in `dtype` already; beta == 0
// ignores self (NaNs included), as ATen does.
ir::Value add_scaled(Program& p, ir::Value product, const at::Tensor& self, c10::ScalarType dtype,
                     const c10::Scalar& beta, const c10::Scalar& alpha) {
  ir::Graph& g = p.graph();
  ir::DType compute = lowering::to_ir(dtype);
  ir::Value r = product;
  if (!scalar_is(alpha, 1)) r = lowering::scale(g, r, p.scalar(alpha, compute));
  if (!scalar_is(beta, 0)) {
    ir::Value bias = ir::broadcast_to(g, p.read_as(self, dtype), g.type(r).shape);
    if (!scalar_is(beta, 1)) bias = lowering::scale(g, bias, p.scalar(beta, compute));
    r = lowering::binary(g, Binary::Add, bias, r);
  }
  return r;
}

// beta * self + alpha * (a's `a_dims` contracted with b's `b_dims`), in
// `dtype`, into a result of `shape` (addmv, addbmm).
at::Tensor add_contraction(Overload o, const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                           const ir::Dims& a_dims, const ir::Dims& b_dims, c10::IntArrayRef shape,
                           c10::ScalarType dtype, const c10::Scalar& beta, const c10::Scalar& alpha) {
  bool empty_contraction = a.numel() == 0 || b.numel() == 0;
  // As CPU: Bool has no kernel, needed only when there is something to multiply.
  TORCH_CHECK_NOT_IMPLEMENTED(dtype != c10::kBool || empty_contraction, "\"", o.name, "\" not implemented for 'Bool'");
  c10::DeviceGuard guard(a.device());
  at::Tensor output = prepare_output(o.name, o.out, shape, dtype, a.device(), o.inplace);
  if (output.numel() == 0) return output;
  Program p(o.name, a.device());
  ir::Graph& g = p.graph();
  ir::Value prod = empty_contraction ? ir::full(g, lowering::to_ir(dtype), 0, to_shape(shape))
                                     : lowering::contract(g, p.read(a), p.read(b), {}, {}, a_dims, b_dims,
                                                          accumulate_type(dtype));
  p.write(output, add_scaled(p, ir::convert(g, prod, lowering::to_ir(dtype)), self, dtype, beta, alpha));
  p.run();
  return output;
}

at::Tensor addmv_op(Overload o, const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                    const c10::Scalar& beta, const c10::Scalar& alpha) {
  TORCH_CHECK(mat.dim() == 2 && vec.dim() == 1 && self.dim() <= 1, "vector + matrix @ vector expected, got ",
              self.dim(), ", ", mat.dim(), ", ", vec.dim());
  TORCH_CHECK(mat.size(1) == vec.size(0) && (mat.size(0) == self.numel() || self.numel() == 1),
              "size mismatch, got input (", self.dim() == 0 ? 1 : self.size(0), "), mat (", mat.size(0), "x",
              mat.size(1), "), vec (", vec.size(0), ")");
  TORCH_CHECK(mat.scalar_type() == vec.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
              mat.scalar_type(), " != ", vec.scalar_type());
  return add_contraction(o, self, mat, vec, {1}, {0}, {mat.size(0)}, mat.scalar_type(), beta, alpha);
}
constexpr auto addmv = functional_overload<addmv_op, "addmv">;
constexpr auto addmv_out = out_overload<addmv_op, "addmv.out">;
constexpr auto addmv_inplace = inplace_overload<addmv_op, "addmv_">;

// beta * self + alpha * sum over the batch of batch1[i] @ batch2[i]: one
// contraction over both the batch and the inner dim.
at::Tensor addbmm_op(Overload o, const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                     const c10::Scalar& beta, const c10::Scalar& alpha) {
  TORCH_CHECK(b1.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(b2.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(b1.size(0) == b2.size(0), "batch1 and batch2 must have same number of batches, got ", b1.size(0),
              " and ", b2.size(0));
  TORCH_CHECK(b1.size(2) == b2.size(1), "Incompatible matrix sizes for bmm (", b1.size(1), "x", b1.size(2), " and ",
              b2.size(1), "x", b2.size(2), ")");
  TORCH_CHECK(b1.scalar_type() == b2.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
              b1.scalar_type(), " != ", b2.scalar_type());
  c10::DimVector shape{b1.size(1), b2.size(2)};
  TORCH_CHECK(at::is_expandable_to(self.sizes(), shape), "The expanded size of the tensor (", shape,
              ") must match the existing size (", self.sizes(), ")");
  return add_contraction(o, self, b1, b2, {0, 2}, {0, 1}, shape, self.scalar_type(), beta, alpha);
}
constexpr auto addbmm = functional_overload<addbmm_op, "addbmm">;
constexpr auto addbmm_out = out_overload<addbmm_op, "addbmm.out">;
constexpr auto addbmm_inplace = inplace_overload<addbmm_op, "addbmm_">;

at::Tensor linalg_cross_op(const at::Tensor& self, const at::Tensor& other, int64_t dim, const at::Tensor* out) {
  TORCH_CHECK(self.dim() == other.dim(), "linalg.cross: inputs must have the same number of dimensions.");
  c10::DimVector shape = at::infer_size_dimvector(self.sizes(), other.sizes());
  int64_t d = c10::maybe_wrap_dim(dim, static_cast<int64_t>(shape.size()));
  TORCH_CHECK(self.size(d) == 3 && other.size(d) == 3, "linalg.cross: inputs dimension ", dim,
              " must have length 3. Got ", self.size(d), " and ", other.size(d));
  c10::ScalarType common = at::result_type(self, other);
  return elementwise("linalg_cross", {self, other}, common, common,
                     [d](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::cross(g, v[0], v[1], d); },
                     out, false);
}
at::Tensor linalg_cross(const at::Tensor& self, const at::Tensor& other, int64_t dim) {
  return linalg_cross_op(self, other, dim, nullptr);
}
at::Tensor& linalg_cross_out(const at::Tensor& self, const at::Tensor& other, int64_t dim, at::Tensor& out) {
  linalg_cross_op(self, other, dim, &out);
  return out;
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
  m.impl("dot", dot);
  m.impl("vdot", vdot);
  m.impl("addmv", addmv);
  m.impl("addmv.out", addmv_out);
  m.impl("addmv_", addmv_inplace);
  m.impl("addbmm", addbmm);
  m.impl("addbmm.out", addbmm_out);
  m.impl("addbmm_", addbmm_inplace);
  m.impl("linalg_cross", linalg_cross);
  m.impl("linalg_cross.out", linalg_cross_out);
}

}  // namespace tpu::aten
