// Leftover ops without a family of their own: logspace, pairwise distances
// (cdist, pdist and their backward), segment reductions and hash_tensor.
// The math is in lowering/misc.*; here are ATen's checks, shapes and dtypes.
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "aten/op_helpers.h"
#include "engine/runtime.h"
#include "ir/ops.h"
#include "lowering/elementwise.h"
#include "lowering/formula.h"
#include "lowering/misc.h"
#include "lowering/reduce.h"
#include "lowering/shape.h"
#include "lowering/types.h"
#include "runtime/device.h"

namespace tpu::aten {
namespace {

bool platform_has_f64() {
  return lowering::unsupported_dtype_reason(runtime::platform_name(), c10::kDouble).empty();
}

// ------------------------------------------------------------ logspace

// As ATen's CPU kernel: the exponents are linspace's (start and end rounded
// to the element type, the step in double), base ** exponent is computed in
// double (a float base for integer results) and rounded to the element type.
at::Tensor& logspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, double base,
                         at::Tensor& out) {
  if (!prepare_steps_out("logspace", steps, out)) return out;
  c10::ScalarType dtype = out.scalar_type();
  c10::DeviceGuard guard(out.device());
  Program p("logspace.out", out.device());
  ir::Graph& g = p.graph();
  lowering::Formula f{g};
  ir::DType compute = platform_has_f64() ? ir::DType::F64 : ir::DType::F32;
  bool integral = c10::isIntegralType(dtype, /*includeBool=*/true);
  double b = integral ? static_cast<double>(static_cast<float>(base)) : base;
  if (steps == 1) {
    p.write(out, ir::broadcast_in_dim(g, p.scalar(std::pow(base, start.toDouble()), compute), {1}, {}));
    p.run();
    return out;
  }
  // The element type's start and end, and their difference in that type.
  double s, e, diff;
  if (integral) {
    s = static_cast<double>(start.to<int64_t>());
    e = static_cast<double>(end.to<int64_t>());
    diff = e - s;
  } else if (dtype == c10::kDouble) {
    s = start.to<double>(), e = end.to<double>(), diff = e - s;
  } else if (dtype == c10::kFloat) {
    s = start.to<float>(), e = end.to<float>();
    diff = static_cast<double>(end.to<float>() - start.to<float>());
  } else if (dtype == c10::kBFloat16) {
    s = start.to<c10::BFloat16>(), e = end.to<c10::BFloat16>();
    diff = static_cast<float>(c10::BFloat16(end.to<c10::BFloat16>() - start.to<c10::BFloat16>()));
  } else {
    s = start.to<c10::Half>(), e = end.to<c10::Half>();
    diff = static_cast<float>(c10::Half(end.to<c10::Half>() - start.to<c10::Half>()));
  }
  double step = diff / static_cast<double>(steps - 1);
  ir::Value exponent = lowering::linspace(g, p.scalar(s, compute), p.scalar(e, compute), p.scalar(step, compute),
                                          steps, compute, compute);
  ir::Value bv = ir::broadcast_in_dim(g, p.scalar(b, compute), {steps}, {});
  p.write(out, f.pow(bv, exponent));
  p.run();
  return out;
}

// ------------------------------------------------------------ cdist, pdist

void check_distance_dtypes(const char* op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(at::isFloatingType(a.scalar_type()), op, " only supports floating-point dtypes, X1 got: ",
              a.scalar_type());
  TORCH_CHECK(at::isFloatingType(b.scalar_type()), op, " only supports floating-point dtypes, X2 got: ",
              b.scalar_type());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected scalar type ", a.scalar_type(), " but found ",
              b.scalar_type());
}

// The batch dims of x1 and x2 broadcast to one; x's rows flattened to [B, R, M].
struct CdistShapes {
  c10::DimVector batch;
  int64_t b, r1, r2, m;
};
CdistShapes cdist_shapes(const at::Tensor& x1, const at::Tensor& x2) {
  CdistShapes s;
  auto batch = at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
  s.batch.assign(batch.begin(), batch.end());
  s.b = c10::multiply_integers(s.batch);
  s.r1 = x1.size(-2), s.r2 = x2.size(-2), s.m = x1.size(-1);
  return s;
}
ir::Value read_batched(Program& p, const at::Tensor& t, const CdistShapes& s, int64_t rows, ir::DType dt) {
  ir::Graph& g = p.graph();
  ir::Shape full(s.batch.begin(), s.batch.end());
  full.push_back(rows);
  full.push_back(s.m);
  ir::Value v = ir::convert(g, ir::broadcast_to(g, p.read(t), full), dt);
  return ir::reshape(g, v, {s.b, rows, s.m});
}
ir::DType compute_dtype(const at::Tensor& t) { return lowering::to_ir(lowering::opmath_type(t.scalar_type())); }

