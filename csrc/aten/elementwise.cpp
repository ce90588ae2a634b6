// Elementwise ops: arithmetic, comparisons, unary math, where and fill.
#include <ATen/core/Tensor.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/types.h"
#include "lowering/elementwise.h"

namespace tpu::aten {
namespace {

using lowering::Binary;
using lowering::Unary;

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
  bool scaled = !scalar_is(alpha, 1);
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
}

}  // namespace tpu::aten
