// Reductions.
#include <ATen/core/Tensor.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/types.h"
#include "lowering/reduce.h"

namespace tpu::aten {
namespace {

// ------------------------------------------------------------ reductions

c10::ScalarType sum_result_type(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  if (dtype) return *dtype;
  return c10::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? c10::kLong : self.scalar_type();
}


enum class ReduceKind { Sum, Mean };

at::Tensor reduction(const char* name, ReduceKind kind, const at::Tensor& self, at::OptionalIntArrayRef dim,
                     bool keepdim, c10::ScalarType result, at::Tensor* out) {
  std::vector<int64_t> requested = dim.has_value() ? dim->vec() : std::vector<int64_t>{};
  ir::Dims dims;
  try {
    dims = lowering::reduction_dims(requested, self.dim());
  } catch (const std::out_of_range& e) {
    TORCH_CHECK_INDEX(false, e.what());
  }
  c10::DimVector shape;
  for (int64_t i = 0; i < self.dim(); ++i) {
    bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced)
      shape.push_back(self.size(i));
    else if (keepdim)
      shape.push_back(1);
  }
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(name, out, shape, result, self.device(), false);
  Program p(name, self.device().index());
  ir::Value x = p.read(self);
  ir::DType acc = accumulate_type(result);
  ir::DType res = lowering::to_ir(result);
  ir::Value r = kind == ReduceKind::Sum ? lowering::sum(p.graph(), x, dims, keepdim, acc, res)
                                        : lowering::mean(p.graph(), x, dims, keepdim, acc, res);
  p.write(output, r);
  p.run();
  return output;
}

at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                   std::optional<c10::ScalarType> dtype) {
  return reduction("sum", ReduceKind::Sum, self, dim, keepdim, sum_result_type(self, dtype), nullptr);
}
at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  reduction("sum.out", ReduceKind::Sum, self, dim, keepdim, dtype.value_or(out.scalar_type()), &out);
  return out;
}
at::Tensor sum_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return reduction("sum", ReduceKind::Sum, self, std::nullopt, false, sum_result_type(self, dtype), nullptr);
}

c10::ScalarType mean_result_type(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  c10::ScalarType t = dtype.value_or(self.scalar_type());
  TORCH_CHECK(c10::isFloatingType(t) || c10::isComplexType(t),
              "mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
              "dtype. Got: ", t);
  return t;
}
at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<c10::ScalarType> dtype) {
  return reduction("mean", ReduceKind::Mean, self, dim, keepdim, mean_result_type(self, dtype), nullptr);
}
at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  reduction("mean.out", ReduceKind::Mean, self, dim, keepdim, mean_result_type(self, dtype), &out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.dim_IntList", sum_dim);
  m.impl("sum.IntList_out", sum_out);
  m.impl("sum", sum_all);
  m.impl("mean.dim", mean_dim);
  m.impl("mean.out", mean_out);
}

}  // namespace tpu::aten
