// Indexing ops: index_select, gather, scatter family, index_add/index_copy,
// advanced indexing (index.Tensor, index_put_), masked_select, masked_scatter_,
// nonzero and embedding_dense_backward.
//
// Out-of-range indices are not checked on the device in strict and fused mode
// (a check would cost a host sync per op): reads clamp them into range, writes
// drop them, where CPU PyTorch raises. Only what the host knows is checked
// (e.g. a non-empty index into an empty dimension). Debug mode reads them back
// and raises as CPU does (debug_checks.h).
//
// Data-dependent shapes (nonzero, masked_select, boolean-mask indexing) run
// two programs: one counts, the host reads the count, the second one fills a
// result of exactly that size (the same sync CUDA does).
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/index_add.h>
#include <ATen/ops/index_copy.h>
#include <ATen/ops/index_reduce.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/scatter.h>
#include <ATen/ops/scatter_add.h>
#include <ATen/ops/scatter_reduce.h>
#include <ATen/Dispatch.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>

#include "aten/debug_checks.h"
#include "aten/op_helpers.h"
#include "engine/runtime.h"
#include "ir/ops.h"
#include "lowering/index.h"
#include "lowering/sort.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

using OptionalTensors = c10::List<std::optional<at::Tensor>>;

// A meta tensor like `t`: running an op on metas gives ATen's own checks,
// error messages, result shape and dtype without touching data.
at::Tensor meta(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

int64_t wrap_dim(int64_t dim, const at::Tensor& t) { return c10::maybe_wrap_dim(dim, std::max<int64_t>(t.dim(), 1)); }

int64_t dim_size(const at::Tensor& self, int64_t dim) { return self.dim() == 0 ? 1 : self.size(dim); }

std::string index_out_of_range_in_self(int64_t) { return "index out of range in self"; }

// Debug mode: `index` picks along dim `d` of self, raising CPU's usual message.
void check_dim_index(const char* name, const at::Tensor& self, int64_t d, const at::Tensor& index, ErrorType type,
                     const char* prefix = "") {
  check_index_values(name, index, {dim_size(self, d)}, type, OutOfBounds{d, dim_size(self, d), prefix});
}

// A non-empty index into an empty dimension can only be out of range.
void check_not_empty(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  TORCH_CHECK_INDEX(index.numel() == 0 || size > 0, "index out of range in self: index into dimension ", dim,
                    " with size 0");
}

// dim wrapped for self, with index's values checked against that dim
// (gather, scatter and scatter_reduce raise RuntimeError for a bad index).
int64_t checked_index_dim(const char* name, const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  int64_t d = wrap_dim(dim, self);
  check_not_empty(self, d, index);
  check_dim_index(name, self, d, index, ErrorType::Runtime);
  return d;
}

// Reads an s64 scalar result back to the host.
int64_t download_count(Program& p, ir::Value count) {
  engine::BufferRef buffer = p.run_for_result(count);
  int64_t n = 0;
  engine::Runtime::get().download(*buffer, &n, sizeof(n));
  return n;
}

// ------------------------------------------------------------ gather / index_select

at::Tensor gather_op(const char* name, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                     at::Tensor* out) {
  at::Tensor m = at::gather(meta(self), dim, meta(index));
  if (out != nullptr) {
    at::Tensor mo = meta(*out);
    at::gather_out(mo, meta(self), dim, meta(index));
  }
  int64_t d = checked_index_dim(name, self, dim, index);
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(name, out, m.sizes(), m.scalar_type(), self.device(), false);
  if (output.numel() == 0) return output;
  Program p(name, self.device());
  const at::Tensor* tensors[] = {&self, &index, &output};
  const int64_t captures[] = {d};
  build_or_apply(p, name, tensors, captures, [&](Program& q) {
    q.write(output, lowering::gather_dim(q.graph(), q.read(self), d, q.read(index)));
  });
  p.run();
  return output;
}

at::Tensor gather(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
  return gather_op(variant(o).c_str(), self, dim, index, o.out);
}

at::Tensor index_select_op(const char* name, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           at::Tensor* out) {
  // The common case (a vector of indices into a tensor) needs no meta run:
  // ATen's meta kernel for index_select is Python, ~50 us a call.
  bool plain = out == nullptr && self.dim() > 0 && index.dim() <= 1 &&
               (index.scalar_type() == c10::kLong || index.scalar_type() == c10::kInt) &&
               index.device() == self.device();
  std::vector<int64_t> sizes;
  c10::ScalarType dtype = self.scalar_type();
  if (plain) {
    sizes = self.sizes().vec();
    sizes[wrap_dim(dim, self)] = index.numel();
  } else {
    at::Tensor m = at::index_select(meta(self), dim, meta(index));
    if (out != nullptr) {
      at::Tensor mo = meta(*out);
      at::index_select_out(mo, meta(self), dim, meta(index));
    }
    sizes = m.sizes().vec();
    dtype = m.scalar_type();
  }
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == c10::kLong || index.scalar_type() == c10::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  int64_t d = wrap_dim(dim, self);
  // Every index is out of range of a dimension of size 0: CPU says so as an IndexError for a
  // vector, and with a message of its own (a RuntimeError) for more dimensions.
  if (index.numel() > 0 && self.dim() > 0 && self.size(d) == 0) {
    TORCH_CHECK_INDEX(self.dim() > 1, "index out of range in self");
    TORCH_CHECK(false, "index_select(): self indexing axis dim should be positive");
  }
  check_index_values(name, index, {dim_size(self, d)}, ErrorType::Index, index_out_of_range_in_self);
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(name, out, sizes, dtype, self.device(), false);
  if (output.numel() == 0) return output;
  Program p(name, self.device());
  const at::Tensor* tensors[] = {&self, &index, &output};
  const int64_t captures[] = {d};
  build_or_apply(p, name, tensors, captures, [&](Program& q) {
    q.write(output, lowering::select_rows(q.graph(), q.read(self), d, q.read(index)));
  });
  p.run();
  return output;
}

at::Tensor index_select(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  return index_select_op(variant(o).c_str(), self, dim, index, o.out);
}

// ------------------------------------------------------------ scatter family

ir::Combiner scatter_reduce_combiner(c10::string_view reduce) {
  if (reduce == "add") return ir::Combiner::Add;
  if (reduce == "multiply") return ir::Combiner::Mul;
  TORCH_CHECK(false, "reduce argument must be either add or multiply.");
}

// scatter/scatter_add with a tensor `src` or a scalar `value` (src undefined).
at::Tensor scatter_op(const char* name, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                      const at::Tensor& src, const c10::Scalar& value, ir::Combiner combiner, at::Tensor* out,
                      bool inplace) {
  // ATen's checks (shapes, dtypes) on metas.
  if (src.defined())
    at::scatter(meta(self), dim, meta(index), meta(src));
  else
    at::scatter(meta(self), dim, meta(index), value);
  int64_t d = checked_index_dim(name, self, dim, index);
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(name, out, self.sizes(), self.scalar_type(), self.device(), inplace);
  if (output.numel() == 0) return output;
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  ir::Value x = p.read(self);
  if (index.numel() > 0) {
    ir::Value idx = p.read(index);
    ir::Value s = src.defined() ? p.read_as(src, self.scalar_type())
                                : ir::broadcast_in_dim(g, p.scalar(value, lowering::to_ir(self.scalar_type())),
                                                       to_shape(index.sizes()), {});
    x = lowering::scatter_dim(g, x, d, idx, s, combiner);
  }
  p.write(output, x);
  p.run();
  return output;
}

// scatter of a tensor or a scalar, replacing or reducing (add / multiply), and scatter_add.
at::Tensor scatter_src(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter_op(variant(o).c_str(), self, dim, index, src, 0, ir::Combiner::Replace, o.out, o.inplace);
}
at::Tensor scatter_value(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const c10::Scalar& value) {
  return scatter_op(variant(o).c_str(), self, dim, index, at::Tensor(), value, ir::Combiner::Replace, o.out,
                    o.inplace);
}
at::Tensor scatter_reduce(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Tensor& src, c10::string_view reduce) {
  return scatter_op(variant(o).c_str(), self, dim, index, src, 0, scatter_reduce_combiner(reduce), o.out, o.inplace);
}
at::Tensor scatter_value_reduce(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const c10::Scalar& value, c10::string_view reduce) {
  return scatter_op(variant(o).c_str(), self, dim, index, at::Tensor(), value, scatter_reduce_combiner(reduce), o.out,
                    o.inplace);
}
at::Tensor scatter_add(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter_op(variant(o).c_str(), self, dim, index, src, 0, ir::Combiner::Add, o.out, o.inplace);
}

// The combiner of a scatter_reduce/index_reduce reduction ("mean" sums
// and divides), and the combiner's identity in `type`.
std::tuple<ir::Combiner, bool, c10::Scalar> reduction_of(c10::string_view reduce, c10::ScalarType type) {
  if (reduce == "sum" || reduce == "mean") return {ir::Combiner::Add, reduce == "mean", 0};
  if (reduce == "prod") return {ir::Combiner::Mul, false, 1};
  TORCH_CHECK(reduce == "amax" || reduce == "amin", "reduce argument must be either sum, prod, mean, amax or amin, "
              "got ", reduce);
  bool max = reduce == "amax";
  c10::Scalar identity = 0;
  AT_DISPATCH_ALL_TYPES_AND3(c10::kBool, c10::kHalf, c10::kBFloat16, type, "scatter_reduce", [&] {
    identity = max ? std::numeric_limits<scalar_t>::lowest() : std::numeric_limits<scalar_t>::max();
    if constexpr (std::numeric_limits<scalar_t>::has_infinity)
      identity = max ? -std::numeric_limits<scalar_t>::infinity() : std::numeric_limits<scalar_t>::infinity();
  });
  return {max ? ir::Combiner::Max : ir::Combiner::Min, false, identity};
}

// torch.scatter_reduce: sum, prod, mean, amax, amin, with or without self.
// Runs a reduction of a source into self at an index (scatter_reduce,
// index_reduce): `reduce_into(p, g, x, reduce_at)` gives self's value `x`
// with the source reduced in, where reduce_at(into, dim, index, src) is the
// reduction `reduce` names. reduce_into is not called for an empty index.
template <typename ReduceInto>
at::Tensor run_scatter_reduce(Overload o, const at::Tensor& self, const at::Tensor& index, c10::string_view reduce,
                              bool include_self, ReduceInto reduce_into) {
  c10::ScalarType type = self.scalar_type();
  auto [combiner, mean, identity] = reduction_of(reduce, type);
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(o.name, o.out, self.sizes(), type, self.device(), o.inplace);
  if (output.numel() == 0) return output;
  Program p(o.name, self.device());
  ir::Graph& g = p.graph();
  ir::Value x = p.read(self);
  if (index.numel() > 0) {
    auto reduce_at = [&](ir::Value into, int64_t dim, ir::Value idx, ir::Value src) {
      return lowering::scatter_reduce_dim(g, into, dim, idx, src, combiner, mean, include_self,
                                          p.scalar(identity, lowering::to_ir(type)));
    };
    x = reduce_into(p, g, x, reduce_at);
  }
  p.write(output, x);
  p.run();
  return output;
}

at::Tensor scatter_reduce_two_op(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                 const at::Tensor& src, c10::string_view reduce, bool include_self) {
  at::scatter_reduce(meta(self), dim, meta(index), meta(src), reduce, include_self);  // ATen's checks
  int64_t d = checked_index_dim(o.name, self, dim, index);
  return run_scatter_reduce(o, self, index, reduce, include_self,
                            [&](Program& p, ir::Graph& g, ir::Value x, const auto& reduce_at) {
                              return reduce_at(x, d, p.read(index), p.read(src));
                            });
}
constexpr auto scatter_reduce_two = functional_overload<scatter_reduce_two_op, "scatter_reduce">;
constexpr auto scatter_reduce_two_ = inplace_overload<scatter_reduce_two_op, "scatter_reduce_">;
constexpr auto scatter_reduce_two_out = out_overload<scatter_reduce_two_op, "scatter_reduce.two_out">;


// ------------------------------------------------------------ index_add / index_copy

// index_add (alpha scales source) or index_copy (alpha unused).
at::Tensor index_combine_op(Overload o, bool add, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& source, const c10::Scalar& alpha) {
  if (add)
    at::index_add(meta(self), dim, meta(index), meta(source), alpha);
  else
    at::index_copy(meta(self), dim, meta(index), meta(source));
  int64_t d = wrap_dim(dim, self);
  check_not_empty(self, d, index);
  if (add)
    check_dim_index(o.name, self, d, index, ErrorType::Runtime);
  else
    check_dim_index(o.name, self, d, index, ErrorType::Index, "index_copy_(): ");
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output(o.name, o.out, self.sizes(), self.scalar_type(), self.device(), o.inplace);
  if (output.numel() == 0) return output;
  Program p(o.name, self.device());
  ir::Graph& g = p.graph();
  ir::Value x = p.read(self);
  if (index.numel() > 0) {
    ir::Value s = p.read_as(source, self.scalar_type());
    // A 0-dim self or source goes with a 1-element index: one row.
    ir::Shape rows = self.dim() == 0 ? ir::Shape{index.numel()} : to_shape(self.sizes());
    if (self.dim() > 0) rows[d] = index.numel();
    s = ir::reshape(g, s, rows);
    if (add && !scalar_is(alpha, 1)) {
      ir::Value a = p.scalar(alpha, lowering::to_ir(self.scalar_type()));
      s = ir::binary(g, ir::Op::Multiply, s, ir::broadcast_in_dim(g, a, g.type(s).shape, {}));
    }
    x = lowering::combine_rows(g, x, d, p.read(index), s, add ? ir::Combiner::Add : ir::Combiner::Replace);
  }
  p.write(output, x);
  p.run();
  return output;
}

at::Tensor index_add_op(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                        const at::Tensor& source, const c10::Scalar& alpha) {
  return index_combine_op(o, true, self, dim, index, source, alpha);
}
constexpr auto index_add = functional_overload<index_add_op, "index_add">;
constexpr auto index_add_ = inplace_overload<index_add_op, "index_add_">;
constexpr auto index_add_out = out_overload<index_add_op, "index_add.out">;
at::Tensor index_copy_op(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor& source) {
  return index_combine_op(o, false, self, dim, index, source, 1);
}
constexpr auto index_copy = functional_overload<index_copy_op, "index_copy">;
constexpr auto index_copy_ = inplace_overload<index_copy_op, "index_copy_">;
constexpr auto index_copy_out = out_overload<index_copy_op, "index_copy.out">;

// ------------------------------------------------------------ nonzero / masked_select

int64_t count_nonzero_on_device(const char* name, const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  Program p(name, t.device());
  return download_count(p, lowering::count_nonzero(p.graph(), p.read(t)));
}

at::Tensor nonzero_op(const char* name, const at::Tensor& self, at::Tensor* out) {
  if (out != nullptr)
    TORCH_CHECK(out->scalar_type() == c10::kLong, "nonzero: Expected out tensor to have scalar type Long but got "
                "scalar type", out->scalar_type());
  c10::DeviceGuard guard(self.device());
  int64_t count = count_nonzero_on_device(name, self);
  at::Tensor output = prepare_output(name, out, {count, self.dim()}, c10::kLong, self.device(), false);
  if (output.numel() == 0) return output;
  Program p(name, self.device());
  p.write(output, lowering::nonzero(p.graph(), p.read(self), count));
  p.run();
  return output;
}

at::Tensor nonzero(const at::Tensor& self) { return nonzero_op("nonzero", self, nullptr); }
at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  nonzero_op("nonzero.out", self, &out);
  return out;
}

