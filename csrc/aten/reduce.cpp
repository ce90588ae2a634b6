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
// `captures`: what `build` captured besides `dims` and `keepdim`, when that is
// all its graph depends on: the graph is then remembered (aten/op_memo.h).
std::vector<at::Tensor> reduce_op(const char* name, const at::Tensor& self, const ir::Dims& dims, bool keepdim,
                                  const std::vector<Result>& results, const ReduceBuild& build,
                                  std::optional<int64_t> captures = std::nullopt) {
  c10::DeviceGuard guard(self.device());
  ir::Shape shape = lowering::reduced_shape(to_shape(self.sizes()), dims, keepdim);
  std::vector<at::Tensor> outputs;
  for (const Result& r : results)
    outputs.push_back(prepare_output(name, r.out, shape, r.dtype, self.device(), false));
  Program p(name, self.device());
  auto build_into = [&](Program& q) {
    Values values = build(q.graph(), q.read(self));
    for (size_t i = 0; i < outputs.size(); ++i) q.write(outputs[i], values[i]);
  };
  if (captures) {
    c10::SmallVector<const at::Tensor*, 4> tensors{&self};
    for (const at::Tensor& t : outputs) tensors.push_back(&t);
    c10::SmallVector<int64_t, 8> words{*captures, keepdim};
    words.append(dims.begin(), dims.end());
    build_or_apply(p, name, tensors, build.target_type(), words, build_into);
  } else {
    build_into(p);
  }
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

// What a sum or prod returns: `dtype`, else out='s dtype, else self's (integers
// widened to int64); a mean's is floating whatever out= is.
c10::ScalarType mean_result_type(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  c10::ScalarType t = dtype.value_or(self.scalar_type());
  TORCH_CHECK(c10::isFloatingType(t) || c10::isComplexType(t),
              "mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
              "dtype. Got: ", t);
  return t;
}
c10::ScalarType accumulate_result(Overload o, Accumulate kind, const at::Tensor& self,
                                  std::optional<c10::ScalarType> dtype) {
  if (kind == Accumulate::Mean) return mean_result_type(self, dtype);
  return o.out != nullptr ? dtype.value_or(o.out->scalar_type()) : sum_result_type(self, dtype);
}

at::Tensor accumulate(Overload o, Accumulate kind, const at::Tensor& self, const ir::Dims& dims, bool keepdim,
                      c10::ScalarType result) {
  std::string name = variant(o);
  return reduce_op(name.c_str(), self, dims, keepdim, {{result, o.out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    ir::DType acc = lowering::accumulate_dtype(ir_of(result));
    ir::DType res = ir_of(result);
    switch (kind) {
      case Accumulate::Sum: return {lowering::sum(g, x, dims, keepdim, acc, res)};
      case Accumulate::Mean: return {lowering::mean(g, x, dims, keepdim, acc, res)};
      case Accumulate::Prod: return {lowering::prod(g, x, dims, keepdim, acc, res)};
    }
    return {};
  }, static_cast<int64_t>(kind) | static_cast<int64_t>(result) << 8)[0];
}
// sum / mean over a dim list (none: all), prod over all dims or one. The result
// dtype is checked before the dims, as ATen does (mean of bools over a bad dim: the dtype error).
template <Accumulate kKind>
at::Tensor accumulate_dims(Overload o, const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                           std::optional<c10::ScalarType> dtype) {
  c10::ScalarType result = accumulate_result(o, kKind, self, dtype);
  return accumulate(o, kKind, self, dims_of(self, dim), keepdim, result);
}
template <Accumulate kKind>
at::Tensor accumulate_all(Overload o, const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  c10::ScalarType result = accumulate_result(o, kKind, self, dtype);
  return accumulate(o, kKind, self, dims_of(self, std::nullopt), false, result);
}
at::Tensor prod_dim(Overload o, const at::Tensor& self, int64_t dim, bool keepdim,
                    std::optional<c10::ScalarType> dtype) {
  c10::ScalarType result = accumulate_result(o, Accumulate::Prod, self, dtype);
  return accumulate(o, Accumulate::Prod, self, dims_of(self, at::IntArrayRef{dim}), keepdim, result);
}

// ------------------------------------------------------------ extrema

// The max (min) over `dims`, in self's dtype.
at::Tensor extremum(Overload o, bool is_max, const at::Tensor& self, const ir::Dims& dims, bool keepdim) {
  std::string name = variant(o);
  return reduce_op(name.c_str(), self, dims, keepdim, {{self.scalar_type(), o.out}},
                   [&](ir::Graph& g, ir::Value x) -> Values {
                     return {is_max ? lowering::amax(g, x, dims, keepdim) : lowering::amin(g, x, dims, keepdim)};
                   })[0];
}
template <bool kMax>
at::Tensor extreme_all(Overload o, const at::Tensor& self) {
  check_all_reduce_nonempty(o.name, self);
  return extremum(o, kMax, self, dims_of(self, std::nullopt), false);
}

// max.dim / min.dim: values and the index of the first extreme, one program.
template <bool kMax>
std::tuple<at::Tensor, at::Tensor> extreme_dim(Overload o, const at::Tensor& self, int64_t dim, bool keepdim) {
  ir::Dims dims = dims_of(self, at::IntArrayRef{dim});
  check_dims_nonempty(o.name, self, dims);
  std::optional<int64_t> d = dims.empty() ? std::nullopt : std::optional<int64_t>(dims[0]);
  std::string name = variant(o);
  auto r = reduce_op(name.c_str(), self, dims, keepdim, {{self.scalar_type(), o.out}, {c10::kLong, o.out2}},
                     [&](ir::Graph& g, ir::Value x) -> Values {
                       ir::Value v = kMax ? lowering::amax(g, x, dims, keepdim) : lowering::amin(g, x, dims, keepdim);
                       if (!d) return {v, ir::full(g, ir::DType::S64, 0, {})};  // 0-dim input: index 0
                       return {v, lowering::arg_extreme(g, x, d, keepdim, kMax)};
                     });
  return {r[0], r[1]};
}

template <bool kMax>
at::Tensor amax_amin(Overload o, const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  if (dim.empty()) check_all_reduce_nonempty(o.name, self);
  ir::Dims dims = dims_of(self, dim);
  check_dims_nonempty(o.name, self, dims);
  TORCH_CHECK(!o.out || o.out->scalar_type() == self.scalar_type(), "Expected the dtype for input and out to match, "
              "but got ", self.scalar_type(), " for input's dtype and ", o.out->scalar_type(), " for out's dtype.");
  return extremum(o, kMax, self, dims, keepdim);
}

template <bool kMax>
at::Tensor arg_extreme(Overload o, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  TORCH_CHECK(self.scalar_type() != c10::kBool, o.name, "(): does not support bool input");
  ir::Dims dims;
  std::optional<int64_t> d;
  if (dim.has_value()) {
    dims = dims_of(self, at::IntArrayRef{*dim});
    check_dims_nonempty(o.name, self, dims);
    if (!dims.empty()) d = dims[0];
  } else {
    TORCH_CHECK_INDEX(self.numel() > 0, o.name, "(): Expected reduction dim to be specified for input.numel() == 0.");
    dims = dims_of(self, std::nullopt);
  }
  std::string name = variant(o);
  return reduce_op(name.c_str(), self, dims, keepdim, {{c10::kLong, o.out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    if (dim.has_value() && !d) return {ir::full(g, ir::DType::S64, 0, {})};  // 0-dim input
    return {lowering::arg_extreme(g, x, d, keepdim, kMax)};
  })[0];
}

std::tuple<at::Tensor, at::Tensor> aminmax(Overload o, const at::Tensor& self, std::optional<int64_t> dim,
                                           bool keepdim) {
  ir::Dims dims = dim.has_value() ? dims_of(self, at::IntArrayRef{*dim}) : dims_of(self, std::nullopt);
  bool empty = self.numel() == 0 && (!dim.has_value() || self.dim() == 0);
  for (int64_t d : dims) empty = empty || self.size(d) == 0;
  TORCH_CHECK(!empty, "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.");
  std::string name = variant(o);
  auto r = reduce_op(name.c_str(), self, dims, keepdim, {{self.scalar_type(), o.out}, {self.scalar_type(), o.out2}},
                     [&](ir::Graph& g, ir::Value x) -> Values {
                       return {lowering::amin(g, x, dims, keepdim), lowering::amax(g, x, dims, keepdim)};
                     });
  return {r[0], r[1]};
}

// ------------------------------------------------------------ moments

enum class Moment { Var, Std };

std::vector<at::Tensor> moments(Overload o, Moment kind, bool with_mean, const at::Tensor& self,
                                at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction,
                                bool keepdim) {
  c10::ScalarType t = self.scalar_type();
  TORCH_CHECK(c10::isFloatingType(t) || c10::isComplexType(t),
              "std and var only support floating point and complex dtypes");
  double c = correction.has_value() ? correction->toDouble() : 1.0;
  ir::Dims dims = dims_of(self, dim);
  std::vector<Result> results{{t, o.out}};
  if (with_mean) results.push_back({t, o.out2});
  std::string name = variant(o);
  return reduce_op(name.c_str(), self, dims, keepdim, results, [&](ir::Graph& g, ir::Value x) -> Values {
    lowering::Moments m = lowering::moments(g, x, dims, keepdim, c, lowering::accumulate_dtype(ir_of(t)));
    ir::Value v = kind == Moment::Std ? ir::unary(g, ir::Op::Sqrt, m.var) : m.var;
    return {v, m.mean};
  });
}
// var / std, and var_mean / std_mean (two results).
template <Moment kKind>
at::Tensor moment(Overload o, const at::Tensor& self, at::OptionalIntArrayRef dim,
                  const std::optional<c10::Scalar>& correction, bool keepdim) {
  return moments(o, kKind, false, self, dim, correction, keepdim)[0];
}
template <Moment kKind>
std::tuple<at::Tensor, at::Tensor> moment_and_mean(Overload o, const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                   const std::optional<c10::Scalar>& correction, bool keepdim) {
  auto r = moments(o, kKind, true, self, dim, correction, keepdim);
  return {r[0], r[1]};
}

// ------------------------------------------------------------ logsumexp

at::Tensor logsumexp(Overload o, const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  c10::ScalarType result = o.out ? o.out->scalar_type() : float_type_for(self.scalar_type());
  ir::Dims dims = dims_of(self, dim);
  return reduce_op("logsumexp", self, dims, keepdim, {{result, o.out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    return {lowering::logsumexp(g, x, dims, keepdim, ir_of(result))};
  })[0];
}

// ------------------------------------------------------------ all / any

// uint8 inputs give uint8 results, bool otherwise (ATen keeps this for
// backward compatibility).
at::Tensor logical(Overload o, bool is_all, const at::Tensor& self, const ir::Dims& dims, bool keepdim) {
  c10::ScalarType result = o.out                              ? o.out->scalar_type()
                           : self.scalar_type() == c10::kByte ? c10::kByte
                                                              : c10::kBool;
  TORCH_CHECK(!o.out || result == c10::kBool || result == c10::kByte, o.name,
              " only supports bool tensor for result, got: ", result);
  return reduce_op(o.name, self, dims, keepdim, {{result, o.out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    return {is_all ? lowering::all(g, x, dims, keepdim) : lowering::any(g, x, dims, keepdim)};
  })[0];
}
// all / any over every dim, one dim, or a dim list (none: every dim).
template <bool kAll>
at::Tensor logical_all(Overload o, const at::Tensor& self) {
  return logical(o, kAll, self, dims_of(self, std::nullopt), false);
}
template <bool kAll>
at::Tensor logical_dim(Overload o, const at::Tensor& self, int64_t dim, bool keepdim) {
  return logical(o, kAll, self, dims_of(self, at::IntArrayRef{dim}), keepdim);
}
template <bool kAll>
at::Tensor logical_dims(Overload o, const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {
  return logical(o, kAll, self, dims_of(self, dim), keepdim);
}

// ------------------------------------------------------------ norms

std::string ord_string(double ord) {
  if (std::isinf(ord)) return ord > 0 ? "inf" : "-inf";
  if (ord == std::floor(ord)) return std::to_string(static_cast<int64_t>(ord));
  return std::to_string(ord);
}

at::Tensor vector_norm(Overload o, const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
                       bool keepdim, std::optional<c10::ScalarType> dtype) {
  c10::ScalarType in = self.scalar_type();
  TORCH_CHECK(c10::isFloatingType(in) || c10::isComplexType(in),
              "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", in);
  c10::ScalarType result = dtype.value_or(o.out ? o.out->scalar_type() : in);
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
  std::string name = variant(o);
  return reduce_op(name.c_str(), self, dims, keepdim, {{result, o.out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    return {lowering::vector_norm(g, x, p, dims, keepdim, ir_of(result))};
  })[0];
}
// torch.norm's overloads, over every dim or a dim list, with or without a dtype: p None means 2.
c10::Scalar norm_p(const std::optional<c10::Scalar>& p) { return p.value_or(2); }
at::Tensor norm_all(Overload o, const at::Tensor& self, const c10::Scalar& p) {
  return vector_norm(o, self, p, std::nullopt, false, std::nullopt);
}
at::Tensor norm_all_dtype(Overload o, const at::Tensor& self, const std::optional<c10::Scalar>& p,
                          c10::ScalarType dtype) {
  return vector_norm(o, self, norm_p(p), std::nullopt, false, dtype);
}
at::Tensor norm_dims(Overload o, const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim,
                     bool keepdim) {
  return vector_norm(o, self, norm_p(p), dim, keepdim, std::nullopt);
}
at::Tensor norm_dims_dtype(Overload o, const at::Tensor& self, const std::optional<c10::Scalar>& p,
                           at::IntArrayRef dim, bool keepdim, c10::ScalarType dtype) {
  return vector_norm(o, self, norm_p(p), dim, keepdim, dtype);
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
  std::string name = variant(o);
  at::Tensor output = prepare_output(name.c_str(), o.out, self.sizes(), result, self.device(), o.inplace);
  Program p(name.c_str(), self.device());
  p.write(output, lowering::cumulative(p.graph(), p.read(self), d, kCombiner, ir_of(result)));
  p.run();
  return output;
}

// ------------------------------------------------------------ nansum / count_nonzero / trace / equal / renorm

at::Tensor nansum(Overload o, const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<c10::ScalarType> dtype) {
  TORCH_CHECK(!self.is_complex(), "nansum does not support complex inputs");
  c10::ScalarType result = accumulate_result(o, Accumulate::Sum, self, dtype);
  ir::Dims dims = dims_of(self, dim);
  std::string name = variant(o);
  return reduce_op(name.c_str(), self, dims, keepdim, {{result, o.out}}, [&](ir::Graph& g, ir::Value x) -> Values {
    ir::Value clean = ir::select(g, lowering::is_nan(g, x), lowering::splat(g, x, 0), x);
    return {lowering::sum(g, clean, dims, keepdim, lowering::accumulate_dtype(ir_of(result)), ir_of(result))};
  })[0];
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
at::Tensor renorm(Overload o, const at::Tensor& self, const c10::Scalar& p, int64_t dim,
                  const c10::Scalar& maxnorm) {
  TORCH_CHECK(!p.isComplex(), "renorm: p must be real-valued");
  TORCH_CHECK(p.toDouble() > 0, "renorm: non-positive-norm not supported");
  TORCH_CHECK(!maxnorm.isComplex(), "renorm: maxnorm must be real-valued");
  TORCH_CHECK(maxnorm.toDouble() >= 0, "renorm: expected maxnorm to be >= 0 but got ", maxnorm.toDouble());
  TORCH_CHECK(self.dim() > 1, "renorm: input needs at least 2 dimensions, got ", self.dim(), " dimensions");
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "renorm: expected a floating point input, got ",
              self.scalar_type());
  int64_t d = lowering::wrap_dim(dim, self.dim());
  c10::DeviceGuard guard(self.device());
  std::string name = variant(o);
  at::Tensor output = prepare_output(name.c_str(), o.out, self.sizes(), self.scalar_type(), self.device(), o.inplace);
  if (self.numel() == 0) return output;
  Program prog(name.c_str(), self.device());
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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  impl_variants<accumulate_dims<Accumulate::Sum>, "sum">(m, {".dim_IntList", nullptr, ".IntList_out"});
  impl_variants<accumulate_all<Accumulate::Sum>, "sum">(m, {"", nullptr, nullptr});
  impl_variants<accumulate_dims<Accumulate::Mean>, "mean">(m, {".dim", nullptr, ".out"});
  impl_variants<accumulate_all<Accumulate::Prod>, "prod">(m, kFunctionalAndOut);
  impl_variants<prod_dim, "prod">(m, {".dim_int", nullptr, ".int_out"});
  impl_variants<extreme_all<true>, "max">(m, {"", nullptr, ".unary_out"});
  impl_variants<extreme_all<false>, "min">(m, {"", nullptr, ".unary_out"});
  impl_variants<extreme_dim<true>, "max">(m, {".dim", nullptr, ".dim_max"});
  impl_variants<extreme_dim<false>, "min">(m, {".dim", nullptr, ".dim_min"});
  impl_variants<amax_amin<true>, "amax">(m, kFunctionalAndOut);
  impl_variants<amax_amin<false>, "amin">(m, kFunctionalAndOut);
  impl_variants<arg_extreme<true>, "argmax">(m, kFunctionalAndOut);
  impl_variants<arg_extreme<false>, "argmin">(m, kFunctionalAndOut);
  impl_variants<aminmax, "aminmax">(m, kFunctionalAndOut);
  constexpr OverloadNames kCorrection{".correction", nullptr, ".correction_out"};
  impl_variants<moment<Moment::Var>, "var">(m, kCorrection);
  impl_variants<moment<Moment::Std>, "std">(m, kCorrection);
  impl_variants<moment_and_mean<Moment::Var>, "var_mean">(m, kCorrection);
  impl_variants<moment_and_mean<Moment::Std>, "std_mean">(m, kCorrection);
  impl_variants<logsumexp, "logsumexp">(m, kFunctionalAndOut);
  impl_variants<logical_all<true>, "all">(m, {"", nullptr, ".all_out"});
  impl_variants<logical_dim<true>, "all">(m, {".dim", nullptr, ".out"});
  impl_variants<logical_dims<true>, "all">(m, {".dims", nullptr, ".dims_out"});
  impl_variants<logical_all<false>, "any">(m, {"", nullptr, ".all_out"});
  impl_variants<logical_dim<false>, "any">(m, {".dim", nullptr, ".out"});
  impl_variants<logical_dims<false>, "any">(m, {".dims", nullptr, ".dims_out"});
  impl_variants<vector_norm, "linalg_vector_norm">(m, kFunctionalAndOut);
  impl_variants<norm_all, "norm">(m, {".Scalar", nullptr, ".Scalar_out"});
  impl_variants<norm_dims, "norm">(m, {".ScalarOpt_dim", nullptr, ".out"});
  impl_variants<norm_dims_dtype, "norm">(m, {".ScalarOpt_dim_dtype", nullptr, ".dtype_out"});
  impl_variants<norm_all_dtype, "norm">(m, {".ScalarOpt_dtype", nullptr, ".ScalarOpt_dtype_out"});
  impl_variants<cumulative_op<ir::Combiner::Add>, "cumsum">(m);
  impl_variants<cumulative_op<ir::Combiner::Mul>, "cumprod">(m);
  impl_variants<nansum, "nansum">(m, kFunctionalAndOut);
  m.impl("count_nonzero.dim_IntList", count_nonzero_dims);
  m.impl("trace", trace);
  m.impl("equal", equal);
  impl_variants<renorm, "renorm">(m);
}

}  // namespace tpu::aten
