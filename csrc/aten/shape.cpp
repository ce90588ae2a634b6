// Shape ops: cat, tril/triu, flip, roll, constant_pad_nd, repeat, and the
// range factories arange/linspace (stack is ATen's composite over cat).
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/flip.h>
#include <ATen/ops/repeat.h>
#include <ATen/ops/roll.h>
#include <ATen/ops/tril.h>
#include <ATen/ops/triu.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/shape.h"
#include "lowering/types.h"
#include "runtime/device.h"

namespace tpu::aten {
namespace {

// A meta tensor like `t`: running an op on metas gives ATen's own checks,
// error messages, result shape and dtype without touching data.
at::Tensor meta(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

std::vector<int64_t> int_list(c10::SymIntArrayRef v) {
  auto r = C10_AS_INTARRAYREF_SLOW(v);
  return std::vector<int64_t>(r.begin(), r.end());
}

// Runs a one-input op: `build` maps the input value to the result value.
at::Tensor unary_shape_op(const char* name, const at::Tensor& self, const at::Tensor& shape_of, const at::Tensor* out,
                          bool inplace, const std::function<ir::Value(Program&, ir::Value)>& build) {
  c10::DeviceGuard guard(self.device());
  // A new result takes the layout ATen's meta function gives (CPU's: a narrowing pad of a
  // transposed tensor stays transposed), which views of it and torch.compile rely on.
  at::Tensor output = out == nullptr && shape_of.is_non_overlapping_and_dense() && !shape_of.is_contiguous()
                          ? at::empty_strided(shape_of.sizes(), shape_of.strides(),
                                              self.options().dtype(shape_of.scalar_type()))
                          : prepare_output(name, out, shape_of.sizes(), shape_of.scalar_type(), self.device(), inplace);
  if (output.numel() == 0) return output;
  Program p(name, self.device());
  p.write(output, build(p, p.read(self)));
  p.run();
  return output;
}

// ------------------------------------------------------------ cat

// ATen skips legacy empty tensors (1-D, no elements) in cat.
bool cat_skips(const at::Tensor& t) { return t.dim() == 1 && t.numel() == 0; }

// cat's result sizes and dtype when every input is a tpu tensor of one rank
// (>= 1) on one device, matching except in `dim`; nullopt otherwise.
std::optional<std::pair<std::vector<int64_t>, c10::ScalarType>> plain_cat(const std::vector<at::Tensor>& inputs,
                                                                         int64_t dim) {
  if (inputs.empty() || inputs[0].dim() == 0 || !inputs[0].is_privateuseone() || cat_skips(inputs[0]))
    return std::nullopt;
  const at::Tensor& first = inputs[0];
  if (dim < -first.dim() || dim >= first.dim()) return std::nullopt;
  int64_t d = c10::maybe_wrap_dim(dim, first.dim());
  std::vector<int64_t> sizes = first.sizes().vec();
  c10::ScalarType dtype = first.scalar_type();
  for (size_t k = 1; k < inputs.size(); ++k) {
    const at::Tensor& t = inputs[k];
    if (t.dim() != first.dim() || t.device() != first.device()) return std::nullopt;
    for (int64_t i = 0; i < t.dim(); ++i)
      if (i != d && t.size(i) != sizes[i]) return std::nullopt;
    sizes[d] += t.size(d);
    dtype = c10::promoteTypes(dtype, t.scalar_type());
  }
  return std::make_pair(std::move(sizes), dtype);
}

// cat's result layout, as ATen's: the inputs' common suggested memory format
// (all channels-last: channels-last), else contiguous.
at::MemoryFormat cat_format(const std::vector<at::Tensor>& inputs) {
  std::optional<at::MemoryFormat> format;
  for (const at::Tensor& t : inputs) {
    at::MemoryFormat f = t.suggest_memory_format();
    if (f == at::MemoryFormat::Contiguous || (format && *format != f)) return at::MemoryFormat::Contiguous;
    format = f;
  }
  return format.value_or(at::MemoryFormat::Contiguous);
}

at::Tensor cat_op(const char* name, const at::ITensorListRef& tensors, int64_t dim, at::Tensor* out) {
  std::vector<at::Tensor> inputs(tensors.begin(), tensors.end());
  for (size_t i = 0; i < inputs.size(); ++i)  // CPU's check; ATen's meta kernel raises IndexError instead
    TORCH_CHECK(inputs[i].dim() > 0, "zero-dimensional tensor (at position ", i, ") cannot be concatenated");
  // ATen's meta kernel for cat is Python (~300 us a call): run it only for
  // out=, errors and the legacy empty inputs, where its rules matter.
  auto plain = out == nullptr ? plain_cat(inputs, dim) : std::nullopt;
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
  if (plain) {
    std::tie(sizes, dtype) = std::move(*plain);
  } else {
    std::vector<at::Tensor> metas;
    for (const at::Tensor& t : inputs) metas.push_back(meta(t));
    at::Tensor m = at::cat(metas, dim);  // ATen's checks, result shape and promoted dtype
    if (out != nullptr) {
      at::Tensor mo = meta(*out);
      at::cat_out(mo, metas, dim);  // out= dtype/shape rules
    }
    sizes = m.sizes().vec();
    dtype = m.scalar_type();
  }
  const at::Tensor* first = nullptr;
  for (const at::Tensor& t : inputs)
    if (t.is_privateuseone()) { first = &t; break; }
  c10::Device device = first ? first->device() : out->device();
  c10::DeviceGuard guard(device);
  at::Tensor output = prepare_output(name, out, sizes, dtype, device, false, cat_format(inputs));
  if (output.numel() == 0) return output;
  Program p(name, device.index());
  c10::SmallVector<const at::Tensor*, 8> operands;
  for (const at::Tensor& t : inputs) operands.push_back(&t);
  operands.push_back(&output);
  const int64_t captures[] = {dim};
  build_or_apply(p, name, operands, captures, [&](Program& q) {
    std::vector<ir::Value> values;
    int64_t d = 0;
    for (const at::Tensor& t : inputs) {
      if (cat_skips(t)) continue;
      d = c10::maybe_wrap_dim(dim, t.dim());
      values.push_back(q.read_as(t, dtype));
    }
    q.write(output, values.size() == 1 ? values[0] : ir::concatenate(q.graph(), values, d));
  });
  p.run();
  return output;
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) { return cat_op("cat", tensors, dim, nullptr); }
at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  cat_op("cat.out", tensors, dim, &out);
  return out;
}

// ------------------------------------------------------------ tril / triu

at::Tensor tri_op(const char* name, bool lower, const at::Tensor& self, int64_t diagonal, const at::Tensor* out,
                  bool inplace) {
  at::Tensor m = lower ? at::tril(meta(self), diagonal) : at::triu(meta(self), diagonal);
  return unary_shape_op(name, self, m, out, inplace, [&](Program& p, ir::Value x) {
    return lowering::triangular(p.graph(), x, diagonal, lower);
  });
}

#define TRI_KERNELS(NAME, LOWER)                                                                       \
  at::Tensor NAME(const at::Tensor& self, c10::SymInt diagonal) {                                      \
    return tri_op(#NAME, LOWER, self, diagonal.expect_int(), nullptr, false);                          \
  }                                                                                                    \
  at::Tensor& NAME##_inplace(at::Tensor& self, c10::SymInt diagonal) {                                 \
    tri_op(#NAME "_", LOWER, self, diagonal.expect_int(), &self, true);                                \
    return self;                                                                                       \
  }                                                                                                    \
  at::Tensor& NAME##_out(const at::Tensor& self, c10::SymInt diagonal, at::Tensor& out) {              \
    tri_op(#NAME ".out", LOWER, self, diagonal.expect_int(), &out, false);                             \
    return out;                                                                                        \
  }
TRI_KERNELS(tril, true)
TRI_KERNELS(triu, false)
#undef TRI_KERNELS

// ------------------------------------------------------------ flip / roll

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  at::dim_list_to_bitset(dims, self.dim());  // CPU's message for duplicates
  at::Tensor m = at::flip(meta(self), dims);
  ir::Dims wrapped;
  for (int64_t d : dims) wrapped.push_back(c10::maybe_wrap_dim(d, self.dim()));
  return unary_shape_op("flip", self, m, nullptr, false, [&](Program& p, ir::Value x) {
    if (self.dim() == 0) return x;
    return ir::reverse(p.graph(), x, wrapped);
  });
}

at::Tensor roll_op(const char* name, const at::Tensor& self, c10::SymIntArrayRef shifts_sym, at::IntArrayRef dims,
                   at::Tensor* out) {
  std::vector<int64_t> shifts = int_list(shifts_sym);
  at::Tensor m = at::roll(meta(self), shifts, dims);  // ATen's argument checks
  std::vector<int64_t> wrapped_dims, wrapped_shifts;
  if (dims.empty()) {
    int64_t n = self.numel();
    wrapped_shifts.push_back(n == 0 ? 0 : ((shifts[0] % n) + n) % n);
  } else {
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t d = c10::maybe_wrap_dim(dims[i], self.dim());
      int64_t n = self.size(d);
      wrapped_dims.push_back(d);
      wrapped_shifts.push_back(n == 0 ? 0 : ((shifts[i] % n) + n) % n);
    }
  }
  return unary_shape_op(name, self, m, out, false, [&](Program& p, ir::Value x) {
    return lowering::roll(p.graph(), x, wrapped_shifts, wrapped_dims);
  });
}

at::Tensor roll(const at::Tensor& self, c10::SymIntArrayRef shifts, at::IntArrayRef dims) {
  return roll_op("roll", self, shifts, dims, nullptr);
}

// ------------------------------------------------------------ padding / repeat

at::Tensor constant_pad_nd(const at::Tensor& self, c10::SymIntArrayRef pad_sym, const c10::Scalar& value) {
  std::vector<int64_t> pad = int_list(pad_sym);
  at::Tensor m = at::constant_pad_nd(meta(self), pad, value);  // ATen's checks and result shape
  ir::Dims low(self.dim(), 0), high(self.dim(), 0);
  // pad lists (left, right) pairs starting from the last dim.
  for (size_t i = 0; i + 1 < pad.size(); i += 2) {
    int64_t d = self.dim() - 1 - static_cast<int64_t>(i / 2);
    low[d] = pad[i];
    high[d] = pad[i + 1];
  }
  return unary_shape_op("constant_pad_nd", self, m, nullptr, false, [&](Program& p, ir::Value x) {
    ir::Value v = p.scalar(value, lowering::to_ir(self.scalar_type()));
    if (self.numel() == 0) {  // nothing to pad: the result is all padding
      return ir::broadcast_in_dim(p.graph(), v, to_shape(m.sizes()), {});
    }
    return lowering::pad_constant(p.graph(), x, low, high, v);
  });
}

at::Tensor repeat(const at::Tensor& self, c10::SymIntArrayRef repeats_sym) {
  std::vector<int64_t> repeats = int_list(repeats_sym);
  at::Tensor m = meta(self).repeat(repeats);  // ATen's checks and result shape
  ir::Shape padded(repeats.size() - self.dim(), 1);
  for (int64_t s : self.sizes()) padded.push_back(s);
  return unary_shape_op("repeat", self, m, nullptr, false, [&](Program& p, ir::Value x) {
    return lowering::repeat(p.graph(), ir::reshape(p.graph(), x, padded), repeats);
  });
}

// ------------------------------------------------------------ range factories

bool platform_has_f64() { return lowering::unsupported_dtype_reason(runtime::platform_name(), c10::kDouble).empty(); }

// The element count ATen computes for arange (in the CPU kernel's types).
int64_t arange_size(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step, c10::ScalarType dtype) {
  double size_d;
  if (c10::isIntegralType(dtype, /*includeBool=*/false)) {
    int64_t xstart = start.to<int64_t>(), xend = end.to<int64_t>(), xstep = step.to<int64_t>();
    TORCH_CHECK(xstep > 0 || xstep < 0, "step must be nonzero");
    TORCH_CHECK((xstep > 0 && xend >= xstart) || (xstep < 0 && xend <= xstart),
                "upper bound and larger bound inconsistent with step sign");
    if (dtype == c10::kLong) {
      int64_t sgn = (xstep > 0) - (xstep < 0);
      size_d = std::ceil(static_cast<double>((xend - xstart + xstep - sgn) / xstep));
    } else {
      size_d = std::ceil((end.to<double>() - start.to<double>()) / step.to<double>());
    }
  } else {
    // Checked in the kernel's accumulate type: float for half types, else double.
    bool half = dtype == c10::kHalf || dtype == c10::kBFloat16;
    double xstart = half ? start.to<float>() : start.to<double>();
    double xend = half ? end.to<float>() : end.to<double>();
    double xstep = half ? step.to<float>() : step.to<double>();
    TORCH_CHECK(xstep > 0 || xstep < 0, "step must be nonzero");
    TORCH_CHECK(std::isfinite(xstart) && std::isfinite(xend), "unsupported range: ", xstart, " -> ", xend);
    TORCH_CHECK((xstep > 0 && xend >= xstart) || (xstep < 0 && xend <= xstart),
                "upper bound and larger bound inconsistent with step sign");
    size_d = std::ceil((end.to<double>() - start.to<double>()) / step.to<double>());
  }
  TORCH_CHECK(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max()),
              "invalid size, possible overflow?");
  return static_cast<int64_t>(size_d);
}