at::Tensor masked_select_op(const char* name, const at::Tensor& self, const at::Tensor& mask, at::Tensor* out) {
  TORCH_CHECK(mask.scalar_type() == c10::kBool, "masked_select: expected BoolTensor for mask");
  c10::DimVector shape = at::infer_size_dimvector(self.sizes(), mask.sizes());
  c10::DeviceGuard guard(self.device());
  int64_t count = 0;
  if (c10::multiply_integers(shape) > 0) {
    Program p(name, self.device());
    ir::Value m = ir::broadcast_to(p.graph(), p.read(mask), to_shape(shape));
    count = download_count(p, lowering::count_nonzero(p.graph(), m));
  }
  at::Tensor output = prepare_output(name, out, {count}, self.scalar_type(), self.device(), false);
  if (count == 0) return output;
  Program p(name, self.device());
  ir::Graph& g = p.graph();
  ir::Value x = ir::broadcast_to(g, p.read(self), to_shape(shape));
  ir::Value m = ir::broadcast_to(g, p.read(mask), to_shape(shape));
  p.write(output, lowering::masked_select(g, x, m, count));
  p.run();
  return output;
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  return masked_select_op("masked_select", self, mask, nullptr);
}
at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  masked_select_op("masked_select.out", self, mask, &out);
  return out;
}

