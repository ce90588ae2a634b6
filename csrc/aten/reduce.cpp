// Reductions: sums, products, extrema and their indices, moments, norms,
// logical reductions and cumulative scans.
#include <ATen/core/Tensor.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <functional>

#include "aten/op_helpers.h"
#include "engine/runtime.h"
#include "lowering/elementwise.h"
#include "ir/ops.h"
#include "lowering/reduce.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using Values = std::vector<ir::Value>;
using ReduceBuild = std::function<Values(ir::Graph&, ir::Value)>;

// One result of a reduction: its dtype and, for out= variants, where it goes.
struct Result {
  c10::ScalarType dtype;
  at::Tensor* out = nullptr;
};

ir::Dims dims_of(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  return lowering::reduction_dims(dim.has_value() ? ir::Dims(dim->begin(), dim->end()) : ir::Dims{}, self.dim());
}

// Runs `build` on self's value; its results (shape: self reduced over `dims`)
// land in fresh tensors or in the given out= tensors, all in one program.
std::vector<at::Tensor> reduce_op(const char* name, const at::Tensor& self, const ir::Dims& dims, bool keepdim,
                                  const std::vector<Result>& results, const ReduceBuild& build) {
  c10::DeviceGuard guard(self.device());
  ir::Shape shape = lowering::reduced_shape(to_shape(self.sizes()), dims, keepdim);
  std::vector<at::Tensor> outputs;
  for (const Result& r : results)
    outputs.push_back(prepare_output(name, r.out, shape, r.dtype, self.device(), false));
  Program p(name, self.device());
  Values values = build(p.graph(), p.read(self));
  for (size_t i = 0; i < outputs.size(); ++i) p.write(outputs[i], values[i]);
  p.run();
  return outputs;
}

// Reductions without an identity (max, argmax, ...) reject empty inputs as ATen does.
void check_all_reduce_nonempty(const char* name, const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, name, "(): Expected reduction dim to be specified for input.numel() == 0. "
              "Specify the reduction dim with the 'dim' argument.");
}
void check_dims_nonempty(const char* name, const at::Tensor& self, const ir::Dims& dims) {
  for (int64_t d : dims)
    TORCH_CHECK_INDEX(self.size(d) != 0, name, "(): Expected reduction dim ", d, " to have non-zero size.");
}

bool integral(c10::ScalarType t) { return c10::isIntegralType(t, /*includeBool=*/true); }
ir::DType ir_of(c10::ScalarType t) { return lowering::to_ir(t); }

// ------------------------------------------------------------ sum / mean / prod

enum class Accumulate { Sum, Mean, Prod };

c10::ScalarType sum_result_type(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  if (dtype) return *dtype;
  return integral(self.scalar_type()) ? c10::kLong : self.scalar_type();
}

at::Tensor accumulate(const char* name, Accumulate kind, const at::Tensor& self, const ir::Dims& dims, bool keepdim,
                      c10::ScalarType result, at::Tensor* out) {
  return reduce_op(name, self, dims, keepdim, {{result, out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    ir::DType acc = lowering::accumulate_dtype(ir_of(result));
    ir::DType res = ir_of(result);
    switch (kind) {
      case Accumulate::Sum: return {lowering::sum(g, x, dims, keepdim, acc, res)};
      case Accumulate::Mean: return {lowering::mean(g, x, dims, keepdim, acc, res)};
      case Accumulate::Prod: return {lowering::prod(g, x, dims, keepdim, acc, res)};
    }
    return {};
  })[0];
}

at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                   std::optional<c10::ScalarType> dtype) {
  return accumulate("sum", Accumulate::Sum, self, dims_of(self, dim), keepdim, sum_result_type(self, dtype), nullptr);
}
at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  accumulate("sum.out", Accumulate::Sum, self, dims_of(self, dim), keepdim, dtype.value_or(out.scalar_type()), &out);
  return out;
}
at::Tensor sum_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return accumulate("sum", Accumulate::Sum, self, dims_of(self, std::nullopt), false, sum_result_type(self, dtype),
                    nullptr);
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
  return accumulate("mean", Accumulate::Mean, self, dims_of(self, dim), keepdim, mean_result_type(self, dtype),
                    nullptr);
}
at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  accumulate("mean.out", Accumulate::Mean, self, dims_of(self, dim), keepdim, mean_result_type(self, dtype), &out);
  return out;
}