at::Tensor& arange_out(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step, at::Tensor& out) {
  c10::ScalarType dtype = out.scalar_type();
  TORCH_CHECK(dtype != c10::kBool && !c10::isComplexType(dtype), "\"arange_cpu\" not implemented for '",
              c10::toString(dtype), "'");
  int64_t size = arange_size(start, end, step, dtype);
  if (out.numel() != size) {
    if (out.numel() > 0)
      TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", out.numel(),
                 " which does not match the computed number of elements ", size,
                 ". Note that this may occur as a result of rounding error. "
                 "The out tensor will be resized to a tensor of shape (", size, ",).");
    out.resize_({size});
  }
  if (size == 0) return out;
  c10::DeviceGuard guard(out.device());
  // The CPU kernel computes start + step * i in its accumulate type: int64
  // for integers, double for float/double, float for half types.
  ir::DType compute = c10::isIntegralType(dtype, false)                          ? ir::DType::S64
                      : (dtype == c10::kHalf || dtype == c10::kBFloat16)         ? ir::DType::F32
                      : platform_has_f64()                                        ? ir::DType::F64
                                                                                  : ir::DType::F32;
  Program p("arange.start_out", out.device());
  ir::Value v = lowering::arange(p.graph(), p.scalar(start, compute), p.scalar(step, compute), size, compute,
                                 lowering::to_ir(dtype));
  p.write(out, v);
  p.run();
  return out;
}