// masked_scatter_: the k-th selected element of self takes source's k-th
// element (row-major); no host sync needed. A source with fewer elements than
// the mask selects is not detected (CPU raises): reads clamp to its last one.
at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  TORCH_CHECK(mask.scalar_type() == c10::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter_: expected self and source to have same dtypes but got", self.scalar_type(), " and ",
              source.scalar_type());
  TORCH_CHECK(at::is_expandable_to(mask.sizes(), self.sizes()), "masked_scatter_: expected mask to be broadcastable to ",
              self.sizes());
  if (self.numel() == 0) return self;
  c10::DeviceGuard guard(self.device());
  Program p("masked_scatter_", self.device());
  ir::Graph& g = p.graph();
  ir::Shape shape = to_shape(self.sizes());
  int64_t n = self.numel();
  ir::Value m = ir::reshape(g, ir::broadcast_to(g, p.read(mask), shape), {n});
  ir::Value x = ir::reshape(g, p.read(self), {n});
  ir::Value r = x;
  if (source.numel() > 0) {
    ir::Value src = ir::reshape(g, p.read(source), {source.numel()});
    ir::Value pos = lowering::prefix_sum(g, ir::convert(g, m, ir::DType::S64));
    pos = ir::binary(g, ir::Op::Add, pos, ir::full(g, ir::DType::S64, -1, {n}));
    ir::Value picked = ir::gather_rows(g, src, lowering::clamp_index(g, pos, source.numel()));
    r = ir::select(g, m, picked, x);
  }
  p.write(self, ir::reshape(g, r, shape));
  p.run();
  return self;
}