at::Tensor prod_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return accumulate("prod", Accumulate::Prod, self, dims_of(self, std::nullopt), false,
                    sum_result_type(self, dtype), nullptr);
}
at::Tensor& prod_all_out(const at::Tensor& self, std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  accumulate("prod.out", Accumulate::Prod, self, dims_of(self, std::nullopt), false,
             dtype.value_or(out.scalar_type()), &out);
  return out;
}
at::Tensor prod_dim(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype) {
  return accumulate("prod", Accumulate::Prod, self, dims_of(self, at::IntArrayRef{dim}), keepdim,
                    sum_result_type(self, dtype), nullptr);
}
at::Tensor& prod_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype,
                         at::Tensor& out) {
  accumulate("prod.int_out", Accumulate::Prod, self, dims_of(self, at::IntArrayRef{dim}), keepdim,
             dtype.value_or(out.scalar_type()), &out);
  return out;
}

// ------------------------------------------------------------ extrema

at::Tensor extreme_all(const char* name, bool is_max, const at::Tensor& self, at::Tensor* out) {
  check_all_reduce_nonempty(name, self);
  ir::Dims dims = dims_of(self, std::nullopt);
  return reduce_op(name, self, dims, false, {{self.scalar_type(), out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    return {is_max ? lowering::amax(g, x, dims, false) : lowering::amin(g, x, dims, false)};
  })[0];
}
at::Tensor max_all(const at::Tensor& self) { return extreme_all("max", true, self, nullptr); }
at::Tensor min_all(const at::Tensor& self) { return extreme_all("min", false, self, nullptr); }
at::Tensor& max_all_out(const at::Tensor& self, at::Tensor& out) {
  extreme_all("max", true, self, &out);
  return out;
}
at::Tensor& min_all_out(const at::Tensor& self, at::Tensor& out) {
  extreme_all("min", false, self, &out);
  return out;
}

// max.dim / min.dim: values and the index of the first extreme, one program.
std::tuple<at::Tensor, at::Tensor> extreme_dim(const char* name, bool is_max, const at::Tensor& self, int64_t dim,
                                               bool keepdim, at::Tensor* values, at::Tensor* indices) {
  ir::Dims dims = dims_of(self, at::IntArrayRef{dim});
  check_dims_nonempty(name, self, dims);
  std::optional<int64_t> d = dims.empty() ? std::nullopt : std::optional<int64_t>(dims[0]);
  auto r = reduce_op(name, self, dims, keepdim, {{self.scalar_type(), values}, {c10::kLong, indices}},
                     [&](ir::Graph& g, ir::Value x) -> Values {
                       ir::Value v = is_max ? lowering::amax(g, x, dims, keepdim) : lowering::amin(g, x, dims, keepdim);
                       if (!d) return {v, ir::full(g, ir::DType::S64, 0, {})};  // 0-dim input: index 0
                       return {v, lowering::arg_extreme(g, x, d, keepdim, is_max)};
                     });
  return {r[0], r[1]};
}
std::tuple<at::Tensor, at::Tensor> max_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return extreme_dim("max", true, self, dim, keepdim, nullptr, nullptr);
}
std::tuple<at::Tensor, at::Tensor> min_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return extreme_dim("min", false, self, dim, keepdim, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&> max_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& max,
                                                 at::Tensor& indices) {
  extreme_dim("max", true, self, dim, keepdim, &max, &indices);
  return {max, indices};
}
std::tuple<at::Tensor&, at::Tensor&> min_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& min,
                                                 at::Tensor& indices) {
  extreme_dim("min", false, self, dim, keepdim, &min, &indices);
  return {min, indices};
}

