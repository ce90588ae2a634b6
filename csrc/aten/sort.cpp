// Sorting and order statistics: sort, topk, kthvalue, median/nanmedian, mode,
// unique (_unique2, _unique, unique_consecutive), cummax/cummin helpers,
// _logcumsumexp, isin, searchsorted/bucketize and histc. The lowerings are in
// lowering/sort.*.
//
// unique's result size depends on the data: one program counts the distinct
// values, the host reads the count, a second one fills results of that size
// (the sync CUDA makes too).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <functional>
#include <limits>

#include "aten/op_helpers.h"
#include "engine/runtime.h"
#include "ir/ops.h"
#include "lowering/elementwise.h"
#include "lowering/index.h"
#include "lowering/reduce.h"
#include "lowering/sort.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using Values = std::vector<ir::Value>;
using BuildMany = std::function<Values(ir::Graph&, const Values&)>;

// One program: `build` maps the values of `inputs` to one value per output
// (shaped like the output), written through the outputs' views.
void run_program(const char* name, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                 const BuildMany& build) {
  Program p(name, inputs.at(0).device());
  Values in;
  for (const at::Tensor& t : inputs) in.push_back(p.read(t));
  Values out = build(p.graph(), in);
  for (size_t i = 0; i < outputs.size(); ++i)
    p.write(outputs[i], ir::reshape(p.graph(), out[i], to_shape(outputs[i].sizes())));
  p.run();
}

int64_t download_s64(Program& p, ir::Value v) {
  engine::BufferRef buffer = p.run_for_result(v);
  int64_t n = 0;
  engine::Runtime::get().download(*buffer, &n, sizeof(n));
  return n;
}

c10::DimVector reduced_sizes(const at::Tensor& self, int64_t dim, bool keepdim) {
  c10::DimVector s(self.sizes().begin(), self.sizes().end());
  if (self.dim() == 0) return s;
  if (keepdim)
    s[dim] = 1;
  else
    s.erase(s.begin() + dim);
  return s;
}

void check_sortable(const char* name, const at::Tensor& self) {
  TORCH_CHECK(!self.is_complex(), name, "(): does not support complex input");
}

// ------------------------------------------------------------ sort / topk / kthvalue

// Every sort is stable here (a stable sort is a valid unstable one).
std::tuple<at::Tensor, at::Tensor> sort(Overload o, const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                        bool descending) {
  check_sortable(o.name, self);
  int64_t d = lowering::wrap_dim(dim, self.dim());
  c10::DeviceGuard guard(self.device());
  std::string name = variant(o);
  at::Tensor v = prepare_output(name.c_str(), o.out, self.sizes(), self.scalar_type(), self.device(), false);
  at::Tensor i = prepare_output(name.c_str(), o.out2, self.sizes(), c10::kLong, self.device(), false);
  if (self.numel() == 0) return {v, i};
  run_program(name.c_str(), {self}, {v, i}, [&](ir::Graph& g, const Values& x) -> Values {
    auto r = lowering::sort(g, x[0], d, descending);
    return {r.values, r.indices};
  });
  return {v, i};
}

std::tuple<at::Tensor, at::Tensor> topk(Overload o, const at::Tensor& self, c10::SymInt symbolic_k, int64_t dim,
                                        bool largest, bool sorted) {
  int64_t k = symbolic_k.expect_int();
  check_sortable("topk", self);
  int64_t d = lowering::wrap_dim(dim, self.dim());
  int64_t size = self.dim() == 0 ? 1 : self.size(d);
  TORCH_CHECK(k >= 0 && k <= size, "selected index k out of range");
  c10::DimVector shape(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) shape[d] = k;
  c10::DeviceGuard guard(self.device());
  at::Tensor v = prepare_output("topk", o.out, shape, self.scalar_type(), self.device(), false);
  at::Tensor i = prepare_output("topk", o.out2, shape, c10::kLong, self.device(), false);
  if (v.numel() == 0) return {v, i};
  run_program("topk", {self}, {v, i}, [&](ir::Graph& g, const Values& x) -> Values {
    auto r = lowering::topk(g, x[0], k, d, largest);
    return {r.values, r.indices};
  });
  return {v, i};
}

// Registered as out= only (the functional form is ATen's composite over it).
std::tuple<at::Tensor, at::Tensor> kthvalue(Overload o, const at::Tensor& self, int64_t k, int64_t dim,
                                            bool keepdim) {
  check_sortable("kthvalue", self);
  int64_t d = lowering::wrap_dim(dim, self.dim());
  int64_t size = self.dim() == 0 ? 1 : self.size(d);
  TORCH_CHECK(k >= 1 && k <= size, "kthvalue(): selected number k out of range for dimension ", dim);
  c10::DeviceGuard guard(self.device());
  c10::DimVector shape = reduced_sizes(self, d, keepdim);
  at::Tensor v = prepare_output("kthvalue", o.out, shape, self.scalar_type(), self.device(), false);
  at::Tensor i = prepare_output("kthvalue", o.out2, shape, c10::kLong, self.device(), false);
  if (v.numel() == 0) return {v, i};
  run_program("kthvalue", {self}, {v, i}, [&](ir::Graph& g, const Values& x) -> Values {
    auto r = lowering::kthvalue(g, x[0], k, d);
    return {r.values, r.indices};
  });
  return {v, i};
}