// ------------------------------------------------------------ advanced indexing

// Index tensors of index/index_put_, one per indexed dim: boolean masks are
// expanded into their nonzero coordinates (a host sync, as in ATen), CPU
// index tensors move to self's device.
std::vector<std::optional<at::Tensor>> expand_indices(const at::Tensor& self, const OptionalTensors& indices) {
  std::vector<std::optional<at::Tensor>> out;
  for (size_t i = 0; i < indices.size(); ++i) {
    std::optional<at::Tensor> idx = indices[i];
    if (!idx.has_value() || !idx->defined()) {
      out.emplace_back(std::nullopt);
      continue;
    }
    at::Tensor t = *idx;
    c10::ScalarType type = t.scalar_type();
    TORCH_CHECK_INDEX(type == c10::kLong || type == c10::kInt || type == c10::kByte || type == c10::kBool,
                      "tensors used as indices must be long, int, byte or bool tensors");
    if (!t.is_privateuseone()) t = t.to(self.device());
    if (type == c10::kByte || type == c10::kBool) {
      int64_t first = static_cast<int64_t>(out.size());
      for (int64_t j = 0; j < t.dim(); ++j) {
        int64_t d = first + j;
        TORCH_CHECK_INDEX(d < self.dim(), "too many indices for tensor of dimension ", self.dim());
        TORCH_CHECK_INDEX(t.size(j) == self.size(d), "The shape of the mask ", t.sizes(), " at index ", j,
                          " does not match the shape of the indexed tensor ", self.sizes(), " at index ", d);
      }
      at::Tensor nz = nonzero_op("nonzero", t, nullptr);
      for (int64_t j = 0; j < t.dim(); ++j) out.emplace_back(nz.select(1, j));
    } else {
      out.emplace_back(t);
    }
  }
  TORCH_CHECK_INDEX(static_cast<int64_t>(out.size()) <= self.dim(), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", out.size(), ")");
  return out;
}