at::Tensor amax_amin(const char* name, bool is_max, const at::Tensor& self, at::IntArrayRef dim, bool keepdim,
                     at::Tensor* out) {
  if (dim.empty()) check_all_reduce_nonempty(name, self);
  ir::Dims dims = dims_of(self, dim);
  check_dims_nonempty(name, self, dims);
  c10::ScalarType result = out ? out->scalar_type() : self.scalar_type();
  TORCH_CHECK(!out || out->scalar_type() == self.scalar_type(), "Expected the dtype for input and out to match, but "
              "got ", self.scalar_type(), " for input's dtype and ", out->scalar_type(), " for out's dtype.");
  return reduce_op(name, self, dims, keepdim, {{result, out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    return {is_max ? lowering::amax(g, x, dims, keepdim) : lowering::amin(g, x, dims, keepdim)};
  })[0];
}
at::Tensor amax(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  return amax_amin("amax", true, self, dim, keepdim, nullptr);
}
at::Tensor amin(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  return amax_amin("amin", false, self, dim, keepdim, nullptr);
}
at::Tensor& amax_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  amax_amin("amax", true, self, dim, keepdim, &out);
  return out;
}
at::Tensor& amin_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  amax_amin("amin", false, self, dim, keepdim, &out);
  return out;
}

at::Tensor arg_op(const char* name, bool is_max, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                  at::Tensor* out) {
  TORCH_CHECK(self.scalar_type() != c10::kBool, name, "(): does not support bool input");
  ir::Dims dims;
  std::optional<int64_t> d;
  if (dim.has_value()) {
    dims = dims_of(self, at::IntArrayRef{*dim});
    check_dims_nonempty(name, self, dims);
    if (!dims.empty()) d = dims[0];
  } else {
    TORCH_CHECK_INDEX(self.numel() > 0, name, "(): Expected reduction dim to be specified for input.numel() == 0.");
    dims = dims_of(self, std::nullopt);
  }
  return reduce_op(name, self, dims, keepdim, {{c10::kLong, out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    if (dim.has_value() && !d) return {ir::full(g, ir::DType::S64, 0, {})};  // 0-dim input
    return {lowering::arg_extreme(g, x, d, keepdim, is_max)};
  })[0];
}
at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_op("argmax", true, self, dim, keepdim, nullptr);
}
at::Tensor argmin(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_op("argmin", false, self, dim, keepdim, nullptr);
}
at::Tensor& argmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& out) {
  arg_op("argmax", true, self, dim, keepdim, &out);
  return out;
}
at::Tensor& argmin_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& out) {
  arg_op("argmin", false, self, dim, keepdim, &out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> aminmax_op(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                                              at::Tensor* min, at::Tensor* max) {
  ir::Dims dims = dim.has_value() ? dims_of(self, at::IntArrayRef{*dim}) : dims_of(self, std::nullopt);
  bool empty = self.numel() == 0 && (!dim.has_value() || self.dim() == 0);
  for (int64_t d : dims) empty = empty || self.size(d) == 0;
  TORCH_CHECK(!empty, "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.");
  auto r = reduce_op("aminmax", self, dims, keepdim, {{self.scalar_type(), min}, {self.scalar_type(), max}},
                     [&](ir::Graph& g, ir::Value x) -> Values {
                       return {lowering::amin(g, x, dims, keepdim), lowering::amax(g, x, dims, keepdim)};
                     });
  return {r[0], r[1]};
}
std::tuple<at::Tensor, at::Tensor> aminmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return aminmax_op(self, dim, keepdim, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&> aminmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                                                 at::Tensor& min, at::Tensor& max) {
  aminmax_op(self, dim, keepdim, &min, &max);
  return {min, max};
}

// ------------------------------------------------------------ moments

enum class Moment { Var, Std };

std::vector<at::Tensor> moments_op(const char* name, Moment kind, bool with_mean, const at::Tensor& self,
                                   at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction,
                                   bool keepdim, at::Tensor* out0, at::Tensor* out1) {
  c10::ScalarType t = self.scalar_type();
  TORCH_CHECK(c10::isFloatingType(t) || c10::isComplexType(t),
              "std and var only support floating point and complex dtypes");
  double c = correction.has_value() ? correction->toDouble() : 1.0;
  ir::Dims dims = dims_of(self, dim);
  std::vector<Result> results{{t, out0}};
  if (with_mean) results.push_back({t, out1});
  return reduce_op(name, self, dims, keepdim, results, [&](ir::Graph& g, ir::Value x) -> Values {
    lowering::Moments m = lowering::moments(g, x, dims, keepdim, c, lowering::accumulate_dtype(ir_of(t)));
    ir::Value v = kind == Moment::Std ? ir::unary(g, ir::Op::Sqrt, m.var) : m.var;
    return {v, m.mean};
  });
}
at::Tensor var_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                          const std::optional<c10::Scalar>& correction, bool keepdim) {
  return moments_op("var", Moment::Var, false, self, dim, correction, keepdim, nullptr, nullptr)[0];
}
at::Tensor std_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                          const std::optional<c10::Scalar>& correction, bool keepdim) {
  return moments_op("std", Moment::Std, false, self, dim, correction, keepdim, nullptr, nullptr)[0];
}
at::Tensor& var_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                               const std::optional<c10::Scalar>& correction, bool keepdim, at::Tensor& out) {
  moments_op("var", Moment::Var, false, self, dim, correction, keepdim, &out, nullptr);
  return out;
}
at::Tensor& std_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                               const std::optional<c10::Scalar>& correction, bool keepdim, at::Tensor& out) {
  moments_op("std", Moment::Std, false, self, dim, correction, keepdim, &out, nullptr);
  return out;
}
std::tuple<at::Tensor, at::Tensor> var_mean_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                       const std::optional<c10::Scalar>& correction, bool keepdim) {
  auto r = moments_op("var_mean", Moment::Var, true, self, dim, correction, keepdim, nullptr, nullptr);
  return {r[0], r[1]};
}
std::tuple<at::Tensor, at::Tensor> std_mean_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                       const std::optional<c10::Scalar>& correction, bool keepdim) {
  auto r = moments_op("std_mean", Moment::Std, true, self, dim, correction, keepdim, nullptr, nullptr);
  return {r[0], r[1]};
}
std::tuple<at::Tensor&, at::Tensor&> var_mean_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                             const std::optional<c10::Scalar>& correction,
                                                             bool keepdim, at::Tensor& out0, at::Tensor& out1) {
  moments_op("var_mean", Moment::Var, true, self, dim, correction, keepdim, &out0, &out1);
  return {out0, out1};
}
std::tuple<at::Tensor&, at::Tensor&> std_mean_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                             const std::optional<c10::Scalar>& correction,
                                                             bool keepdim, at::Tensor& out0, at::Tensor& out1) {
  moments_op("std_mean", Moment::Std, true, self, dim, correction, keepdim, &out0, &out1);
  return {out0, out1};
}

