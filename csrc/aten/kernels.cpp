// Entry points of the natively lowered ops: ATen semantics (type promotion,
// broadcasting, out=/in-place variants) around the lowerings.
#include <ATen/ExpandUtils.h>
#include <ATen/TypeDefault.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <functional>

#include "aten/program.h"
#include "ir/ops.h"
#include "lowering/elementwise.h"
#include "lowering/linalg.h"
#include "lowering/reduce.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using lowering::Binary;
using lowering::Unary;
using Build = std::function<ir::Value(ir::Graph&, const std::vector<ir::Value>&)>;

ir::Shape to_shape(c10::IntArrayRef sizes) { return ir::Shape(sizes.begin(), sizes.end()); }

// The result tensor of an op: `out` (in-place or out=, resized as ATen does)
// or a fresh tensor of `shape` and `dtype`.
at::Tensor prepare_output(const char* name, const at::Tensor* out, c10::IntArrayRef shape,
                          c10::ScalarType dtype, c10::Device device, bool inplace) {
  if (out == nullptr) return at::empty(shape, at::TensorOptions().dtype(dtype).device(device));
  TORCH_CHECK(c10::canCast(dtype, out->scalar_type()), "result type ", dtype,
              " can't be cast to the desired output type ", out->scalar_type());
  if (inplace) {
    TORCH_CHECK(out->sizes().equals(shape), "output with shape ", out->sizes(),
                " doesn't match the broadcast shape ", shape);
  } else {
    at::native::resize_output(*out, shape);
  }
  return *out;
}

// Runs an elementwise op: inputs are converted to `compute` and broadcast to
// one shape, `build` combines them, the result lands in `out` or a new tensor
// of dtype `result`.
at::Tensor elementwise(const char* name, const std::vector<at::Tensor>& inputs, c10::ScalarType compute,
                       c10::ScalarType result, const Build& build, const at::Tensor* out = nullptr,
                       bool inplace = false) {
  c10::DimVector shape;
  for (const at::Tensor& t : inputs) shape = at::infer_size_dimvector(shape, t.sizes());
  int device = -1;
  for (const at::Tensor& t : inputs)
    if (t.is_privateuseone()) { device = t.device().index(); break; }
  if (device < 0 && out != nullptr) device = out->device().index();
  c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  c10::DeviceGuard guard(where);
  at::Tensor output = prepare_output(name, out, shape, result, where, inplace);
  Program p(name, device);
  ir::Graph& g = p.graph();
  ir::Shape target = to_shape(shape);
  std::vector<ir::Value> values;
  values.reserve(inputs.size());
  for (const at::Tensor& t : inputs) {
    ir::Value v = p.read_as(t, compute);
    values.push_back(ir::broadcast_to(g, v, target));
  }
  p.write(output, build(g, values));
  p.run();
  return output;
}

c10::ScalarType float_type_for(c10::ScalarType t) {
  return c10::isFloatingType(t) ? t : c10::typeMetaToScalarType(c10::get_default_dtype());
}

// ------------------------------------------------------------ binary arithmetic

// add/sub with alpha, mul: the three variants share one body.
at::Tensor arith(const char* name, Binary op, const at::Tensor& self, const at::Tensor& other,
                 const c10::Scalar& alpha, const at::Tensor* out, bool inplace) {
  c10::ScalarType compute = at::result_type(self, other);
  if (op == Binary::Sub)
    TORCH_CHECK(compute != c10::kBool,
                "Subtraction, the `-` operator, with two bool tensors is not supported. "
                "Use the `^` or `logical_xor()` operator instead.");
  // alpha travels as a third (scalar) operand so that it is a runtime parameter.
  std::vector<at::Tensor> inputs{self, other};
  bool scaled = !(alpha.isIntegral(true) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0);
  if (scaled) inputs.push_back(at::scalar_tensor(alpha, at::TensorOptions().dtype(compute)));
  return elementwise(name, inputs, compute, compute,
                     [op, scaled](ir::Graph& g, const std::vector<ir::Value>& v) {
                       ir::Value rhs = scaled ? lowering::binary(g, Binary::Mul, v[1], v[2]) : v[1];
                       return lowering::binary(g, op, v[0], rhs);
                     },
                     out, inplace);
}