// The broadcast shape of the index tensors, with ATen's IndexError when they don't broadcast.
c10::DimVector index_shape(const std::vector<std::optional<at::Tensor>>& indices) {
  c10::DimVector shape;
  try {
    for (const auto& t : indices)
      if (t) shape = at::infer_size_dimvector(shape, t->sizes());
  } catch (const c10::Error&) {
    std::string shapes;
    for (const auto& u : indices)
      if (u) shapes += (shapes.empty() ? "" : " ") + c10::str(u->sizes());
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together with shapes ", shapes);
  }
  return shape;
}

struct IndexSetup {
  std::vector<std::optional<at::Tensor>> indices;
  c10::DimVector index_shape;
  c10::DimVector result_shape;
};

IndexSetup setup_index(const char* name, const at::Tensor& self, const OptionalTensors& raw) {
  IndexSetup s;
  s.indices = expand_indices(self, raw);
  s.index_shape = index_shape(s.indices);
  std::vector<bool> indexed;
  for (size_t d = 0; d < s.indices.size(); ++d) {
    indexed.push_back(s.indices[d].has_value());
    // A non-empty index into an empty dimension can only be out of range.
    if (s.indices[d])
      TORCH_CHECK_INDEX(self.size(d) > 0 || c10::multiply_integers(s.index_shape) == 0, "index is out of bounds for "
                        "dimension ", d, " with size 0");
  }
  // CPU's message numbers an index among the index tensors, not among self's dims.
  for (size_t d = 0, ordinal = 0; d < s.indices.size(); ++d) {
    if (s.indices[d])
      check_index_values(name, *s.indices[d], {self.size(d), true}, ErrorType::Index,
                         OutOfBounds{static_cast<int64_t>(ordinal++), self.size(d)});
  }
  ir::Shape r = lowering::advanced_index_shape(to_shape(self.sizes()), indexed, to_shape(s.index_shape));
  s.result_shape = c10::DimVector(r.begin(), r.end());
  return s;
}

std::vector<std::optional<ir::Value>> read_indices(Program& p, const IndexSetup& s) {
  std::vector<std::optional<ir::Value>> values;
  for (const auto& t : s.indices) {
    if (!t) {
      values.emplace_back(std::nullopt);
      continue;
    }
    values.emplace_back(ir::broadcast_to(p.graph(), p.read(*t), to_shape(s.index_shape)));
  }
  return values;
}

bool any_index(const std::vector<std::optional<at::Tensor>>& indices) {
  for (const auto& t : indices)
    if (t) return true;
  return false;
}

at::Tensor index_op(const char* name, const at::Tensor& self, const OptionalTensors& raw, at::Tensor* out) {
  c10::DeviceGuard guard(self.device());
  IndexSetup s = setup_index(name, self, raw);
  if (!any_index(s.indices)) {  // nothing indexed: a copy
    at::Tensor output = prepare_output(name, out, self.sizes(), self.scalar_type(), self.device(), false);
    output.copy_(self);
    return output;
  }
  at::Tensor output = prepare_output(name, out, s.result_shape, self.scalar_type(), self.device(), false);
  if (output.numel() == 0) return output;
  Program p(name, self.device());
  p.write(output, lowering::advanced_index(p.graph(), p.read(self), read_indices(p, s)));
  p.run();
  return output;
}

at::Tensor index(const at::Tensor& self, const OptionalTensors& indices) {
  return index_op("index", self, indices, nullptr);
}
at::Tensor& index_out(const at::Tensor& self, const OptionalTensors& indices, at::Tensor& out) {
  index_op("index.Tensor_out", self, indices, &out);
  return out;
}

// x[mask] = v with one boolean mask and a one-element value: a select, no
// host sync (ATen takes the same shortcut through masked_fill_).
bool put_as_select(at::Tensor& self, const OptionalTensors& indices, const at::Tensor& values) {
  if (values.numel() != 1) return false;
  int64_t position = -1, count = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    std::optional<at::Tensor> t = indices[i];
    if (!t || !t->defined()) continue;
    ++count;
    if (t->scalar_type() != c10::kBool) return false;
    position = static_cast<int64_t>(i);
  }
  if (count != 1) return false;
  at::Tensor mask = *indices[position];
  if (position + mask.dim() > self.dim()) return false;
  for (int64_t j = 0; j < mask.dim(); ++j)
    if (mask.size(j) != self.size(position + j)) return false;
  if (self.numel() == 0) return true;
  if (!mask.is_privateuseone()) mask = mask.to(self.device());
  Program p("index_put_", self.device());
  ir::Graph& g = p.graph();
  ir::Shape shape = to_shape(self.sizes());
  ir::Dims dims;
  for (int64_t j = 0; j < mask.dim(); ++j) dims.push_back(position + j);
  ir::Value m = ir::broadcast_in_dim(g, p.read(mask), shape, dims);
  ir::Value v = ir::broadcast_in_dim(g, ir::reshape(g, p.read_as(values, self.scalar_type()), {}), shape, {});
  p.write(self, ir::select(g, m, v, p.read(self)));
  p.run();
  return true;
}