at::Tensor& linspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, at::Tensor& out) {
  if (!prepare_steps_out("linspace", steps, out)) return out;
  c10::ScalarType dtype = out.scalar_type();
  c10::DeviceGuard guard(out.device());
  Program p("linspace.out", out.device());
  ir::Graph& g = p.graph();
  ir::DType result = lowering::to_ir(dtype);
  if (steps == 1) {
    p.write(out, ir::broadcast_in_dim(g, p.scalar(start, result), {1}, {}));
    p.run();
    return out;
  }
  // As the CPU kernel: the step in double for integers, in the element type
  // (through float for half types) otherwise, computed on the host.
  ir::DType compute;
  c10::Scalar step;
  if (c10::isIntegralType(dtype, /*includeBool=*/true)) {
    compute = platform_has_f64() ? ir::DType::F64 : ir::DType::F32;
    double s = start.to<int64_t>(), e = end.to<int64_t>();
    step = (e - s) / static_cast<double>(steps - 1);
    p.write(out, lowering::linspace(g, p.scalar(c10::Scalar(s), compute), p.scalar(c10::Scalar(e), compute),
                                    p.scalar(step, compute), steps, compute, result));
    p.run();
    return out;
  }
  if (dtype == c10::kDouble) {
    compute = ir::DType::F64;
    step = (end.to<double>() - start.to<double>()) / static_cast<double>(steps - 1);
  } else if (dtype == c10::kFloat) {
    compute = ir::DType::F32;
    step = (end.to<float>() - start.to<float>()) / static_cast<float>(steps - 1);
  } else {  // the CPU kernel rounds the step to the half type
    compute = ir::DType::F32;
    if (dtype == c10::kBFloat16)
      step = static_cast<float>((end.to<c10::BFloat16>() - start.to<c10::BFloat16>()) / (steps - 1));
    else
      step = static_cast<float>((end.to<c10::Half>() - start.to<c10::Half>()) / (steps - 1));
  }
  p.write(out, lowering::linspace(g, p.scalar(start, compute), p.scalar(end, compute), p.scalar(step, compute), steps,
                                  compute, result));
  p.run();
  return out;
}