#define ARITH_KERNELS(NAME, OP)                                                                         \
  at::Tensor NAME##_tensor(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) { \
    return arith(#NAME, OP, self, other, alpha, nullptr, false);                                        \
  }                                                                                                     \
  at::Tensor& NAME##_inplace(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {     \
    arith(#NAME "_", OP, self, other, alpha, &self, true);                                              \
    return self;                                                                                        \
  }                                                                                                     \
  at::Tensor& NAME##_out(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha,     \
                         at::Tensor& out) {                                                             \
    arith(#NAME ".out", OP, self, other, alpha, &out, false);                                           \
    return out;                                                                                         \
  }
ARITH_KERNELS(add, Binary::Add)
ARITH_KERNELS(sub, Binary::Sub)
#undef ARITH_KERNELS

at::Tensor mul_tensor(const at::Tensor& self, const at::Tensor& other) {
  return arith("mul", Binary::Mul, self, other, 1, nullptr, false);
}
at::Tensor& mul_inplace(at::Tensor& self, const at::Tensor& other) {
  arith("mul_", Binary::Mul, self, other, 1, &self, true);
  return self;
}
at::Tensor& mul_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  arith("mul.out", Binary::Mul, self, other, 1, &out, false);
  return out;
}

// div with rounding_mode None (true division), "trunc" or "floor".
at::Tensor divide(const char* name, const at::Tensor& self, const at::Tensor& other,
                  std::optional<c10::string_view> mode, const at::Tensor* out, bool inplace) {
  c10::ScalarType common = at::result_type(self, other);
  Binary op = Binary::Div;
  c10::ScalarType compute = float_type_for(common);
  if (mode.has_value()) {
    TORCH_CHECK(*mode == "trunc" || *mode == "floor",
                "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *mode, "'");
    op = *mode == "trunc" ? Binary::TruncDiv : Binary::FloorDiv;
    compute = common;
    TORCH_CHECK(compute != c10::kBool, "div with rounding mode is not supported for bool tensors");
  }
  return elementwise(name, {self, other}, compute, compute,
                     [op](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::binary(g, op, v[0], v[1]);
                     },
                     out, inplace);
}

at::Tensor div_tensor(const at::Tensor& self, const at::Tensor& other) {
  return divide("div", self, other, std::nullopt, nullptr, false);
}
at::Tensor& div_inplace(at::Tensor& self, const at::Tensor& other) {
  divide("div_", self, other, std::nullopt, &self, true);
  return self;
}
at::Tensor& div_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  divide("div.out", self, other, std::nullopt, &out, false);
  return out;
}
at::Tensor div_mode(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode) {
  return divide("div", self, other, mode, nullptr, false);
}
at::Tensor& div_mode_inplace(at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode) {
  divide("div_", self, other, mode, &self, true);
  return self;
}
at::Tensor& div_mode_out(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode,
                         at::Tensor& out) {
  divide("div.out", self, other, mode, &out, false);
  return out;
}

// ------------------------------------------------------------ comparisons

at::Tensor comparison(const char* name, ir::Compare op, const at::Tensor& self, const at::Tensor& other,
                      const at::Tensor* out, bool inplace) {
  c10::ScalarType compute = at::result_type(self, other);
  return elementwise(name, {self, other}, compute, inplace ? self.scalar_type() : c10::kBool,
                     [op](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::compare(g, op, v[0], v[1]);
                     },
                     out, inplace);
}