// ------------------------------------------------------------ median / nanmedian / mode

// median / nanmedian over a dim (out= only: the functional form is ATen's composite).
template <bool kIgnoreNan>
std::tuple<at::Tensor, at::Tensor> median_dim(Overload o, const at::Tensor& self, int64_t dim, bool keepdim) {
  const char* name = o.name;
  check_sortable(name, self);
  int64_t d = lowering::wrap_dim(dim, self.dim());
  if (self.dim() > 0)
    TORCH_CHECK_INDEX(self.size(d) > 0, name, "(): Expected reduction dim ", d, " to have non-zero size.");
  c10::DeviceGuard guard(self.device());
  c10::DimVector shape = reduced_sizes(self, d, keepdim);
  at::Tensor v = prepare_output(name, o.out, shape, self.scalar_type(), self.device(), false);
  at::Tensor i = prepare_output(name, o.out2, shape, c10::kLong, self.device(), false);
  if (v.numel() == 0) return {v, i};
  run_program(name, {self}, {v, i}, [&](ir::Graph& g, const Values& x) -> Values {
    auto r = lowering::median(g, x[0], d, kIgnoreNan);
    return {r.values, r.indices};
  });
  return {v, i};
}
// The median of all elements (0-dim); NaN for an empty tensor, as on CPU.
at::Tensor median_all_op(const char* name, bool ignore_nan, const at::Tensor& self) {
  check_sortable(name, self);
  c10::DeviceGuard guard(self.device());
  at::Tensor v = at::empty({}, self.options());
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  if (self.numel() == 0) {
    p.write(v, ir::full(g, lowering::to_ir(self.scalar_type()), std::numeric_limits<double>::quiet_NaN(), {}));
  } else {
    ir::Value flat = ir::reshape(g, p.read(self), {self.numel()});
    p.write(v, lowering::median(g, flat, 0, ignore_nan).values);
  }
  p.run();
  return v;
}
at::Tensor median_all(const at::Tensor& self) { return median_all_op("median", false, self); }
at::Tensor nanmedian_all(const at::Tensor& self) { return median_all_op("nanmedian", true, self); }

std::tuple<at::Tensor, at::Tensor> mode(const at::Tensor& self, int64_t dim, bool keepdim) {
  check_sortable("mode", self);
  int64_t d = lowering::wrap_dim(dim, self.dim());
  if (self.dim() > 0)
    TORCH_CHECK_INDEX(self.size(d) > 0, "mode(): Expected reduction dim ", d, " to have non-zero size.");
  c10::DeviceGuard guard(self.device());
  c10::DimVector shape = reduced_sizes(self, d, keepdim);
  at::Tensor v = at::empty(shape, self.options());
  at::Tensor i = at::empty(shape, self.options().dtype(c10::kLong));
  if (v.numel() == 0) return {v, i};
  run_program("mode", {self}, {v, i}, [&](ir::Graph& g, const Values& x) -> Values {
    auto r = lowering::mode(g, x[0], d);
    return {r.values, r.indices};
  });
  return {v, i};
}

// ------------------------------------------------------------ unique

struct UniqueResult {
  at::Tensor values, inverse, counts;
};

// unique of the flattened self (sorted or consecutive runs).
UniqueResult unique_flat(const char* name, const at::Tensor& self, bool sort, bool return_inverse,
                         bool return_counts) {
  c10::DeviceGuard guard(self.device());
  auto opts = self.options();
  int64_t n = self.numel();
  int64_t count = 0;
  if (n > 0) {
    Program p(name, self.device());
    ir::Graph& g = p.graph();
    lowering::Runs r = lowering::runs(g, ir::reshape(g, p.read(self), {n}), sort);
    count = download_s64(p, lowering::run_count(g, r));
  }
  UniqueResult u;
  u.values = at::empty({count}, opts);
  u.inverse = at::empty(return_inverse ? self.sizes() : c10::IntArrayRef{0}, opts.dtype(c10::kLong));
  u.counts = at::empty({return_counts ? count : 0}, opts.dtype(c10::kLong));
  if (n == 0) return u;
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  lowering::Runs r = lowering::runs(g, ir::reshape(g, p.read(self), {n}), sort);
  lowering::RunResults rr = lowering::run_results(g, r, count);
  p.write(u.values, rr.values);
  if (return_inverse) p.write(u.inverse, ir::reshape(g, rr.inverse, to_shape(self.sizes())));
  if (return_counts) p.write(u.counts, rr.counts);
  p.run();
  return u;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool sorted, bool return_inverse,
                                                       bool return_counts) {
  // Unsorted unique may return any order; sorted order is one of them.
  UniqueResult u = unique_flat("_unique2", self, true, return_inverse, return_counts);
  return {u.values, u.inverse, u.counts};
}
std::tuple<at::Tensor, at::Tensor> unique1(const at::Tensor& self, bool sorted, bool return_inverse) {
  UniqueResult u = unique_flat("_unique", self, true, return_inverse, false);
  return {u.values, u.inverse};
}