// Without accumulate, duplicate indices leave one of their values (which one
// is unspecified, as on CUDA; CPU keeps the last).
at::Tensor& index_put_impl_(at::Tensor& self, const OptionalTensors& raw, const at::Tensor& values, bool accumulate,
                            bool unsafe) {
  c10::DeviceGuard guard(self.device());
  if (!accumulate && put_as_select(self, raw, values)) return self;
  IndexSetup s = setup_index("index_put_", self, raw);
  TORCH_CHECK(at::is_expandable_to(values.sizes(), s.result_shape), "shape mismatch: value tensor of shape ",
              values.sizes(), " cannot be broadcast to indexing result of shape ", s.result_shape);
  TORCH_CHECK(values.scalar_type() == self.scalar_type(), "Index put requires the source and destination dtypes match, "
              "got ", self.scalar_type(), " for the destination and ", values.scalar_type(), " for the source.");
  if (!any_index(s.indices)) {
    self.copy_(values);
    return self;
  }
  if (self.numel() == 0 || c10::multiply_integers(s.result_shape) == 0) return self;
  Program p("index_put_", self.device());
  ir::Graph& g = p.graph();
  std::vector<std::optional<ir::Value>> idx = read_indices(p, s);
  ir::Value v = ir::broadcast_to(g, p.read(values), to_shape(s.result_shape));
  p.write(self, lowering::advanced_index_put(g, p.read(self), idx, v, accumulate));
  p.run();
  return self;
}

// ------------------------------------------------------------ embedding

at::Tensor embedding_dense_backward(const at::Tensor& grad, const at::Tensor& indices, c10::SymInt num_weights_sym,
                                    c10::SymInt padding_idx_sym, bool scale_grad_by_freq) {
  int64_t num_weights = num_weights_sym.expect_int(), padding_idx = padding_idx_sym.expect_int();
  TORCH_CHECK(indices.scalar_type() == c10::kLong || indices.scalar_type() == c10::kInt,
              "embedding_backward: Expected tensor for argument #1 'indices' to have one of the following scalar "
              "types: Long, Int; but got ", indices.scalar_type(), " instead");
  int64_t width = grad.dim() == 0 ? 1 : grad.size(-1);
  c10::DeviceGuard guard(grad.device());
  at::Tensor output = at::empty({num_weights, width}, grad.options());
  if (output.numel() == 0) return output;
  Program p("embedding_dense_backward", grad.device());
  const at::Tensor* tensors[] = {&grad, &indices, &output};
  const int64_t captures[] = {num_weights, padding_idx, scale_grad_by_freq};
  build_or_apply(p, "embedding_dense_backward", tensors, captures, [&](Program& q) {
    ir::Graph& g = q.graph();
    if (indices.numel() == 0) {
      q.write(output, ir::full(g, lowering::to_ir(grad.scalar_type()), 0, {num_weights, width}));
    } else {
      q.write(output, lowering::embedding_backward(g, q.read(grad), q.read(indices), num_weights, padding_idx,
                                                   scale_grad_by_freq));
    }
  });
  p.run();
  return output;
}


// ------------------------------------------------------------ take / put_ / index_fill_ / index_reduce

auto flat_out_of_range(int64_t numel) {
  return [numel](int64_t value) {
    return "out of range: tried to access index " + std::to_string(value) + " on a tensor of " +
           std::to_string(numel) + " elements.";
  };
}

// take: self read as flat; out-of-range indices clamp (see the file comment).
at::Tensor take_op(const at::Tensor& self, const at::Tensor& index, at::Tensor* out) {
  TORCH_CHECK(index.scalar_type() == c10::kLong, "take(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK_INDEX(self.numel() > 0 || index.numel() == 0, "take(): tried to take from an empty tensor");
  check_index_values("take", index, {self.numel(), true}, ErrorType::Index, flat_out_of_range(self.numel()));
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output("take", out, index.sizes(), self.scalar_type(), self.device(), false);
  if (output.numel() == 0) return output;
  Program p("take", self.device());
  ir::Graph& g = p.graph();
  int64_t n = self.numel();
  ir::Value idx = lowering::clamp_index(g, lowering::wrap_negative(g, p.read(index), n), n);
  p.write(output, ir::gather_rows(g, ir::reshape(g, p.read(self), {n}), idx));
  p.run();
  return output;
}
at::Tensor take(const at::Tensor& self, const at::Tensor& index) { return take_op(self, index, nullptr); }
at::Tensor& take_out(const at::Tensor& self, const at::Tensor& index, at::Tensor& out) {
  take_op(self, index, &out);
  return out;
}

at::Tensor& put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  TORCH_CHECK(index.scalar_type() == c10::kLong, "put_(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "put_(): self and source expected to have the same dtype, "
              "but got self.dtype = ", self.scalar_type(), " and source.dtype = ", source.scalar_type());
  TORCH_CHECK(source.numel() == index.numel(), "put_(): Expected source and index to have the same number of "
              "elements, but got source.numel() = ", source.numel(), ", index.numel() = ", index.numel());
  TORCH_CHECK_INDEX(self.numel() > 0 || index.numel() == 0, "put_(): Tried to put elements into an empty tensor");
  check_index_values("put_", index, {self.numel(), true}, ErrorType::Index, flat_out_of_range(self.numel()));
  if (index.numel() == 0) return self;
  c10::DeviceGuard guard(self.device());
  Program p("put_", self.device());
  ir::Graph& g = p.graph();
  int64_t n = self.numel(), k = index.numel();
  ir::Value idx = lowering::wrap_negative(g, ir::reshape(g, p.read(index), {k}), n);
  ir::Value r = lowering::combine_rows(g, ir::reshape(g, p.read(self), {n}), 0, idx,
                                       ir::reshape(g, p.read(source), {k}),
                                       accumulate ? ir::Combiner::Add : ir::Combiner::Replace);
  p.write(self, ir::reshape(g, r, to_shape(self.sizes())));
  p.run();
  return self;
}