at::Tensor scalar_operand(const c10::Scalar& s) {
  at::Tensor t = at::scalar_tensor(s, at::TensorOptions().dtype(s.type()));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

#define COMPARE_KERNELS(NAME, OP)                                                                     \
  at::Tensor NAME##_tensor(const at::Tensor& a, const at::Tensor& b) {                               \
    return comparison(#NAME, OP, a, b, nullptr, false);                                              \
  }                                                                                                  \
  at::Tensor NAME##_scalar(const at::Tensor& a, const c10::Scalar& b) {                              \
    return comparison(#NAME, OP, a, scalar_operand(b), nullptr, false);                              \
  }                                                                                                  \
  at::Tensor& NAME##_tensor_inplace(at::Tensor& a, const at::Tensor& b) {                            \
    comparison(#NAME "_", OP, a, b, &a, true);                                                       \
    return a;                                                                                        \
  }                                                                                                  \
  at::Tensor& NAME##_scalar_inplace(at::Tensor& a, const c10::Scalar& b) {                           \
    comparison(#NAME "_", OP, a, scalar_operand(b), &a, true);                                       \
    return a;                                                                                        \
  }                                                                                                  \
  at::Tensor& NAME##_tensor_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {         \
    comparison(#NAME ".out", OP, a, b, &out, false);                                                 \
    return out;                                                                                      \
  }                                                                                                  \
  at::Tensor& NAME##_scalar_out(const at::Tensor& a, const c10::Scalar& b, at::Tensor& out) {        \
    comparison(#NAME ".out", OP, a, scalar_operand(b), &out, false);                                 \
    return out;                                                                                      \
  }
COMPARE_KERNELS(eq, ir::Compare::EQ)
COMPARE_KERNELS(ne, ir::Compare::NE)
COMPARE_KERNELS(lt, ir::Compare::LT)
COMPARE_KERNELS(le, ir::Compare::LE)
COMPARE_KERNELS(gt, ir::Compare::GT)
COMPARE_KERNELS(ge, ir::Compare::GE)
#undef COMPARE_KERNELS

// ------------------------------------------------------------ unary

at::Tensor unary_op(const char* name, Unary op, const at::Tensor& self, const at::Tensor* out, bool inplace) {
  c10::ScalarType compute = lowering::unary_needs_float(op) ? float_type_for(self.scalar_type())
                                                            : self.scalar_type();
  if (op == Unary::Neg)
    TORCH_CHECK(self.scalar_type() != c10::kBool,
                "Negation, the `-` operator, on a bool tensor is not supported. "
                "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  return elementwise(name, {self}, compute, compute,
                     [op](ir::Graph& g, const std::vector<ir::Value>& v) { return lowering::unary(g, op, v[0]); },
                     out, inplace);
}

#define UNARY_KERNELS(NAME, OP)                                                            \
  at::Tensor NAME##_fn(const at::Tensor& self) { return unary_op(#NAME, OP, self, nullptr, false); } \
  at::Tensor& NAME##_inplace(at::Tensor& self) {                                         \
    unary_op(#NAME "_", OP, self, &self, true);                                           \
    return self;                                                                         \
  }                                                                                      \
  at::Tensor& NAME##_out(const at::Tensor& self, at::Tensor& out) {                      \
    unary_op(#NAME ".out", OP, self, &out, false);                                        \
    return out;                                                                          \
  }
UNARY_KERNELS(neg, Unary::Neg)
UNARY_KERNELS(abs, Unary::Abs)
UNARY_KERNELS(exp, Unary::Exp)
UNARY_KERNELS(log, Unary::Log)
UNARY_KERNELS(sqrt, Unary::Sqrt)
UNARY_KERNELS(rsqrt, Unary::Rsqrt)
UNARY_KERNELS(tanh, Unary::Tanh)
UNARY_KERNELS(sigmoid, Unary::Sigmoid)
#undef UNARY_KERNELS

at::Tensor relu_fn(const at::Tensor& self) { return unary_op("relu", Unary::Relu, self, nullptr, false); }
at::Tensor& relu_inplace(at::Tensor& self) {
  unary_op("relu_", Unary::Relu, self, &self, true);
  return self;
}

at::Tensor threshold_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& threshold) {
  c10::ScalarType compute = at::result_type(grad, self);
  at::Tensor t = scalar_operand(threshold);
  return elementwise("threshold_backward", {grad, self, t}, compute, compute,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       ir::Value below = ir::compare(g, v[1], v[2], ir::Compare::LE);
                       ir::Value zero = ir::full(g, g.type(v[0]).dtype, 0, g.type(v[0]).shape);
                       return ir::select(g, below, zero, v[0]);
                     });
}

// ------------------------------------------------------------ where / fill

at::Tensor where_self(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
  c10::ScalarType compute = at::result_type(self, other);
  return elementwise("where", {cond.to(c10::kBool), self, other}, compute, compute,
                     [](ir::Graph& g, const std::vector<ir::Value>& v) {
                       return lowering::where(g, ir::convert(g, v[0], ir::DType::Pred), v[1], v[2]);
                     });
}

at::Tensor& where_out(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  c10::ScalarType compute = at::result_type(self, other);
  elementwise("where.out", {cond, self, other}, compute, compute,
              [](ir::Graph& g, const std::vector<ir::Value>& v) {
                return lowering::where(g, ir::convert(g, v[0], ir::DType::Pred), v[1], v[2]);
              },
              &out, false);
  return out;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  c10::DeviceGuard guard(self.device());
  Program p("fill_", self.device().index());
  ir::Value v = p.read_as(value, self.scalar_type());
  p.write(self, ir::broadcast_in_dim(p.graph(), v, to_shape(self.sizes()), {}));
  p.run();
  return self;
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  c10::DeviceGuard guard(self.device());
  Program p("fill_", self.device().index());
  ir::Value v = p.scalar(value, lowering::to_ir(self.scalar_type()));
  p.write(self, ir::broadcast_in_dim(p.graph(), v, to_shape(self.sizes()), {}));
  p.run();
  return self;
}