// unique_consecutive along a dim: whole slices compared.
UniqueResult unique_consecutive_dim(const at::Tensor& self, int64_t dim, bool return_inverse, bool return_counts) {
  int64_t d = lowering::wrap_dim(dim, self.dim());
  c10::DeviceGuard guard(self.device());
  auto opts = self.options();
  int64_t n = self.size(d);
  TORCH_CHECK(self.numel() > 0 || n == 0, "Number of zero sized dimensions is more than one, so unique cannot be "
              "applied ");
  ir::Dims perm{d};
  for (int64_t j = 0; j < self.dim(); ++j)
    if (j != d) perm.push_back(j);
  int64_t width = n == 0 ? 0 : self.numel() / n;
  auto first_of = [&](ir::Graph& g, ir::Value x) {
    ir::Value rows = ir::reshape(g, ir::transpose(g, x, perm), {n, width});
    ir::Value prev = ir::pad(g, ir::slice(g, rows, {0, 0}, {n - 1, width}), ir::constant(g, g.type(x).dtype, 0),
                             {1, 0}, {0, 0});
    ir::Value diff = lowering::any(g, ir::compare(g, rows, prev, ir::Compare::NE), {1}, false);
    ir::Value i = ir::iota(g, ir::DType::S64, {n}, 0);
    ir::Value at0 = ir::compare(g, i, ir::full(g, ir::DType::S64, 0, {n}), ir::Compare::EQ);
    return std::make_pair(rows, ir::binary(g, ir::Op::Or, diff, at0));
  };
  int64_t count = 0;
  if (n > 0) {
    Program p("unique_consecutive", self.device());
    ir::Graph& g = p.graph();
    auto [rows, first] = first_of(g, p.read(self));
    count = download_s64(p, ir::reduce(g, ir::convert(g, first, ir::DType::S64), ir::constant_int(g, ir::DType::S64, 0),
                                       {0}, ir::Combiner::Add));
  }
  c10::DimVector shape(self.sizes().begin(), self.sizes().end());
  shape[d] = count;
  UniqueResult u;
  u.values = at::empty(shape, opts);
  u.inverse = at::empty({return_inverse ? n : 0}, opts.dtype(c10::kLong));
  u.counts = at::empty({return_counts ? count : 0}, opts.dtype(c10::kLong));
  if (n == 0 || (u.values.numel() == 0 && !return_inverse && !return_counts)) return u;
  Program p("unique_consecutive", self.device());
  ir::Graph& g = p.graph();
  auto [rows, first] = first_of(g, p.read(self));
  ir::Value id = ir::binary(g, ir::Op::Subtract, lowering::prefix_sum(g, ir::convert(g, first, ir::DType::S64)),
                            ir::full(g, ir::DType::S64, 1, {n}));
  ir::Value firsts = ir::select(g, first, id, ir::full(g, ir::DType::S64, -1, {n}));
  ir::Value where = ir::scatter_rows(g, ir::full(g, ir::DType::S64, 0, {count}), firsts,
                                     ir::iota(g, ir::DType::S64, {n}, 0), ir::Combiner::Replace);
  if (u.values.numel() > 0) {
    ir::Value picked = ir::gather_rows(g, rows, where);
    ir::Shape moved{count};
    for (size_t j = 1; j < perm.size(); ++j) moved.push_back(self.size(perm[j]));
    ir::Dims inv(perm.size());
    for (size_t j = 0; j < perm.size(); ++j) inv[perm[j]] = static_cast<int64_t>(j);
    p.write(u.values, ir::transpose(g, ir::reshape(g, picked, moved), inv));
  }
  if (return_inverse) p.write(u.inverse, id);
  if (return_counts)
    p.write(u.counts, ir::scatter_rows(g, ir::full(g, ir::DType::S64, 0, {count}), id,
                                       ir::full(g, ir::DType::S64, 1, {n}), ir::Combiner::Add));
  p.run();
  return u;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(const at::Tensor& self, bool return_inverse,
                                                                  bool return_counts, std::optional<int64_t> dim) {
  UniqueResult u = dim.has_value() && self.dim() > 0
                       ? unique_consecutive_dim(self, *dim, return_inverse, return_counts)
                       : unique_flat("unique_consecutive", self, false, return_inverse, return_counts);
  return {u.values, u.inverse, u.counts};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim_consecutive(const at::Tensor& self, int64_t dim,
                                                                      bool return_inverse, bool return_counts) {
  UniqueResult u = self.dim() > 0 ? unique_consecutive_dim(self, dim, return_inverse, return_counts)
                                  : unique_flat("unique_dim_consecutive", self, false, return_inverse, return_counts);
  return {u.values, u.inverse, u.counts};
}

// ------------------------------------------------------------ cummax / cummin / logcumsumexp

void cum_extreme_op(const char* name, bool is_max, const at::Tensor& self, at::Tensor& values, at::Tensor& indices,
                    int64_t dim) {
  int64_t d = lowering::wrap_dim(dim, self.dim());
  c10::DeviceGuard guard(self.device());
  prepare_output(name, &values, self.sizes(), self.scalar_type(), self.device(), false);
  prepare_output(name, &indices, self.sizes(), c10::kLong, self.device(), false);
  if (self.numel() == 0) return;
  run_program(name, {self}, {values, indices}, [&](ir::Graph& g, const Values& x) -> Values {
    auto r = lowering::cum_extreme(g, x[0], d, is_max);
    return {r.values, r.indices};
  });
}
void cummax_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  cum_extreme_op("cummax", true, self, values, indices, dim);
}
void cummin_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  cum_extreme_op("cummin", false, self, values, indices, dim);
}