// index_fill_: the slices of self along dim picked by index take `value`.
at::Tensor& index_fill_op(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value) {
  TORCH_CHECK_INDEX(index.scalar_type() == c10::kLong, "index_fill_(): Expected dtype int64 for index.");
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_fill_(): Index is supposed to be a vector");
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  int64_t d = wrap_dim(dim, self);
  check_not_empty(self, d, index);
  check_index_values("index_fill_", index, {dim_size(self, d), true}, ErrorType::Index,
                     OutOfBounds{d, dim_size(self, d)});
  if (self.numel() == 0 || index.numel() == 0) return self;
  c10::DeviceGuard guard(self.device());
  Program p("index_fill_", self.device());
  ir::Graph& g = p.graph();
  int64_t size = self.dim() == 0 ? 1 : self.size(d), k = index.numel();
  ir::Value idx = lowering::wrap_negative(g, ir::reshape(g, p.read(index), {k}), size);
  ir::Value picked = lowering::combine_rows(g, ir::full(g, ir::DType::Pred, 0, {size}), 0, idx,
                                            ir::full(g, ir::DType::Pred, 1, {k}), ir::Combiner::Replace);
  ir::Shape shape = to_shape(self.sizes());
  ir::Value mask = self.dim() == 0 ? ir::reshape(g, picked, {}) : ir::broadcast_in_dim(g, picked, shape, {d});
  ir::Value v = ir::broadcast_in_dim(g, p.read_as(value, self.scalar_type()), shape, {});
  p.write(self, ir::select(g, mask, v, p.read(self)));
  p.run();
  return self;
}
at::Tensor& index_fill_scalar(at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value) {
  return index_fill_op(self, dim, index, scalar_operand(value));
}
at::Tensor& index_fill_tensor(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value) {
  return index_fill_op(self, dim, index, value);
}

// index_reduce is scatter_reduce with the index spread over source's shape.
at::Tensor index_reduce_op(Overload o, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Tensor& source, c10::string_view reduce, bool include_self) {
  at::index_reduce(meta(self), dim, meta(index), meta(source), reduce, include_self);  // ATen's checks
  int64_t d = wrap_dim(dim, self);
  check_not_empty(self, d, index);
  check_index_values(o.name, index, {dim_size(self, d)}, ErrorType::Index, index_out_of_range_in_self);
  return run_scatter_reduce(o, self, index, reduce, include_self,
                            [&](Program& p, ir::Graph& g, ir::Value x, const auto& reduce_at) {
                              ir::Shape rows = self.dim() == 0 ? ir::Shape{index.numel()} : to_shape(self.sizes());
                              if (self.dim() > 0) rows[d] = index.numel();
                              ir::Value src = ir::reshape(g, p.read_as(source, self.scalar_type()), rows);
                              int64_t sd = self.dim() == 0 ? 0 : d;
                              ir::Value idx =
                                  ir::broadcast_in_dim(g, ir::reshape(g, p.read(index), {index.numel()}), rows, {sd});
                              if (self.dim() == 0) x = ir::reshape(g, x, {1});
                              return ir::reshape(g, reduce_at(x, sd, idx, src), to_shape(self.sizes()));
                            });
}
constexpr auto index_reduce = functional_overload<index_reduce_op, "index_reduce">;
constexpr auto index_reduce_ = inplace_overload<index_reduce_op, "index_reduce_">;
constexpr auto index_reduce_out = out_overload<index_reduce_op, "index_reduce.out">;

// ------------------------------------------------------------ repeat_interleave / nonzero_static