// A cdist result, [batch..., x1's rows, cols], into `out` or a new tensor:
// `build` gives its [b, rows, cols] value in the compute dtype (not called
// when the result is empty).
template <typename Build>
at::Tensor run_cdist(Overload o, const at::Tensor& x1, const CdistShapes& s, int64_t cols, Build build) {
  c10::DimVector shape = s.batch;
  shape.push_back(s.r1);
  shape.push_back(cols);
  c10::DeviceGuard guard(x1.device());
  at::Tensor result = prepare_output(o.name, o.out, shape, x1.scalar_type(), x1.device(), false);
  if (result.numel() == 0) return result;
  Program prog(variant(o).c_str(), x1.device());
  ir::Value r = build(prog, compute_dtype(x1));
  prog.write(result, ir::reshape(prog.graph(), r, to_shape(result.sizes())));
  prog.run();
  return result;
}

at::Tensor cdist_forward(Overload o, const at::Tensor& x1, const at::Tensor& x2, double p,
                         std::optional<int64_t> compute_mode) {
  check_distance_dtypes("cdist", x1, x2);
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  TORCH_CHECK(x1.dim() >= 2, "cdist only supports at least 2D tensors, X1 got: ", x1.dim(), "D");
  TORCH_CHECK(x2.dim() >= 2, "cdist only supports at least 2D tensors, X2 got: ", x2.dim(), "D");
  TORCH_CHECK(x1.size(-1) == x2.size(-1), "X1 and X2 must have the same number of columns. X1: ", x1.size(-1),
              " X2: ", x2.size(-1));
  int64_t mode = compute_mode.value_or(0);
  TORCH_CHECK(mode >= 0 && mode <= 2, "possible modes: 0, 1, 2, but was: ", mode);
  CdistShapes s = cdist_shapes(x1, x2);
  return run_cdist(o, x1, s, s.r2, [&](Program& prog, ir::DType dt) {
    ir::Graph& g = prog.graph();
    if (s.m == 0) return ir::full(g, dt, 0, {s.b, s.r1, s.r2});
    ir::Value a = read_batched(prog, x1, s, s.r1, dt), b = read_batched(prog, x2, s, s.r2, dt);
    // ATen's choice between the matrix-product and the direct Euclidean distance.
    bool mm = p == 2 && (mode == 1 || (mode == 0 && (s.r1 > 25 || s.r2 > 25)));
    return mm ? lowering::cdist_euclidean_mm(g, a, b) : lowering::cdist(g, a, b, p);
  });
}

// Gradient of x1 only (autograd gets x2's by swapping the operands); shaped
// like x1 expanded to the broadcast batch.
at::Tensor cdist_backward(Overload o, const at::Tensor& grad, const at::Tensor& x1, const at::Tensor& x2, double p,
                          const at::Tensor& dist) {
  check_distance_dtypes("cdist", x1, x2);
  CdistShapes s = cdist_shapes(x1, x2);
  return run_cdist(o, x1, s, s.m, [&](Program& prog, ir::DType dt) {
    ir::Graph& g = prog.graph();
    if (s.r2 == 0 || p == 0) return ir::full(g, dt, 0, {s.b, s.r1, s.m});
    ir::Shape pr{s.b, s.r1, s.r2};
    auto read_pr = [&](const at::Tensor& t) {
      ir::Shape full(s.batch.begin(), s.batch.end());
      full.push_back(s.r1);
      full.push_back(s.r2);
      return ir::reshape(g, ir::convert(g, ir::broadcast_to(g, prog.read(t), full), dt), pr);
    };
    return lowering::cdist_backward(g, read_pr(grad), read_batched(prog, x1, s, s.r1, dt),
                                    read_batched(prog, x2, s, s.r2, dt), p, read_pr(dist));
  });
}

void check_pdist(const at::Tensor& self, double p) {
  TORCH_CHECK(self.dim() == 2, "pdist only supports 2D tensors, got: ", self.dim(), "D");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "pdist only supports floating-point dtypes");
  TORCH_CHECK(p >= 0, "pdist only supports non-negative p values");
}