at::Tensor logcumsumexp(Overload o, const at::Tensor& self, int64_t dim) {
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "logcumsumexp(): expected a floating point input, got ",
              self.scalar_type());
  int64_t d = lowering::wrap_dim(dim, self.dim());
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(o.name, o.out, self.sizes(), self.scalar_type(), self.device(), false);
  if (self.numel() == 0) return output;
  run_program(o.name, {self}, {output}, [&](ir::Graph& g, const Values& x) -> Values {
    return {lowering::logcumsumexp(g, x[0], d)};
  });
  return output;
}

// ------------------------------------------------------------ isin

at::Tensor isin_op(const at::Tensor& elements, const at::Tensor& test, bool invert, at::Tensor* out) {
  c10::ScalarType common = at::result_type(elements, test);
  const at::Tensor& any_device = elements.is_privateuseone() ? elements : test;
  c10::DeviceGuard guard(any_device.device());
  at::Tensor output = prepare_output("isin", out, elements.sizes(), c10::kBool, any_device.device(), false);
  if (output.numel() == 0) return output;
  Program p("isin", any_device.device());
  ir::Graph& g = p.graph();
  ir::Value r = lowering::isin(g, p.read_as(elements, common), p.read_as(test, common));
  if (invert) r = ir::unary(g, ir::Op::Not, r);
  p.write(output, r);
  p.run();
  return output;
}
// isin with tensor or scalar elements and test values (a scalar element: a 0-dim result).
at::Tensor isin_tt(Overload o, const at::Tensor& e, const at::Tensor& t, bool assume_unique, bool invert) {
  return isin_op(e, t, invert, o.out);
}
at::Tensor isin_ts(Overload o, const at::Tensor& e, const c10::Scalar& t, bool assume_unique, bool invert) {
  return isin_op(e, scalar_operand(t), invert, o.out);
}
at::Tensor isin_st(Overload o, const c10::Scalar& e, const at::Tensor& t, bool assume_unique, bool invert) {
  return isin_op(scalar_operand(e), t, invert, o.out);
}

// ------------------------------------------------------------ searchsorted / bucketize

at::Tensor search_op(Overload o, const at::Tensor& boundaries, const at::Tensor& input, bool out_int32, bool right,
                     const std::optional<at::Tensor>& sorter) {
  const char* name = o.name;
  at::Tensor* out = o.out;
  TORCH_CHECK(!boundaries.is_complex() && !input.is_complex(), name, "(): complex tensors are not supported");
  TORCH_CHECK(boundaries.dim() > 0, "torch.searchsorted(): boundaries tensor should have positive dimension, but "
              "got 0 dimension");
  if (boundaries.dim() > 1) {
    bool match = input.dim() == boundaries.dim();
    for (int64_t j = 0; match && j + 1 < boundaries.dim(); ++j) match = input.size(j) == boundaries.size(j);
    TORCH_CHECK(match, "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions "
                "of boundaries tensor and input value tensor must match, but we got boundaries tensor ",
                boundaries.sizes(), " and input value tensor ", input.sizes());
  }
  bool use_sorter = sorter.has_value() && sorter->defined();
  if (use_sorter)
    TORCH_CHECK(sorter->sizes() == boundaries.sizes(), "torch.searchsorted(): boundary and sorter must have the same "
                "size, but got boundary tensor ", boundaries.sizes(), "and got sorter tensor ", sorter->sizes());
  c10::ScalarType common = at::result_type(boundaries, input);
  c10::DeviceGuard guard(boundaries.device());
  at::Tensor output =
      prepare_output(name, out, input.sizes(), out_int32 ? c10::kInt : c10::kLong, boundaries.device(), false);
  if (output.numel() == 0) return output;
  Program p(name, boundaries.device());
  ir::Graph& g = p.graph();
  ir::Value b = p.read_as(boundaries, common);
  if (use_sorter) b = lowering::gather_dim(g, b, boundaries.dim() - 1, p.read(*sorter));
  p.write(output, lowering::search_sorted(g, b, p.read_as(input, common), right));
  p.run();
  return output;
}

bool side_is_right(bool right, const std::optional<c10::string_view>& side) {
  if (!side.has_value()) return right;
  TORCH_CHECK(*side == "left" || *side == "right", "torch.searchsorted(): side can only be 'left' or 'right' but "
              "got ", *side);
  TORCH_CHECK(!right || *side == "right", "torch.searchsorted(): side and right can't be set to opposites, got side "
              "of ", *side, " while right was True");
  return *side == "right";
}