// eye: ones where row == column, in out's dtype.
at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  out.resize_({n, m});
  if (out.numel() == 0) return out;
  c10::DeviceGuard guard(out.device());
  Program p("eye.m_out", out.device());
  ir::Graph& g = p.graph();
  ir::Value diagonal = ir::compare(g, ir::iota(g, ir::DType::S64, {n, m}, 0), ir::iota(g, ir::DType::S64, {n, m}, 1),
                                   ir::Compare::EQ);
  p.write(out, ir::convert(g, diagonal, lowering::to_ir(out.scalar_type())));
  p.run();
  return out;
}
at::Tensor& eye_out(int64_t n, at::Tensor& out) { return eye_m_out(n, n, out); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cat", cat);
  m.impl("cat.out", cat_out);
  m.impl("tril", tril);
  m.impl("tril_", tril_inplace);
  m.impl("tril.out", tril_out);
  m.impl("triu", triu);
  m.impl("triu_", triu_inplace);
  m.impl("triu.out", triu_out);
  m.impl("flip", flip);
  m.impl("roll", roll);
  m.impl("constant_pad_nd", constant_pad_nd);
  m.impl("repeat", repeat);
  m.impl("arange.start_out", arange_out);
  m.impl("linspace.out", linspace_out);
  m.impl("eye.out", eye_out);
  m.impl("eye.m_out", eye_m_out);
}

}  // namespace tpu::aten