// ------------------------------------------------------------ logsumexp

at::Tensor logsumexp_op(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor* out) {
  c10::ScalarType result = out ? out->scalar_type() : float_type_for(self.scalar_type());
  ir::Dims dims = dims_of(self, dim);
  return reduce_op("logsumexp", self, dims, keepdim, {{result, out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    return {lowering::logsumexp(g, x, dims, keepdim, ir_of(result))};
  })[0];
}
at::Tensor logsumexp(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  return logsumexp_op(self, dim, keepdim, nullptr);
}
at::Tensor& logsumexp_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  logsumexp_op(self, dim, keepdim, &out);
  return out;
}

// ------------------------------------------------------------ all / any

// uint8 inputs give uint8 results, bool otherwise (ATen keeps this for
// backward compatibility).
at::Tensor logical_op(const char* name, bool is_all, const at::Tensor& self, const ir::Dims& dims, bool keepdim,
                      at::Tensor* out) {
  c10::ScalarType result = out ? out->scalar_type() : self.scalar_type() == c10::kByte ? c10::kByte : c10::kBool;
  TORCH_CHECK(!out || result == c10::kBool || result == c10::kByte, name,
              " only supports bool tensor for result, got: ", result);
  return reduce_op(name, self, dims, keepdim, {{result, out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    return {is_all ? lowering::all(g, x, dims, keepdim) : lowering::any(g, x, dims, keepdim)};
  })[0];
}

#define LOGICAL_KERNELS(NAME, IS_ALL)                                                                      \
  at::Tensor NAME##_all(const at::Tensor& self) {                                                          \
    return logical_op(#NAME, IS_ALL, self, dims_of(self, std::nullopt), false, nullptr);                   \
  }                                                                                                        \
  at::Tensor& NAME##_all_out(const at::Tensor& self, at::Tensor& out) {                                    \
    logical_op(#NAME, IS_ALL, self, dims_of(self, std::nullopt), false, &out);                             \
    return out;                                                                                            \
  }                                                                                                        \
  at::Tensor NAME##_dim(const at::Tensor& self, int64_t dim, bool keepdim) {                               \
    return logical_op(#NAME, IS_ALL, self, dims_of(self, at::IntArrayRef{dim}), keepdim, nullptr);         \
  }                                                                                                        \
  at::Tensor& NAME##_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out) {         \
    logical_op(#NAME, IS_ALL, self, dims_of(self, at::IntArrayRef{dim}), keepdim, &out);                   \
    return out;                                                                                            \
  }                                                                                                        \
  at::Tensor NAME##_dims(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {              \
    return logical_op(#NAME, IS_ALL, self, dims_of(self, dim), keepdim, nullptr);                          \
  }                                                                                                        \
  at::Tensor& NAME##_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,           \
                              at::Tensor& out) {                                                           \
    logical_op(#NAME, IS_ALL, self, dims_of(self, dim), keepdim, &out);                                    \
    return out;                                                                                            \
  }
LOGICAL_KERNELS(all, true)
LOGICAL_KERNELS(any, false)
#undef LOGICAL_KERNELS

// ------------------------------------------------------------ norms

std::string ord_string(double ord) {
  if (std::isinf(ord)) return ord > 0 ? "inf" : "-inf";
  if (ord == std::floor(ord)) return std::to_string(static_cast<int64_t>(ord));
  return std::to_string(ord);
}

at::Tensor vector_norm_op(const char* name, const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
                          bool keepdim, std::optional<c10::ScalarType> dtype, at::Tensor* out) {
  c10::ScalarType in = self.scalar_type();
  TORCH_CHECK(c10::isFloatingType(in) || c10::isComplexType(in),
              "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", in);
  c10::ScalarType result = dtype.value_or(out ? out->scalar_type() : in);
  double p = ord.toDouble();
  ir::Dims dims = dims_of(self, dim);
  if (p < 0 || std::isinf(p)) {
    // Only 0 and positive finite orders have an identity.
    bool all_dims = !dim.has_value() || dim->empty();
    TORCH_CHECK(!all_dims || self.numel() != 0, "linalg.vector_norm cannot compute the ", ord_string(p),
                " norm on an empty tensor because the operation does not have an identity");
    for (int64_t d : dims)
      TORCH_CHECK(all_dims || self.size(d) != 0, "linalg.vector_norm cannot compute the ", ord_string(p),
                  " norm on the dimension ", d, "because this dimension is empty and the operation does not have "
                  "an identity");
  }
  return reduce_op(name, self, dims, keepdim, {{result, out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    return {lowering::vector_norm(g, x, p, dims, keepdim, ir_of(result))};
  })[0];
}
at::Tensor linalg_vector_norm(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
                              bool keepdim, std::optional<c10::ScalarType> dtype) {
  return vector_norm_op("linalg_vector_norm", self, ord, dim, keepdim, dtype, nullptr);
}
at::Tensor& linalg_vector_norm_out(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
                                   bool keepdim, std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  vector_norm_op("linalg_vector_norm.out", self, ord, dim, keepdim, dtype, &out);
  return out;
}
// torch.norm's overloads: p None means 2.
c10::Scalar norm_p(const std::optional<c10::Scalar>& p) { return p.value_or(2); }
at::Tensor norm_scalar(const at::Tensor& self, const c10::Scalar& p) {
  return vector_norm_op("norm", self, p, std::nullopt, false, std::nullopt, nullptr);
}
at::Tensor& norm_scalar_out(const at::Tensor& self, const c10::Scalar& p, at::Tensor& out) {
  vector_norm_op("norm.out", self, p, std::nullopt, false, std::nullopt, &out);
  return out;
}
at::Tensor norm_dim(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim) {
  return vector_norm_op("norm", self, norm_p(p), dim, keepdim, std::nullopt, nullptr);
}
at::Tensor norm_dim_dtype(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim,
                          bool keepdim, c10::ScalarType dtype) {
  return vector_norm_op("norm", self, norm_p(p), dim, keepdim, dtype, nullptr);
}
at::Tensor& norm_out(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     at::Tensor& out) {
  vector_norm_op("norm.out", self, norm_p(p), dim, keepdim, std::nullopt, &out);
  return out;
}
at::Tensor& norm_dtype_out(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim,
                           bool keepdim, c10::ScalarType dtype, at::Tensor& out) {
  vector_norm_op("norm.out", self, norm_p(p), dim, keepdim, dtype, &out);
  return out;
}
at::Tensor norm_dtype(const at::Tensor& self, const std::optional<c10::Scalar>& p, c10::ScalarType dtype) {
  return vector_norm_op("norm", self, norm_p(p), std::nullopt, false, dtype, nullptr);
}
at::Tensor& norm_dtype_all_out(const at::Tensor& self, const std::optional<c10::Scalar>& p, c10::ScalarType dtype,
                               at::Tensor& out) {
  vector_norm_op("norm.out", self, norm_p(p), std::nullopt, false, dtype, &out);
  return out;
}

// ------------------------------------------------------------ cumulative

// cumsum (kCombiner Add) and cumprod (Mul).
template <ir::Combiner kCombiner>
at::Tensor cumulative_op(Overload o, const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) {
  int64_t d = lowering::wrap_dim(dim, self.dim());
  // Without dtype: out='s or self's (in-place) dtype; a new result widens integers to int64.
  c10::ScalarType result = dtype.value_or(o.out                          ? o.out->scalar_type()
                                          : integral(self.scalar_type()) ? c10::kLong
                                                                         : self.scalar_type());
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(o.name, o.out, self.sizes(), result, self.device(), o.inplace);
  Program p(o.name, self.device());
  p.write(output, lowering::cumulative(p.graph(), p.read(self), d, kCombiner, ir_of(result)));
  p.run();
  return output;
}
constexpr auto cumsum = functional_overload<cumulative_op<ir::Combiner::Add>, "cumsum">;
constexpr auto cumsum_out = out_overload<cumulative_op<ir::Combiner::Add>, "cumsum.out">;
constexpr auto cumsum_inplace = inplace_overload<cumulative_op<ir::Combiner::Add>, "cumsum_">;
constexpr auto cumprod = functional_overload<cumulative_op<ir::Combiner::Mul>, "cumprod">;
constexpr auto cumprod_out = out_overload<cumulative_op<ir::Combiner::Mul>, "cumprod.out">;
constexpr auto cumprod_inplace = inplace_overload<cumulative_op<ir::Combiner::Mul>, "cumprod_">;


// ------------------------------------------------------------ nansum / count_nonzero / trace / equal / renorm

at::Tensor nansum_op(const char* name, const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     c10::ScalarType result, at::Tensor* out) {
  TORCH_CHECK(!self.is_complex(), "nansum does not support complex inputs");
  ir::Dims dims = dims_of(self, dim);
  return reduce_op(name, self, dims, keepdim, {{result, out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    ir::Value clean = ir::select(g, lowering::is_nan(g, x), lowering::splat(g, x, 0), x);
    return {lowering::sum(g, clean, dims, keepdim, lowering::accumulate_dtype(ir_of(result)), ir_of(result))};
  })[0];
}
at::Tensor nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<c10::ScalarType> dtype) {
  return nansum_op("nansum", self, dim, keepdim, sum_result_type(self, dtype), nullptr);
}
at::Tensor& nansum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  nansum_op("nansum.out", self, dim, keepdim, dtype.value_or(out.scalar_type()), &out);
  return out;
}

at::Tensor count_nonzero_dims(const at::Tensor& self, at::IntArrayRef dim) {
  ir::Dims dims = dims_of(self, dim);
  return reduce_op("count_nonzero", self, dims, false, {{c10::kLong, nullptr}}, [&](ir::Graph& g, ir::Value x) -> Values {
    ir::Value nz = ir::compare(g, x, lowering::splat(g, x, 0), ir::Compare::NE);
    return {lowering::sum(g, ir::convert(g, nz, ir::DType::S64), dims, false, ir::DType::S64, ir::DType::S64)};
  })[0];
}

at::Tensor trace(const at::Tensor& self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  c10::ScalarType result = sum_result_type(self, std::nullopt);
  return reduce_op("trace", self, {0, 1}, false, {{result, nullptr}}, [&](ir::Graph& g, ir::Value x) -> Values {
    const ir::Shape shape = g.type(x).shape;
    ir::Value diagonal = ir::compare(g, ir::iota(g, ir::DType::S64, shape, 0), ir::iota(g, ir::DType::S64, shape, 1),
                                     ir::Compare::EQ);
    ir::Value on = ir::select(g, diagonal, x, lowering::splat(g, x, 0));
    return {lowering::sum(g, on, {0, 1}, false, lowering::accumulate_dtype(ir_of(result)), ir_of(result))};
  })[0];
}

// Same sizes and every element equal (NaN != NaN), read back to the host.
bool equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  c10::ScalarType common = at::result_type(self, other);
  c10::DeviceGuard guard(self.device());
  Program p("equal", self.device());
  ir::Graph& g = p.graph();
  ir::Value eq = ir::compare(g, p.read_as(self, common), p.read_as(other, common), ir::Compare::EQ);
  ir::Dims all = dims_of(self, std::nullopt);
  ir::Value r = ir::convert(g, lowering::all(g, eq, all, false), ir::DType::S64);
  engine::BufferRef buffer = p.run_for_result(r);
  int64_t v = 0;
  engine::Runtime::get().download(*buffer, &v, sizeof(v));
  return v != 0;
}