// searchsorted / bucketize of tensor or scalar values.
at::Tensor searchsorted_t(Overload o, const at::Tensor& seq, const at::Tensor& self, bool out_int32, bool right,
                          std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  return search_op(o, seq, self, out_int32, side_is_right(right, side), sorter);
}
at::Tensor searchsorted_s(Overload o, const at::Tensor& seq, const c10::Scalar& self, bool out_int32, bool right,
                          std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  TORCH_CHECK(seq.dim() == 1, "torch.searchsorted(): input value can be a scalar only when boundaries tensor "
              "dimension is 1, but we got boundaries tensor dim(", seq.dim(), ") and input value's dim(0) numel(1)");
  return search_op(o, seq, scalar_operand(self), out_int32, side_is_right(right, side), sorter);
}
void check_bucketize(const at::Tensor& boundaries) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
}
at::Tensor bucketize_t(Overload o, const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  check_bucketize(boundaries);
  return search_op(o, boundaries, self, out_int32, right, std::nullopt);
}
at::Tensor bucketize_s(Overload o, const c10::Scalar& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  check_bucketize(boundaries);
  return search_op(o, boundaries, scalar_operand(self), out_int32, right, std::nullopt);
}

// ------------------------------------------------------------ histc

// ATen's histc: `bins` equal-width bins over [min, max] (the data's range
// when min == max, widened by 1 each way when still equal); elements
// outside the range and NaNs are ignored, max itself lands in the last bin.
// Integer inputs count in their own dtype with integer arithmetic, as CUDA's
// histc does (CPU's takes floating inputs only); Hugging Face's mixture-of-
// experts layers count tokens per expert that way off the CPU.
at::Tensor histc(Overload o, const at::Tensor& self, int64_t bins, const c10::Scalar& min, const c10::Scalar& max) {
  at::Tensor* out = o.out;
  const bool integral = c10::isIntegralType(self.scalar_type(), /*includeBool=*/false);
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()) || integral, "torch.histc: input of dtype ",
              self.scalar_type(), " is not supported (floating and integer inputs are)");
  TORCH_CHECK(bins > 0, "torch.histc(): bins must be > 0, but got ", bins, " for dimension 0");
  double lo = min.toDouble(), hi = max.toDouble();
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histc: range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo <= hi, "torch.histc: max must be larger than min");
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output("histc", out, {bins}, self.scalar_type(), self.device(), false);
  Program p("histc", self.device());
  ir::Graph& g = p.graph();
  ir::DType dtype = lowering::to_ir(self.scalar_type());
  ir::DType acc = integral ? ir::DType::S64 : lowering::accumulate_dtype(dtype);
  if (self.numel() == 0) {
    p.write(output, ir::full(g, dtype, 0, {bins}));
    p.run();
    return output;
  }
  int64_t n = self.numel();
  ir::Value x = ir::convert(g, ir::reshape(g, p.read(self), {n}), acc);
  const bool data_range = lo == hi;
  // CUDA converts the bounds to the input's type, and widens them when they then meet.
  if (integral) lo = std::trunc(lo), hi = std::trunc(hi);
  if (!data_range && lo == hi) lo -= 1, hi += 1;
  p.write(output, lowering::histc(g, x, bins, p.scalar(lo, acc), p.scalar(hi, acc), data_range));
  p.run();
  return output;
}
// ------------------------------------------------------------ histogram, histogramdd

// ATen's histogramdd semantics: `self` [..., D] holds D-dimensional points,
// bin edges per dimension (sorted), elements outside the edges or NaN are
// skipped, each dimension's last bin is closed on the right. histogram is
// the D = 1 case over the flattened input.

using OptTensor = std::optional<at::Tensor>;

void check_histogram_inputs(const at::Tensor& points, const std::vector<at::Tensor>& bins, const OptTensor& weight) {
  TORCH_CHECK(points.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions, but got ",
              points.dim());
  int64_t d = points.size(-1);
  TORCH_CHECK(static_cast<int64_t>(bins.size()) == d, "torch.histogramdd: expected ", d,
              " sequences of bin edges for a ", d, "-dimensional histogram but got ", bins.size());
  for (int64_t dim = 0; dim < d; ++dim) {
    const at::Tensor& b = bins[dim];
    TORCH_CHECK(points.dtype() == b.dtype(), "torch.histogramdd: input tensor and bins tensors should have the same "
                "dtype, but got input with dtype ", points.dtype(), " and bins for dimension ", dim, " with dtype ",
                b.dtype());
    TORCH_CHECK(b.dim() == 1, "torch.histogramdd: bins tensor should have one dimension, but got ", b.dim(),
                " dimensions in the bins tensor for dimension ", dim);
    TORCH_CHECK(b.numel() > 0, "torch.histogramdd: bins tensor should have at least 1 element, but got ", b.numel(),
                " elements in the bins tensor for dimension ", dim);
  }
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(points.dtype() == weight->dtype(), "torch.histogramdd: if weight tensor is provided, it should have "
                "the same dtype as the input tensor, but got weight with dtype ", weight->dtype(),
                " and input with dtype ", points.dtype());
    bool same = weight->dim() == points.dim() - 1;
    for (int64_t i = 0; same && i < weight->dim(); ++i) same = weight->size(i) == points.size(i);
    TORCH_CHECK(same, "torch.histogramdd: if weight tensor is provided it should have the same shape as the input "
                "tensor excluding its innermost dimension, but got input with shape ", points.sizes(),
                " and weight with shape ", weight->sizes());
  }
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(points.scalar_type()), "\"histogramdd\" not implemented for '",
                              c10::toString(points.scalar_type()), "'");
}