at::Tensor pdist_forward(Overload o, const at::Tensor& self, double p) {
  check_pdist(self, p);
  int64_t n = self.size(0), m = self.size(1);
  int64_t k = n > 1 ? n * (n - 1) / 2 : 0;
  c10::DeviceGuard guard(self.device());
  at::Tensor result = prepare_output(o.name, o.out, {k}, self.scalar_type(), self.device(), false);
  if (k == 0) return result;
  Program prog(variant(o).c_str(), self.device());
  ir::Graph& g = prog.graph();
  ir::DType dt = compute_dtype(self);
  ir::Value r = m == 0 ? ir::full(g, dt, 0, {k}) : lowering::pdist(g, ir::convert(g, prog.read(self), dt), p);
  prog.write(result, r);
  prog.run();
  return result;
}

at::Tensor pdist_backward(Overload o, const at::Tensor& grad, const at::Tensor& self, double p,
                          const at::Tensor& dist) {
  check_pdist(self, p);
  int64_t n = self.size(0), m = self.size(1);
  c10::DeviceGuard guard(self.device());
  at::Tensor result = prepare_output(o.name, o.out, self.sizes(), self.scalar_type(), self.device(), false);
  if (result.numel() == 0) return result;
  Program prog(variant(o).c_str(), self.device());
  ir::Graph& g = prog.graph();
  ir::DType dt = compute_dtype(self);
  ir::Value r;
  if (p == 0 || n <= 1 || m == 0 || grad.numel() == 0) {
    r = ir::full(g, dt, 0, {n, m});
  } else {
    int64_t k = n * (n - 1) / 2;
    auto flat = [&](const at::Tensor& t) { return ir::reshape(g, ir::convert(g, prog.read(t), dt), {k}); };
    r = lowering::pdist_backward(g, flat(grad), ir::convert(g, prog.read(self), dt), p, flat(dist));
  }
  prog.write(result, r);
  prog.run();
  return result;
}

// ------------------------------------------------------------ segment_reduce

lowering::SegmentReduce segment_kind(c10::string_view reduce) {
  if (reduce == "max") return lowering::SegmentReduce::Max;
  if (reduce == "mean") return lowering::SegmentReduce::Mean;
  if (reduce == "min") return lowering::SegmentReduce::Min;
  if (reduce == "sum") return lowering::SegmentReduce::Sum;
  if (reduce == "prod") return lowering::SegmentReduce::Prod;
  TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
}

using OptTensor = std::optional<at::Tensor>;

// The problem in ATen's terms: data viewed as [B, L, I] around `axis`, and
// the segments as offsets [B, S + 1] (from lengths by a running sum).
struct SegmentProblem {
  int64_t axis, b, l, i, s;
  at::Tensor lengths_or_offsets;
  bool from_lengths;
};

SegmentProblem segment_problem(const at::Tensor& data, const OptTensor& lengths, const OptTensor& offsets,
                               int64_t axis) {
  SegmentProblem sp;
  sp.axis = c10::maybe_wrap_dim(axis, data.dim());
  TORCH_CHECK(data.numel() >= 0);
  bool has_lengths = lengths.has_value() && lengths->defined();
  bool has_offsets = offsets.has_value() && offsets->defined();
  TORCH_CHECK(has_lengths || has_offsets, "segment_reduce(): Either lengths or offsets must be defined");
  sp.from_lengths = has_lengths;
  const at::Tensor& seg = has_lengths ? *lengths : *offsets;
  TORCH_CHECK_NOT_IMPLEMENTED(seg.scalar_type() == c10::kLong || seg.scalar_type() == c10::kInt,
                              "\"_segment_reduce_", has_lengths ? "lengths" : "offsets",
                              "\" not implemented for '", c10::toString(seg.scalar_type()), "'");
  TORCH_CHECK(sp.axis == seg.dim() - 1, "segment_reduce(): Expected axis to be the last dimension of ",
              has_lengths ? "lengths" : "offsets", " but got ", sp.axis, ".");
  for (int64_t d = 0; d < sp.axis; ++d)
    TORCH_CHECK(seg.size(d) == data.size(d), "segment_reduce(): Expected ", has_lengths ? "lengths" : "offsets",
                " to have the same leading dims as data");
  sp.lengths_or_offsets = seg;
  sp.b = c10::multiply_integers(data.sizes().slice(0, sp.axis));
  sp.l = data.size(sp.axis);
  sp.i = c10::multiply_integers(data.sizes().slice(sp.axis + 1));
  sp.s = has_lengths ? seg.size(-1) : seg.size(-1) - 1;
  return sp;
}