// Each slice along `dim` whose p-norm exceeds maxnorm is scaled down to it
// (by maxnorm / (norm + 1e-7), as ATen).
at::Tensor renorm_op(const char* name, const at::Tensor& self, const c10::Scalar& p, int64_t dim,
                     const c10::Scalar& maxnorm, at::Tensor* out, bool inplace) {
  TORCH_CHECK(!p.isComplex(), "renorm: p must be real-valued");
  TORCH_CHECK(p.toDouble() > 0, "renorm: non-positive-norm not supported");
  TORCH_CHECK(!maxnorm.isComplex(), "renorm: maxnorm must be real-valued");
  TORCH_CHECK(maxnorm.toDouble() >= 0, "renorm: expected maxnorm to be >= 0 but got ", maxnorm.toDouble());
  TORCH_CHECK(self.dim() > 1, "renorm: input needs at least 2 dimensions, got ", self.dim(), " dimensions");
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "renorm: expected a floating point input, got ",
              self.scalar_type());
  int64_t d = lowering::wrap_dim(dim, self.dim());
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(name, out, self.sizes(), self.scalar_type(), self.device(), inplace);
  if (self.numel() == 0) return output;
  Program prog(name, self.device());
  ir::Graph& g = prog.graph();
  ir::DType dtype = ir_of(self.scalar_type()), acc = lowering::accumulate_dtype(dtype);
  ir::Value x = ir::convert(g, prog.read(self), acc);
  ir::Dims dims;
  for (int64_t j = 0; j < self.dim(); ++j)
    if (j != d) dims.push_back(j);
  const ir::Shape shape = g.type(x).shape;
  ir::Value norm = lowering::expand_reduced(g, lowering::vector_norm(g, x, p.toDouble(), dims, false, acc), shape, dims);
  ir::Value limit = ir::broadcast_in_dim(g, prog.scalar(maxnorm, acc), shape, {});
  ir::Value factor = ir::binary(g, ir::Op::Divide, limit,
                                ir::binary(g, ir::Op::Add, norm, lowering::splat(g, norm, 1e-7)));
  factor = ir::select(g, ir::compare(g, norm, limit, ir::Compare::GT), factor, lowering::splat(g, norm, 1));
  prog.write(output, ir::convert(g, ir::binary(g, ir::Op::Multiply, x, factor), dtype));
  prog.run();
  return output;
}
at::Tensor renorm(const at::Tensor& self, const c10::Scalar& p, int64_t dim, const c10::Scalar& maxnorm) {
  return renorm_op("renorm", self, p, dim, maxnorm, nullptr, false);
}
at::Tensor& renorm_inplace(at::Tensor& self, const c10::Scalar& p, int64_t dim, const c10::Scalar& maxnorm) {
  renorm_op("renorm_", self, p, dim, maxnorm, &self, true);
  return self;
}
at::Tensor& renorm_out(const at::Tensor& self, const c10::Scalar& p, int64_t dim, const c10::Scalar& maxnorm,
                       at::Tensor& out) {
  renorm_op("renorm.out", self, p, dim, maxnorm, &out, false);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.dim_IntList", sum_dim);
  m.impl("sum.IntList_out", sum_out);
  m.impl("sum", sum_all);
  m.impl("mean.dim", mean_dim);
  m.impl("mean.out", mean_out);
  m.impl("prod", prod_all);
  m.impl("prod.out", prod_all_out);
  m.impl("prod.dim_int", prod_dim);
  m.impl("prod.int_out", prod_dim_out);
  m.impl("max", max_all);
  m.impl("max.unary_out", max_all_out);
  m.impl("max.dim", max_dim);
  m.impl("max.dim_max", max_dim_out);
  m.impl("min", min_all);
  m.impl("min.unary_out", min_all_out);
  m.impl("min.dim", min_dim);
  m.impl("min.dim_min", min_dim_out);
  m.impl("amax", amax);
  m.impl("amax.out", amax_out);
  m.impl("amin", amin);
  m.impl("amin.out", amin_out);
  m.impl("argmax", argmax);
  m.impl("argmax.out", argmax_out);
  m.impl("argmin", argmin);
  m.impl("argmin.out", argmin_out);
  m.impl("aminmax", aminmax);
  m.impl("aminmax.out", aminmax_out);
  m.impl("var.correction", var_correction);
  m.impl("var.correction_out", var_correction_out);
  m.impl("std.correction", std_correction);
  m.impl("std.correction_out", std_correction_out);
  m.impl("var_mean.correction", var_mean_correction);
  m.impl("var_mean.correction_out", var_mean_correction_out);
  m.impl("std_mean.correction", std_mean_correction);
  m.impl("std_mean.correction_out", std_mean_correction_out);
  m.impl("logsumexp", logsumexp);
  m.impl("logsumexp.out", logsumexp_out);
  m.impl("all", all_all);
  m.impl("all.all_out", all_all_out);
  m.impl("all.dim", all_dim);
  m.impl("all.out", all_dim_out);
  m.impl("all.dims", all_dims);
  m.impl("all.dims_out", all_dims_out);
  m.impl("any", any_all);
  m.impl("any.all_out", any_all_out);
  m.impl("any.dim", any_dim);
  m.impl("any.out", any_dim_out);
  m.impl("any.dims", any_dims);
  m.impl("any.dims_out", any_dims_out);
  m.impl("linalg_vector_norm", linalg_vector_norm);
  m.impl("linalg_vector_norm.out", linalg_vector_norm_out);
  m.impl("norm.Scalar", norm_scalar);
  m.impl("norm.Scalar_out", norm_scalar_out);
  m.impl("norm.ScalarOpt_dim", norm_dim);
  m.impl("norm.ScalarOpt_dim_dtype", norm_dim_dtype);
  m.impl("norm.out", norm_out);
  m.impl("norm.dtype_out", norm_dtype_out);
  m.impl("norm.ScalarOpt_dtype", norm_dtype);
  m.impl("norm.ScalarOpt_dtype_out", norm_dtype_all_out);
  m.impl("cumsum", cumsum);
  m.impl("cumsum.out", cumsum_out);
  m.impl("cumsum_", cumsum_inplace);
  m.impl("cumprod", cumprod);
  m.impl("cumprod.out", cumprod_out);
  m.impl("cumprod_", cumprod_inplace);
  m.impl("nansum", nansum);
  m.impl("nansum.out", nansum_out);
  m.impl("count_nonzero.dim_IntList", count_nonzero_dims);
  m.impl("trace", trace);
  m.impl("equal", equal);
  m.impl("renorm", renorm);
  m.impl("renorm_", renorm_inplace);
  m.impl("renorm.out", renorm_out);
}

}  // namespace tpu::aten