// repeat_interleave(repeats): i repeated repeats[i] times. Without
// output_size the host reads the total (and checks for negative repeats).
at::Tensor repeat_interleave(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == c10::kLong || repeats.scalar_type() == c10::kInt,
              "repeats has to be Long or Int tensor");
  c10::DeviceGuard guard(repeats.device());
  int64_t n = repeats.numel();
  int64_t total = 0;
  if (output_size.has_value()) {
    total = output_size->expect_int();
  } else if (n > 0) {
    Program p("repeat_interleave", repeats.device());
    ir::Graph& g = p.graph();
    ir::Value r = ir::convert(g, p.read(repeats), ir::DType::S64);
    ir::Value sum = ir::reduce(g, r, ir::constant_int(g, ir::DType::S64, 0), {0}, ir::Combiner::Add);
    ir::Value min = ir::reduce(g, r, ir::constant_int(g, ir::DType::S64, INT64_MAX), {0}, ir::Combiner::Min);
    ir::Value both = ir::concatenate(g, {ir::reshape(g, sum, {1}), ir::reshape(g, min, {1})}, 0);
    engine::BufferRef buffer = p.run_for_result(both);
    int64_t host[2] = {0, 0};
    engine::Runtime::get().download(*buffer, host, sizeof(host));
    TORCH_CHECK(host[1] >= 0, "repeats can not be negative");
    total = host[0];
  }
  at::Tensor output = at::empty({total}, repeats.options());
  if (total == 0 || n == 0) return output;
  Program p("repeat_interleave", repeats.device());
  ir::Graph& g = p.graph();
  ir::Value ends = lowering::prefix_sum(g, ir::convert(g, p.read(repeats), ir::DType::S64));
  // Output j belongs to the first i whose running total exceeds j.
  ir::Value j = ir::iota(g, ir::DType::S64, {total}, 0);
  p.write(output, lowering::search_sorted(g, ends, j, /*right=*/true));
  p.run();
  return output;
}

at::Tensor nonzero_static_op(const at::Tensor& self, int64_t size, int64_t fill_value, at::Tensor* out) {
  TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer");
  c10::DeviceGuard guard(self.device());
  at::Tensor output = prepare_output("nonzero_static", out, {size, self.dim()}, c10::kLong, self.device(), false);
  if (output.numel() == 0) return output;
  Program p("nonzero_static", self.device());
  ir::Graph& g = p.graph();
  ir::Value x = self.numel() == 0 ? ir::full(g, ir::DType::Pred, 0, {1}) : p.read(self);
  ir::Value fill = p.scalar(fill_value, ir::DType::S64);
  if (self.numel() == 0)
    p.write(output, ir::broadcast_in_dim(g, fill, {size, self.dim()}, {}));
  else
    p.write(output, lowering::nonzero_static(g, x, size, fill));
  p.run();
  return output;
}
at::Tensor nonzero_static(const at::Tensor& self, c10::SymInt size, int64_t fill_value) {
  return nonzero_static_op(self, size.expect_int(), fill_value, nullptr);
}
at::Tensor& nonzero_static_out(const at::Tensor& self, c10::SymInt size, int64_t fill_value, at::Tensor& out) {
  nonzero_static_op(self, size.expect_int(), fill_value, &out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  impl_variants<gather, "gather">(m, kFunctionalAndOut);
  impl_variants<index_select, "index_select">(m, kFunctionalAndOut);
  impl_variants<scatter_src, "scatter">(m, {".src", "_.src", ".src_out"});
  impl_variants<scatter_value, "scatter">(m, {".value", "_.value", ".value_out"});
  impl_variants<scatter_reduce, "scatter">(m, {".reduce", "_.reduce", ".reduce_out"});
  impl_variants<scatter_value_reduce, "scatter">(m, {".value_reduce", "_.value_reduce", ".value_reduce_out"});
  impl_variants<scatter_add, "scatter_add">(m);
  m.impl("scatter_reduce.two", scatter_reduce_two);
  m.impl("scatter_reduce_.two", scatter_reduce_two_);
  m.impl("scatter_reduce.two_out", scatter_reduce_two_out);
  m.impl("index_add", index_add);
  m.impl("index_add_", index_add_);
  m.impl("index_add.out", index_add_out);
  m.impl("index_copy", index_copy);
  m.impl("index_copy_", index_copy_);
  m.impl("index_copy.out", index_copy_out);
  m.impl("nonzero", nonzero);
  m.impl("nonzero.out", nonzero_out);
  m.impl("masked_select", masked_select);
  m.impl("masked_select.out", masked_select_out);
  m.impl("masked_scatter_", masked_scatter_);
  m.impl("index.Tensor", index);
  m.impl("index.Tensor_out", index_out);
  m.impl("_index_put_impl_", index_put_impl_);
  m.impl("embedding_dense_backward", embedding_dense_backward);
  m.impl("take", take);
  m.impl("take.out", take_out);
  m.impl("put_", put_);
  m.impl("index_fill_.int_Scalar", index_fill_scalar);
  m.impl("index_fill_.int_Tensor", index_fill_tensor);
  m.impl("index_reduce", index_reduce);
  m.impl("index_reduce_", index_reduce_);
  m.impl("index_reduce.out", index_reduce_out);
  m.impl("repeat_interleave.Tensor", repeat_interleave);
  m.impl("nonzero_static", nonzero_static);
  m.impl("nonzero_static.out", nonzero_static_out);
}

}  // namespace tpu::aten