// The histogram of points [..., D] over `edges` (one sorted 1-D tensor per
// dimension) written into `hist` (shape: the bin counts).
void histogram_fill(const char* name, const at::Tensor& points, const std::vector<at::Tensor>& edges,
                    const OptTensor& weight, bool density, const at::Tensor& hist) {
  int64_t d = points.size(-1);
  int64_t n = points.numel() / std::max<int64_t>(d, 1);
  Program p(name, points.device());
  ir::Graph& g = p.graph();
  ir::DType dtype = lowering::to_ir(points.scalar_type());
  int64_t total = hist.numel();
  ir::Value counts;
  if (n == 0 || total == 0) {
    counts = ir::full(g, dtype, 0, {total});
  } else {
    ir::Value x = ir::reshape(g, p.read(points), {n, d});
    ir::Value index = ir::full(g, ir::DType::S64, 0, {n});
    ir::Value skip = ir::full(g, ir::DType::Pred, 0, {n});
    int64_t stride = total;
    for (int64_t dim = 0; dim < d; ++dim) {
      int64_t bins = edges[dim].numel() - 1;
      stride /= bins;
      ir::Value column = ir::reshape(g, ir::slice(g, x, {0, dim}, {n, dim + 1}), {n});
      ir::Value pos = lowering::edge_bin(g, column, p.read(edges[dim]));
      skip = ir::binary(g, ir::Op::Or, skip,
                        ir::compare(g, pos, ir::full(g, ir::DType::S64, 0, {n}), ir::Compare::LT));
      index = ir::binary(g, ir::Op::Add, index,
                         ir::binary(g, ir::Op::Multiply, pos, ir::full(g, ir::DType::S64, static_cast<double>(stride), {n})));
    }
    index = ir::select(g, skip, ir::full(g, ir::DType::S64, -1, {n}), index);
    std::optional<ir::Value> w;
    if (weight.has_value() && weight->defined()) w = ir::reshape(g, p.read(*weight), {n});
    counts = lowering::bin_counts(g, index, w, total, dtype);
  }
  ir::Shape shape = to_shape(hist.sizes());
  ir::Value h = ir::reshape(g, counts, shape);
  if (density) {
    // Normalised by the total, then by each bin's volume (the product of its widths).
    ir::Value sum = ir::reduce(g, counts, ir::constant(g, dtype, 0), {0}, ir::Combiner::Add);
    h = ir::binary(g, ir::Op::Divide, h, ir::broadcast_in_dim(g, sum, shape, {}));
    for (int64_t dim = 0; dim < d; ++dim) {
      int64_t e = edges[dim].numel();
      ir::Value ed = p.read(edges[dim]);
      ir::Value width = ir::binary(g, ir::Op::Subtract, ir::slice(g, ed, {1}, {e}), ir::slice(g, ed, {0}, {e - 1}));
      h = ir::binary(g, ir::Op::Divide, h, ir::broadcast_in_dim(g, width, shape, {dim}));
    }
  }
  p.write(hist, h);
  p.run();
}

// Per-dimension outer edges: `range` or the data's min and max (one sync),
// widened by 0.5 each way when equal; ATen's checks.
std::vector<std::pair<double, double>> outer_edges(const at::Tensor& points, std::optional<at::ArrayRef<double>> range) {
  int64_t d = points.size(-1);
  std::vector<std::pair<double, double>> r(d, {0.0, 1.0});
  if (range.has_value()) {
    TORCH_CHECK(static_cast<int64_t>(range->size()) == 2 * d, "torch.histogramdd: for a ", d,
                "-dimensional histogram range should have ", 2 * d, " elements, but got ", range->size());
    for (int64_t i = 0; i < d; ++i) r[i] = {(*range)[2 * i], (*range)[2 * i + 1]};
  } else if (points.numel() > 0) {
    at::Tensor flat = points.reshape({-1, d});
    at::Tensor lo = std::get<0>(flat.min(0)).to(at::kDouble).cpu();
    at::Tensor hi = std::get<0>(flat.max(0)).to(at::kDouble).cpu();
    for (int64_t i = 0; i < d; ++i) r[i] = {lo[i].item<double>(), hi[i].item<double>()};
  }
  for (int64_t i = 0; i < d; ++i) {
    auto& [lo, hi] = r[i];
    TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histogramdd: dimension ", i, "'s range [", lo, ", ",
                hi, "] is not finite");
    TORCH_CHECK(lo <= hi, "torch.histogramdd: min should not exceed max, but got", " min ", lo, " max ", hi,
                " for dimension ", i);
    if (lo == hi) {
      lo -= 0.5;
      hi += 0.5;
    }
  }
  return r;
}