// Offsets [B, S + 1] (s64) in the program.
ir::Value segment_offsets(Program& prog, const SegmentProblem& sp) {
  ir::Graph& g = prog.graph();
  ir::Value v = ir::convert(g, ir::reshape(g, prog.read(sp.lengths_or_offsets), {sp.b, sp.s + (sp.from_lengths ? 0 : 1)}),
                            ir::DType::S64);
  if (!sp.from_lengths) return v;
  ir::Value ends = sp.s == 0 ? v : lowering::cumulative(g, v, 1, ir::Combiner::Add, ir::DType::S64);
  return ir::concatenate(g, {ir::full(g, ir::DType::S64, 0, {sp.b, 1}), ends}, 1);
}

// ATen's safety checks (one sync): no negative lengths, each row's lengths summing to the data's length.
void check_segments(const SegmentProblem& sp, int device) {
  if (sp.b == 0 || sp.s == 0) return;
  Program prog("segment_reduce_check", device);
  ir::Graph& g = prog.graph();
  lowering::Formula f{g};
  ir::Value off = segment_offsets(prog, sp);
  ir::Value len = f.sub(ir::slice(g, off, {0, 1}, {sp.b, sp.s + 1}), ir::slice(g, off, {0, 0}, {sp.b, sp.s}));
  ir::Value negative = ir::reduce(g, f.lt(len, 0.0), ir::constant_int(g, ir::DType::Pred, 0), {0, 1}, ir::Combiner::Or);
  ir::Value total = f.sub(ir::slice(g, off, {0, sp.s}, {sp.b, sp.s + 1}), ir::slice(g, off, {0, 0}, {sp.b, 1}));
  ir::Value mismatch = ir::reduce(g, f.ne(total, static_cast<double>(sp.l)), ir::constant_int(g, ir::DType::Pred, 0),
                                  {0, 1}, ir::Combiner::Or);
  ir::Value code = f.add(ir::convert(g, negative, ir::DType::S64),
                         f.mul(ir::convert(g, mismatch, ir::DType::S64), ir::constant_int(g, ir::DType::S64, 2)));
  engine::BufferRef buffer = prog.run_for_result(code);
  int64_t flags = 0;
  engine::Runtime::get().download(*buffer, &flags, sizeof(flags));
  TORCH_CHECK(!(flags & 1), sp.from_lengths ? "lengths contains negative value!" : "offsets contains negative value!");
  TORCH_CHECK(!(flags & 2), "segment_reduce(): Expected all rows of ", sp.from_lengths ? "lengths" : "offsets",
              " along axis to sum to data.size(lengths.dim()-1) when !unsafe.");
}

std::optional<ir::Value> initial_value(Program& prog, const std::optional<c10::Scalar>& initial, const at::Tensor& data) {
  if (!initial.has_value()) return std::nullopt;
  return prog.scalar(*initial, lowering::to_ir(data.scalar_type()));
}

at::Tensor segment_reduce(Overload o, const at::Tensor& data, c10::string_view reduce, const OptTensor& lengths,
                          const OptTensor& indices, const OptTensor& offsets, int64_t axis, bool unsafe,
                          const std::optional<c10::Scalar>& initial) {
  TORCH_CHECK(!indices.has_value() || !indices->defined(),
              "segment_reduce(): indices based reduction is not supported yet.");
  lowering::SegmentReduce kind = segment_kind(reduce);
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(data.scalar_type()), "\"segment_reduce\" not implemented for '",
                              c10::toString(data.scalar_type()), "'");
  SegmentProblem sp = segment_problem(data, lengths, offsets, axis);
  c10::DimVector shape(data.sizes().begin(), data.sizes().end());
  shape[sp.axis] = sp.s;
  c10::DeviceGuard guard(data.device());
  at::Tensor result = prepare_output(o.name, o.out, shape, data.scalar_type(), data.device(), false);
  if (result.numel() == 0) return result;
  if (!unsafe) check_segments(sp, data.device().index());
  Program prog(variant(o).c_str(), data.device());
  ir::Graph& g = prog.graph();
  ir::Value x = ir::reshape(g, prog.read(data), {sp.b, sp.l, sp.i});
  ir::Value r = lowering::segment_reduce(g, x, segment_offsets(prog, sp), kind, initial_value(prog, initial, data));
  prog.write(result, ir::reshape(g, r, to_shape(result.sizes())));
  prog.run();
  return result;
}