at::Tensor& zero_(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  Program p("zero_", self.device().index());
  p.write(self, ir::full(p.graph(), lowering::to_ir(self.scalar_type()), 0, to_shape(self.sizes())));
  p.run();
  return self;
}

// ------------------------------------------------------------ reductions

c10::ScalarType sum_result_type(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  if (dtype) return *dtype;
  return c10::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? c10::kLong : self.scalar_type();
}

ir::DType accumulate_type(c10::ScalarType t) {
  // Half-precision sums accumulate in float32, as ATen does on CPU and CUDA.
  if (t == c10::kHalf || t == c10::kBFloat16) return ir::DType::F32;
  return lowering::to_ir(t);
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
    if (!(alpha.isIntegral(true) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0))
      r = lowering::scale(g, r, p.scalar(alpha, compute));
    bool beta_zero = beta.isIntegral(true) ? beta.toLong() == 0 : beta.toDouble() == 0.0;
    if (!beta_zero) {  // beta == 0 ignores self entirely (NaNs included), as ATen does
      ir::Value bias = ir::broadcast_to(g, p.read_as(*self, dtype), target);
      if (!(beta.isIntegral(true) ? beta.toLong() == 1 : beta.toDouble() == 1.0))
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
  m.impl("add.Tensor", add_tensor);
  m.impl("add_.Tensor", add_inplace);
  m.impl("add.out", add_out);
  m.impl("sub.Tensor", sub_tensor);
  m.impl("sub_.Tensor", sub_inplace);
  m.impl("sub.out", sub_out);
  m.impl("mul.Tensor", mul_tensor);
  m.impl("mul_.Tensor", mul_inplace);
  m.impl("mul.out", mul_out);
  m.impl("div.Tensor", div_tensor);
  m.impl("div_.Tensor", div_inplace);
  m.impl("div.out", div_out);
  m.impl("div.Tensor_mode", div_mode);
  m.impl("div_.Tensor_mode", div_mode_inplace);
  m.impl("div.out_mode", div_mode_out);
#define REGISTER_COMPARE(NAME)                          \
  m.impl(#NAME ".Tensor", NAME##_tensor);               \
  m.impl(#NAME ".Scalar", NAME##_scalar);               \
  m.impl(#NAME "_.Tensor", NAME##_tensor_inplace);      \
  m.impl(#NAME "_.Scalar", NAME##_scalar_inplace);      \
  m.impl(#NAME ".Tensor_out", NAME##_tensor_out);       \
  m.impl(#NAME ".Scalar_out", NAME##_scalar_out);
  REGISTER_COMPARE(eq)
  REGISTER_COMPARE(ne)
  REGISTER_COMPARE(lt)
  REGISTER_COMPARE(le)
  REGISTER_COMPARE(gt)
  REGISTER_COMPARE(ge)
#undef REGISTER_COMPARE
#define REGISTER_UNARY(NAME)             \
  m.impl(#NAME, NAME##_fn);              \
  m.impl(#NAME "_", NAME##_inplace);     \
  m.impl(#NAME ".out", NAME##_out);
  REGISTER_UNARY(neg)
  REGISTER_UNARY(abs)
  REGISTER_UNARY(exp)
  REGISTER_UNARY(log)
  REGISTER_UNARY(sqrt)
  REGISTER_UNARY(rsqrt)
  REGISTER_UNARY(tanh)
  REGISTER_UNARY(sigmoid)
#undef REGISTER_UNARY
  m.impl("relu", relu_fn);
  m.impl("relu_", relu_inplace);
  m.impl("threshold_backward", threshold_backward);
  m.impl("where.self", where_self);
  m.impl("where.self_out", where_out);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("fill_.Tensor", fill_tensor);
  m.impl("zero_", zero_);
  m.impl("sum.dim_IntList", sum_dim);
  m.impl("sum.IntList_out", sum_out);
  m.impl("sum", sum_all);
  m.impl("mean.dim", mean_dim);
  m.impl("mean.out", mean_out);
  m.impl("mm", mm);
  m.impl("mm.out", mm_out);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_inplace);
}

}  // namespace tpu::aten