// Evenly spaced edges (linspace in the input's dtype, as ATen builds them).
std::vector<at::Tensor> even_edges(const at::Tensor& points, at::IntArrayRef bins,
                                   std::optional<at::ArrayRef<double>> range, std::vector<at::Tensor>* outs) {
  int64_t d = points.size(-1);
  TORCH_CHECK(static_cast<int64_t>(bins.size()) == d, "torch.histogramdd: expected ", d,
              " sequences of bin edges for a ", d, "-dimensional histogram but got ", bins.size());
  for (int64_t i = 0; i < d; ++i)
    TORCH_CHECK(bins[i] > 0, "torch.histogramdd(): bins must be > 0, but got ", bins[i], " for dimension ", i);
  auto outer = outer_edges(points, range);
  std::vector<at::Tensor> edges;
  for (int64_t i = 0; i < d; ++i) {
    at::Tensor e = outs != nullptr ? (*outs)[i] : at::empty({bins[i] + 1}, points.options());
    at::linspace_out(e, outer[i].first, outer[i].second, bins[i] + 1);
    edges.push_back(e);
  }
  return edges;
}

c10::DimVector hist_shape(const std::vector<at::Tensor>& edges) {
  c10::DimVector s;
  for (const at::Tensor& e : edges) s.push_back(e.numel() - 1);
  return s;
}

at::Tensor histogramdd_cts(const at::Tensor& self, at::IntArrayRef bins, std::optional<at::ArrayRef<double>> range,
                           const OptTensor& weight, bool density, at::Tensor* out) {
  c10::DeviceGuard guard(self.device());
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions, but got ",
              self.dim());
  std::vector<at::Tensor> edges = even_edges(self, bins, range, nullptr);
  check_histogram_inputs(self, edges, weight);
  at::Tensor hist = prepare_output("_histogramdd_from_bin_cts", out, hist_shape(edges), self.scalar_type(),
                                   self.device(), false);
  histogram_fill("_histogramdd_from_bin_cts", self, edges, weight, density, hist);
  return hist;
}
at::Tensor histogramdd_from_bin_cts(const at::Tensor& self, at::IntArrayRef bins,
                                    std::optional<at::ArrayRef<double>> range, const OptTensor& weight, bool density) {
  return histogramdd_cts(self, bins, range, weight, density, nullptr);
}
at::Tensor& histogramdd_from_bin_cts_out(const at::Tensor& self, at::IntArrayRef bins,
                                         std::optional<at::ArrayRef<double>> range, const OptTensor& weight,
                                         bool density, at::Tensor& out) {
  histogramdd_cts(self, bins, range, weight, density, &out);
  return out;
}

at::Tensor histogramdd_tensors(const at::Tensor& self, at::TensorList bins, const OptTensor& weight, bool density,
                               at::Tensor* out) {
  c10::DeviceGuard guard(self.device());
  std::vector<at::Tensor> edges(bins.begin(), bins.end());
  check_histogram_inputs(self, edges, weight);
  at::Tensor hist = prepare_output("_histogramdd_from_bin_tensors", out, hist_shape(edges), self.scalar_type(),
                                   self.device(), false);
  histogram_fill("_histogramdd_from_bin_tensors", self, edges, weight, density, hist);
  return hist;
}
at::Tensor histogramdd_from_bin_tensors(const at::Tensor& self, at::TensorList bins, const OptTensor& weight,
                                        bool density) {
  return histogramdd_tensors(self, bins, weight, density, nullptr);
}
at::Tensor& histogramdd_from_bin_tensors_out(const at::Tensor& self, at::TensorList bins, const OptTensor& weight,
                                             bool density, at::Tensor& out) {
  histogramdd_tensors(self, bins, weight, density, &out);
  return out;
}

std::vector<at::Tensor> histogramdd_bin_edges(const at::Tensor& self, at::IntArrayRef bins,
                                              std::optional<at::ArrayRef<double>> range, const OptTensor& weight,
                                              bool density) {
  c10::DeviceGuard guard(self.device());
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions, but got ",
              self.dim());
  std::vector<at::Tensor> edges = even_edges(self, bins, range, nullptr);
  check_histogram_inputs(self, edges, weight);
  return edges;
}