at::Tensor segment_reduce_backward(Overload o, const at::Tensor& grad, const at::Tensor& output, const at::Tensor& data,
                                   c10::string_view reduce, const OptTensor& lengths, const OptTensor& offsets,
                                   int64_t axis, const std::optional<c10::Scalar>& initial) {
  lowering::SegmentReduce kind = segment_kind(reduce);
  SegmentProblem sp = segment_problem(data, lengths, offsets, axis);
  c10::DeviceGuard guard(data.device());
  at::Tensor result = prepare_output(o.name, o.out, data.sizes(), data.scalar_type(), data.device(), false);
  if (result.numel() == 0) return result;
  Program prog(variant(o).c_str(), data.device());
  ir::Graph& g = prog.graph();
  ir::Value r;
  if (sp.s == 0) {
    r = ir::full(g, lowering::to_ir(data.scalar_type()), 0, {sp.b, sp.l, sp.i});
  } else {
    auto seg = [&](const at::Tensor& t) { return ir::reshape(g, prog.read(t), {sp.b, sp.s, sp.i}); };
    r = lowering::segment_reduce_backward(g, seg(grad), seg(output), ir::reshape(g, prog.read(data), {sp.b, sp.l, sp.i}),
                                          segment_offsets(prog, sp), kind, initial_value(prog, initial, data));
  }
  prog.write(result, ir::reshape(g, r, to_shape(result.sizes())));
  prog.run();
  return result;
}

// ------------------------------------------------------------ hash_tensor

// mode 0 (xor_sum): the XOR of the elements' 64-bit patterns (floats as
// double, integers and bools as int64) over `dim`. The graph has no XOR
// combiner, so the reduced axis is folded in halves (log2 steps of
// elementwise XOR, zero-padded to a power of two).
at::Tensor& hash_tensor_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, int64_t mode,
                            at::Tensor& out) {
  TORCH_CHECK(mode == 0, "Unknown hash_tensor mode: ", mode);
  c10::ScalarType t = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isComplexType(t) && t != c10::kUInt16 && t != c10::kUInt32 && t != c10::kUInt64,
                              "\"xor_sum\" not implemented for '", c10::toString(t), "'");
  if (dim.empty())
    TORCH_CHECK(self.numel() > 0, "hash_tensor: Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument.");
  ir::Dims dims = lowering::reduction_dims(ir::Dims(dim.begin(), dim.end()), self.dim());
  for (int64_t d : dims)
    TORCH_CHECK_INDEX(self.size(d) > 0, "hash_tensor: Expected reduction dim ", d, " to have non-zero size.");
  TORCH_CHECK(!c10::isFloatingType(t) || platform_has_f64(), "hash_tensor of floating tensors needs float64 on tpu");
  ir::Shape in = to_shape(self.sizes());
  ir::Shape shape = lowering::reduced_shape(in, dims, keepdim);
  c10::DeviceGuard guard(self.device());
  at::native::resize_output(out, c10::IntArrayRef(shape));
  TORCH_CHECK(out.scalar_type() == c10::kUInt64, "hash_tensor: expected out to have dtype UInt64, but got ",
              out.scalar_type());
  if (out.numel() == 0) return out;
  Program p("hash_tensor.out", self.device());
  ir::Graph& g = p.graph();
  ir::DType wide = c10::isFloatingType(t) ? ir::DType::F64 : ir::DType::S64;
  ir::Value x = ir::bitcast_convert(g, ir::convert(g, p.read(self), wide), ir::DType::U64, in);
  // Kept dims first, reduced ones last: [kept, reduced].
  ir::Dims perm;
  int64_t kept = 1, reduced = 1;
  for (int64_t d = 0; d < self.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d), kept *= in[d];
  for (int64_t d : dims) perm.push_back(d), reduced *= in[d];
  x = ir::reshape(g, ir::transpose(g, x, perm), {kept, reduced});
  int64_t width = 1;
  while (width < reduced) width *= 2;
  if (width > reduced) x = ir::pad(g, x, ir::constant_int(g, ir::DType::U64, 0), {0, 0}, {0, width - reduced});
  for (; width > 1; width /= 2)
    x = ir::binary(g, ir::Op::Xor, ir::slice(g, x, {0, 0}, {kept, width / 2}),
                   ir::slice(g, x, {0, width / 2}, {kept, width}));
  p.write(out, ir::reshape(g, x, shape));
  p.run();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("logspace.out", logspace_out);
  m.impl("hash_tensor.out", hash_tensor_out);
  impl_variants<cdist_forward, "_cdist_forward">(m, kFunctionalAndOut);
  impl_variants<cdist_backward, "_cdist_backward">(m, kFunctionalAndOut);
  impl_variants<pdist_forward, "_pdist_forward">(m, kFunctionalAndOut);
  impl_variants<pdist_backward, "_pdist_backward">(m, kFunctionalAndOut);
  impl_variants<segment_reduce, "segment_reduce">(m, kFunctionalAndOut);
  impl_variants<segment_reduce_backward, "_segment_reduce_backward">(m, kFunctionalAndOut);
}

}  // namespace tpu::aten