// histogram: a 1-D histogram of all elements (the D = 1 case).
std::tuple<at::Tensor, at::Tensor> histogram_op(const at::Tensor& self, const at::Tensor* bins_tensor, int64_t bin_ct,
                                                std::optional<at::ArrayRef<double>> range, const OptTensor& weight,
                                                bool density, at::Tensor* hist_out, at::Tensor* edges_out) {
  c10::DeviceGuard guard(self.device());
  at::Tensor points = self.reshape({self.numel(), 1});
  OptTensor w;
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(weight->sizes() == self.sizes(), "torch.histogram: if weight tensor is provided it should have the "
                "same shape as the input tensor, but got input with shape ", self.sizes(), " and weight with shape ",
                weight->sizes());
    w = weight->reshape({self.numel()});
  }
  at::Tensor edges;
  const char* name = bins_tensor != nullptr ? "histogram.bins_tensor" : "histogram.bin_ct";
  if (bins_tensor != nullptr) {
    check_histogram_inputs(points, {*bins_tensor}, w);
    edges = edges_out != nullptr ? *edges_out : at::empty({0}, self.options());
    if (!edges.is_same(*bins_tensor)) {
      edges.resize_(bins_tensor->sizes());
      edges.copy_(*bins_tensor);
    }
  } else {
    std::vector<at::Tensor> given;
    if (edges_out != nullptr) {
      edges_out->resize_({std::max<int64_t>(bin_ct, 0) + 1});
      given.push_back(*edges_out);
    }
    edges = even_edges(points, {bin_ct}, range, edges_out != nullptr ? &given : nullptr)[0];
    check_histogram_inputs(points, {edges}, w);
  }
  at::Tensor hist = prepare_output(name, hist_out, {edges.numel() - 1}, self.scalar_type(), self.device(), false);
  histogram_fill(name, points, {edges}, w, density, hist);
  return {hist, edges};
}
std::tuple<at::Tensor, at::Tensor> histogram_bins_tensor(const at::Tensor& self, const at::Tensor& bins,
                                                         const OptTensor& weight, bool density) {
  return histogram_op(self, &bins, 0, std::nullopt, weight, density, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&> histogram_bins_tensor_out(const at::Tensor& self, const at::Tensor& bins,
                                                               const OptTensor& weight, bool density,
                                                               at::Tensor& hist, at::Tensor& bin_edges) {
  histogram_op(self, &bins, 0, std::nullopt, weight, density, &hist, &bin_edges);
  return {hist, bin_edges};
}
std::tuple<at::Tensor, at::Tensor> histogram_bin_ct(const at::Tensor& self, int64_t bins,
                                                    std::optional<at::ArrayRef<double>> range, const OptTensor& weight,
                                                    bool density) {
  return histogram_op(self, nullptr, bins, range, weight, density, nullptr, nullptr);
}
std::tuple<at::Tensor&, at::Tensor&> histogram_bin_ct_out(const at::Tensor& self, int64_t bins,
                                                          std::optional<at::ArrayRef<double>> range,
                                                          const OptTensor& weight, bool density, at::Tensor& hist,
                                                          at::Tensor& bin_edges) {
  histogram_op(self, nullptr, bins, range, weight, density, &hist, &bin_edges);
  return {hist, bin_edges};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  impl_variants<sort, "sort">(m, {".stable", nullptr, ".values_stable"});
  impl_variants<topk, "topk">(m, {"", nullptr, ".values"});
  impl_variants<kthvalue, "kthvalue">(m, {nullptr, nullptr, ".values"});
  m.impl("median", median_all);
  impl_variants<median_dim<false>, "median">(m, {nullptr, nullptr, ".dim_values"});
  m.impl("nanmedian", nanmedian_all);
  impl_variants<median_dim<true>, "nanmedian">(m, {nullptr, nullptr, ".dim_values"});
  m.impl("mode", mode);
  m.impl("_unique2", unique2);
  m.impl("_unique", unique1);
  m.impl("unique_consecutive", unique_consecutive);
  m.impl("unique_dim_consecutive", unique_dim_consecutive);
  m.impl("_cummax_helper", cummax_helper);
  m.impl("_cummin_helper", cummin_helper);
  impl_variants<logcumsumexp, "_logcumsumexp">(m, kFunctionalAndOut);
  impl_variants<isin_tt, "isin">(m, {".Tensor_Tensor", nullptr, ".Tensor_Tensor_out"});
  impl_variants<isin_ts, "isin">(m, {".Tensor_Scalar", nullptr, ".Tensor_Scalar_out"});
  impl_variants<isin_st, "isin">(m, {".Scalar_Tensor", nullptr, ".Scalar_Tensor_out"});
  constexpr OverloadNames kTensorValues{".Tensor", nullptr, ".Tensor_out"};
  impl_variants<searchsorted_t, "searchsorted">(m, kTensorValues);
  impl_variants<searchsorted_s, "searchsorted">(m, {".Scalar", nullptr, ".Scalar_out"});
  impl_variants<bucketize_t, "bucketize">(m, kTensorValues);
  impl_variants<bucketize_s, "bucketize">(m, {".Scalar", nullptr, nullptr});
  impl_variants<histc, "histc">(m, kFunctionalAndOut);
  m.impl("histogram.bins_tensor", histogram_bins_tensor);
  m.impl("histogram.bins_tensor_out", histogram_bins_tensor_out);
  m.impl("histogram.bin_ct", histogram_bin_ct);
  m.impl("histogram.bin_ct_out", histogram_bin_ct_out);
  m.impl("_histogramdd_bin_edges", histogramdd_bin_edges);
  m.impl("_histogramdd_from_bin_cts", histogramdd_from_bin_cts);
  m.impl("_histogramdd_from_bin_cts.out", histogramdd_from_bin_cts_out);
  m.impl("_histogramdd_from_bin_tensors", histogramdd_from_bin_tensors);
  m.impl("_histogramdd_from_bin_tensors.out", histogramdd_from_bin_tensors_out);
}

}  // namespace tpu::aten
