#include "ir/ops.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace tpu::ir {
namespace {

std::string i64_array(const Dims& v) {
  std::string s = "array<i64";
  for (size_t i = 0; i < v.size(); ++i) {
    s += i ? ", " : ": ";
    s += std::to_string(v[i]);
  }
  return s + ">";
}

std::string i64_list(const Dims& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// The precision_config of a dot or convolution whose operands are `dtype`.
std::string precision_config(const Graph& g, DType dtype) {
  DotPrecision p = dtype == DType::F32 || dtype == DType::C64 ? g.dot_precision() : DotPrecision::Highest;
  std::string name = std::string("#stablehlo<precision ") + mlir_name(p) + ">";
  return ", precision_config = [" + name + ", " + name + "]";
}

uint16_t float_to_half_bits(float f);
uint16_t float_to_bf16_bits(float f);

std::string hex(uint64_t bits, int width_bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%0*llX", width_bytes * 2, static_cast<unsigned long long>(bits));
  return buf;
}

// Renders a scalar in `dtype` for a dense<> attribute.
std::string scalar_literal(DType dtype, double value) {
  switch (dtype) {
    case DType::Pred: return value != 0 ? "true" : "false";
    case DType::F64: {
      uint64_t bits;
      std::memcpy(&bits, &value, 8);
      return hex(bits, 8);
    }
    case DType::F32: {
      float f = static_cast<float>(value);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      return hex(bits, 4);
    }
    case DType::F16: return hex(float_to_half_bits(static_cast<float>(value)), 2);
    case DType::BF16: return hex(float_to_bf16_bits(static_cast<float>(value)), 2);
    // Complex constants are (re, im) pairs; a real value has no imaginary part.
    case DType::C64: case DType::C128:
      return "(" + scalar_literal(complex_part(dtype), value) + ", " + scalar_literal(complex_part(dtype), 0) + ")";
    default: return std::to_string(static_cast<long long>(value));
  }
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);     // round to nearest even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x007fffffu;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xffu);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  int32_t e = exp - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (e <= 0) {                                                  // subnormal or zero
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x00800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t midpoint = 1u << (shift - 1);
    if (rem > midpoint || (rem == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent: correct
  return static_cast<uint16_t>(half);
}

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("ir: ") + what);
}

}  // namespace

namespace {

// The attributes of a scalar constant, formatted once per value on each thread:
// programs ask for the same few constants (0, 1, 0.5, a dtype's limits) again
// and again, and formatting one cost more than the rest of its node.
const Attrs& constant_attrs(DType dtype, double value) {
  struct Entry {
    bool used = false;
    DType dtype;
    uint64_t bits;
    Attrs attrs;
  };
  thread_local std::array<Entry, 64> cache;
  uint64_t bits;
  std::memcpy(&bits, &value, 8);
  Entry& e = cache[((bits * 0x9e3779b97f4a7c15ull) >> 58 ^ static_cast<uint64_t>(dtype)) % cache.size()];
  if (!e.used || e.dtype != dtype || e.bits != bits) {
    e.used = true;
    e.dtype = dtype;
    e.bits = bits;
    e.attrs = "value = dense<" + scalar_literal(dtype, value) + "> : " + Type{dtype, {}}.mlir();
  }
  return e.attrs;
}

}  // namespace

Value constant(Graph& g, DType dtype, double value) {
  return g.add(ir::Op::Constant, {}, Type{dtype, {}}, constant_attrs(dtype, value));
}

Value constant_int(Graph& g, DType dtype, int64_t value) {
  Type t{dtype, {}};
  std::string lit = dtype == DType::Pred ? (value ? "true" : "false") : std::to_string(value);
  if (is_floating(dtype)) return constant(g, dtype, static_cast<double>(value));
  return g.add(ir::Op::Constant, {}, t, "value = dense<" + lit + "> : " + t.mlir());
}

Value full(Graph& g, DType dtype, double value, const Shape& shape) {
  return broadcast_in_dim(g, constant(g, dtype, value), shape, {});
}

Value iota(Graph& g, DType dtype, const Shape& shape, int64_t dimension) {
  return g.add(ir::Op::Iota, {}, Type{dtype, shape}, "iota_dimension = " + std::to_string(dimension) + " : i64");
}

Value convert(Graph& g, Value x, DType dtype) {
  const Type& t = g.type(x);
  if (t.dtype == dtype) return x;
  // XLA has no complex-to-real convert; PyTorch's cast keeps the real part.
  if (is_complex(t.dtype) && !is_complex(dtype)) return convert(g, real(g, x), dtype);
  // XLA's simplifier turns convert(pred) * y into select(pred, y, 0), which drops PyTorch's
  // 0 * inf = NaN (False / 0 must be NaN); a bool reaches floats through u8 so it cannot match.
  if (t.dtype == DType::Pred && (is_floating(dtype) || is_complex(dtype))) x = convert(g, x, DType::U8);
  return g.add(ir::Op::Convert, {x}, Type{dtype, t.shape});
}

Value bitcast_convert(Graph& g, Value x, DType dtype, const Shape& shape) {
  return g.add(ir::Op::BitcastConvert, {x}, Type{dtype, shape});
}

Value reshape(Graph& g, Value x, const Shape& shape) {
  const Type& t = g.type(x);
  if (t.shape == shape) return x;
  require(numel(t.shape) == numel(shape), "reshape changes the element count");
  // A reshape of a reshape is one reshape of its source (or the source itself).
  Value source = g.reshaped_from(x);
  if (g.type(source).shape == shape) return source;
  return g.add(ir::Op::Reshape, {source}, Type{t.dtype, shape});
}

Value reinterpret(Graph& g, Value storage, DType dtype) {
  const Type& t = g.type(storage);
  if (t.dtype == dtype) return storage;
  // Booleans are stored one byte each with values 0/1: convert, don't bitcast.
  if (t.dtype == DType::Pred) return reinterpret(g, convert(g, storage, DType::U8), dtype);
  if (dtype == DType::Pred) return convert(g, reinterpret(g, storage, DType::U8), dtype);
  // XLA cannot bitcast complex elements: a complex storage is seen as pairs of
  // its real part type (c64[n] <-> f32[2n], real then imaginary) through
  // real/imag/complex, and other types go through that part type.
  if (is_complex(t.dtype)) {
    int64_t n = t.shape[0];
    Value re = reshape(g, real(g, storage), {n, 1});
    Value im = reshape(g, imag(g, storage), {n, 1});
    Value pairs = reshape(g, concatenate(g, {re, im}, 1), {2 * n});
    return reinterpret(g, pairs, dtype);
  }
  if (is_complex(dtype)) {
    DType part = complex_part(dtype);
    Value parts = reinterpret(g, storage, part);
    int64_t n = g.type(parts).shape[0];
    if (n % 2 != 0) throw std::invalid_argument("storage size is not a multiple of the complex element size");
    Value pairs = reshape(g, parts, {n / 2, 2});
    Value re = reshape(g, slice(g, pairs, {0, 0}, {n / 2, 1}), {n / 2});
    Value im = reshape(g, slice(g, pairs, {0, 1}, {n / 2, 2}), {n / 2});
    return complex(g, re, im);
  }
  int from = byte_width(t.dtype), to = byte_width(dtype);
  int64_t n = t.shape[0];
  if (from == to) return bitcast_convert(g, storage, dtype, {n});
  if (from > to) {
    int64_t ratio = from / to;
    Value x = bitcast_convert(g, storage, dtype, {n, ratio});
    return reshape(g, x, {n * ratio});
  }
  int64_t ratio = to / from;
  if (n % ratio != 0) throw std::invalid_argument("storage size is not a multiple of the new element size");
  Value x = reshape(g, storage, {n / ratio, ratio});
  return bitcast_convert(g, x, dtype, {n / ratio});
}

Value broadcast_in_dim(Graph& g, Value x, const Shape& shape, const Dims& dims) {
  const Type& t = g.type(x);
  bool identity = t.shape == shape;
  for (size_t i = 0; identity && i < dims.size(); ++i) identity = dims[i] == static_cast<int64_t>(i);
  if (identity) return x;
  require(static_cast<int64_t>(dims.size()) == t.rank(), "broadcast_in_dim rank");
  static const std::string kOfScalar = "broadcast_dimensions = " + i64_array({});  // most broadcasts
  return g.add(ir::Op::BroadcastInDim, {x}, Type{t.dtype, shape},
               dims.empty() ? kOfScalar : "broadcast_dimensions = " + i64_array(dims));
}

Value broadcast_to(Graph& g, Value x, const Shape& shape) {
  const Type& t = g.type(x);
  if (t.shape == shape) return x;
  int64_t offset = static_cast<int64_t>(shape.size()) - t.rank();
  require(offset >= 0, "broadcast_to a lower rank");
  Dims dims;
  for (int64_t i = 0; i < t.rank(); ++i) dims.push_back(i + offset);
  return broadcast_in_dim(g, x, shape, dims);
}

Value transpose(Graph& g, Value x, const Dims& perm) {
  const Type& t = g.type(x);
  bool identity = true;
  Shape shape(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    shape[i] = t.shape[perm[i]];
    identity = identity && perm[i] == static_cast<int64_t>(i);
  }
  if (identity) return x;
  return g.add(ir::Op::Transpose, {x}, Type{t.dtype, shape}, "permutation = " + i64_array(perm));
}

Value slice(Graph& g, Value x, const Dims& start, const Dims& limit, const Dims& strides_in) {
  const Type& t = g.type(x);
  Dims strides = strides_in.empty() ? Dims(start.size(), 1) : strides_in;
  Shape shape(start.size());
  bool whole = true;
  for (size_t i = 0; i < start.size(); ++i) {
    shape[i] = (limit[i] - start[i] + strides[i] - 1) / strides[i];
    whole = whole && start[i] == 0 && limit[i] == t.shape[i] && strides[i] == 1;
  }
  if (whole) return x;
  return g.add(ir::Op::Slice, {x}, Type{t.dtype, shape},
               "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                   ", strides = " + i64_array(strides));
}

Value dynamic_slice(Graph& g, Value x, const std::vector<Value>& start, const Shape& sizes) {
  std::vector<Value> operands{x};
  operands.insert(operands.end(), start.begin(), start.end());
  return g.add(ir::Op::DynamicSlice, operands, Type{g.type(x).dtype, sizes},
               "slice_sizes = " + i64_array(sizes));
}

Value dynamic_update_slice(Graph& g, Value x, Value update, const std::vector<Value>& start) {
  std::vector<Value> operands{x, update};
  operands.insert(operands.end(), start.begin(), start.end());
  return g.add(ir::Op::DynamicUpdateSlice, operands, g.type(x));
}

Value pad(Graph& g, Value x, Value padding_value, const Dims& low, const Dims& high) {
  const Type& t = g.type(x);
  Shape shape = t.shape;
  for (size_t i = 0; i < shape.size(); ++i) shape[i] += low[i] + high[i];
  return g.add(ir::Op::Pad, {x, padding_value}, Type{t.dtype, shape},
               "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " + i64_array(high) +
                   ", interior_padding = " + i64_array(Dims(low.size(), 0)));
}

Value concatenate(Graph& g, const std::vector<Value>& xs, int64_t dimension) {
  Type t = g.type(xs.at(0));
  t.shape[dimension] = 0;
  for (Value v : xs) t.shape[dimension] += g.type(v).shape[dimension];
  return g.add(ir::Op::Concatenate, xs, t, "dimension = " + std::to_string(dimension) + " : i64");
}

Value unary(Graph& g, Op op, Value x) { return g.add(op, {x}, g.type(x)); }

Value binary(Graph& g, Op op, Value a, Value b) {
  const Type& t = g.type(a);
  require(t == g.type(b), "binary operands differ in type");
  bool integer_division = (op == Op::Divide || op == Op::Remainder) && !is_floating(t.dtype) &&
                          !is_complex(t.dtype) && t.dtype != DType::Pred;
  if (integer_division) {
    // StableHLO's folder divides integer constants on the host, where a zero divisor is a SIGFPE
    // that kills the process (a fused graph folds whole programs of constants). Dividing by one
    // there keeps the folder safe; that quotient is undefined anyway (CPU raises; debug mode checks).
    Value zero = full(g, t.dtype, 0, t.shape);
    b = select(g, compare(g, b, zero, Compare::EQ), full(g, t.dtype, 1, t.shape), b);
  }
  return g.add(op, {a, b}, t);
}

Value compare(Graph& g, Value a, Value b, Compare direction) {
  static const char* names[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  const Type& t = g.type(a);
  require(t == g.type(b), "compare operands differ in type");
  const char* kind = is_floating(t.dtype) || is_complex(t.dtype) ? "FLOAT"
                     : (is_unsigned(t.dtype) || t.dtype == DType::Pred) ? "UNSIGNED"
                                                                         : "SIGNED";
  return g.add(ir::Op::Compare, {a, b}, Type{DType::Pred, t.shape},
               std::string("comparison_direction = #stablehlo<comparison_direction ") +
                   names[static_cast<int>(direction)] + ">, compare_type = #stablehlo<comparison_type " + kind + ">");
}

Value select(Graph& g, Value pred, Value on_true, Value on_false) {
  return g.add(ir::Op::Select, {pred, on_true, on_false}, g.type(on_true));
}

namespace {

constexpr int64_t kReductionWindow = 32;  // XLA's own window

// Whether reducing `dims` of `shape` in `g` is split in two (see ReductionSplit).
bool split_reduction(const Graph& g, const Shape& shape, const Dims& dims) {
  if (g.options().reduction_split != ReductionSplit::Explicit) return false;
  bool has_long_dim = false;
  int64_t elements = 1;
  for (int64_t d : dims) {
    has_long_dim = has_long_dim || shape[d] > kReductionWindow;
    elements *= shape[d];
  }
  if (!has_long_dim) return false;
  const int64_t rank = static_cast<int64_t>(shape.size());
  bool trailing = true;
  for (int64_t d : dims) trailing = trailing && d >= rank - static_cast<int64_t>(dims.size());
  return !(trailing && elements <= kLongestUnsplitReduction);
}

}  // namespace

Value reduce(Graph& g, Value x, Value init, const Dims& dims, Combiner combiner) {
  const Type& t = g.type(x);
  if (split_reduction(g, t.shape, dims)) {
    // Windows of 32 along each reduced dim (the tail padded with `init`), then
    // the partial results reduced the same way.
    const int64_t rank = t.rank();
    Dims window(rank, 1), ones(rank, 1);
    Padding padding(rank, {0, 0});
    for (int64_t d : dims) {
      window[d] = std::min(t.shape[d], kReductionWindow);
      padding[d].second = (window[d] - t.shape[d] % window[d]) % window[d];
    }
    Value partial = reduce_window(g, x, init, window, window, ones, ones, padding, combiner);
    return reduce(g, partial, init, dims, combiner);
  }
  Shape shape;
  for (int64_t i = 0; i < t.rank(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced = reduced || d == i;
    if (!reduced) shape.push_back(t.shape[i]);
  }
  return g.add(ir::Op::Reduce, {x, init}, Type{t.dtype, shape}, "dimensions = " + i64_array(dims), combiner);
}

namespace {
// `rows` as a dense i64 matrix attribute: dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>.
std::string i64_matrix(const std::vector<Dims>& rows) {
  std::string s = "dense<[";
  for (size_t i = 0; i < rows.size(); ++i) s += (i ? ", " : "") + i64_list(rows[i]);
  const size_t columns = rows.empty() ? 0 : rows[0].size();
  return s + "]> : tensor<" + std::to_string(rows.size()) + "x" + std::to_string(columns) + "xi64>";
}

int64_t group_size(const ReplicaGroups& groups) {
  if (groups.empty() || groups[0].empty()) throw std::logic_error("ir: a collective needs a replica group");
  for (const Dims& group : groups)
    if (group.size() != groups[0].size()) throw std::logic_error("ir: replica groups differ in size");
  return static_cast<int64_t>(groups[0].size());
}
}  // namespace

Value all_reduce(Graph& g, Value x, Combiner combiner, const ReplicaGroups& groups) {
  group_size(groups);
  return g.add(Op::AllReduce, {x}, g.type(x), "replica_groups = " + i64_matrix(groups), combiner);
}

Value all_gather(Graph& g, Value x, int64_t dim, const ReplicaGroups& groups) {
  Type t = g.type(x);
  t.shape[dim] *= group_size(groups);
  return g.add(Op::AllGather, {x}, t,
               "all_gather_dim = " + std::to_string(dim) + " : i64, replica_groups = " + i64_matrix(groups));
}

Value reduce_scatter(Graph& g, Value x, int64_t dim, Combiner combiner, const ReplicaGroups& groups) {
  Type t = g.type(x);
  const int64_t n = group_size(groups);
  if (t.shape[dim] % n != 0) throw std::logic_error("ir: reduce_scatter of a dimension the group does not divide");
  t.shape[dim] /= n;
  return g.add(Op::ReduceScatter, {x}, t,
               "replica_groups = " + i64_matrix(groups) + ", scatter_dimension = " + std::to_string(dim) + " : i64",
               combiner);
}

Value all_to_all(Graph& g, Value x, int64_t split_dim, int64_t concat_dim, const ReplicaGroups& groups) {
  Type t = g.type(x);
  const int64_t n = group_size(groups);
  if (t.shape[split_dim] % n != 0) throw std::logic_error("ir: all_to_all of a dimension the group does not divide");
  t.shape[split_dim] /= n;
  t.shape[concat_dim] *= n;
  return g.add(Op::AllToAll, {x}, t,
               "concat_dimension = " + std::to_string(concat_dim) + " : i64, replica_groups = " + i64_matrix(groups) +
                   ", split_count = " + std::to_string(n) + " : i64, split_dimension = " + std::to_string(split_dim) +
                   " : i64");
}

Value replica_id(Graph& g) { return g.add(Op::ReplicaId, {}, Type{DType::U32, {}}); }

Value collective_permute(Graph& g, Value x, const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::vector<Dims> rows;
  for (auto [source, target] : pairs) rows.push_back({source, target});
  return g.add(Op::CollectivePermute, {x}, g.type(x), "source_target_pairs = " + i64_matrix(rows));
}

Value sort(Graph& g, Value x, int64_t dimension, Combiner comparator) {
  return g.add(ir::Op::Sort, {x}, g.type(x),
               "dimension = " + std::to_string(dimension) + " : i64, is_stable = true", comparator);
}

Value dot_general(Graph& g, Value a, Value b, const Dims& batch_a, const Dims& batch_b,
                  const Dims& contract_a, const Dims& contract_b, DType result_dtype) {
  const Type& ta = g.type(a);
  const Type& tb = g.type(b);
  auto contains = [](const Dims& d, int64_t i) {
    for (int64_t x : d) if (x == i) return true;
    return false;
  };
  Shape shape;
  for (int64_t d : batch_a) shape.push_back(ta.shape[d]);
  for (int64_t i = 0; i < ta.rank(); ++i)
    if (!contains(batch_a, i) && !contains(contract_a, i)) shape.push_back(ta.shape[i]);
  for (int64_t i = 0; i < tb.rank(); ++i)
    if (!contains(batch_b, i) && !contains(contract_b, i)) shape.push_back(tb.shape[i]);
  std::string dn = "dot_dimension_numbers = #stablehlo.dot<";
  if (!batch_a.empty()) {
    dn += "lhs_batching_dimensions = " + i64_list(batch_a) + ", rhs_batching_dimensions = " + i64_list(batch_b) + ", ";
  }
  dn += "lhs_contracting_dimensions = " + i64_list(contract_a) +
        ", rhs_contracting_dimensions = " + i64_list(contract_b) + ">";
  dn += precision_config(g, ta.dtype);
  return g.add(ir::Op::DotGeneral, {a, b}, Type{result_dtype, shape}, dn);
}

Value gather_1d(Graph& g, Value x, Value indices) {
  const Type& ti = g.type(indices);
  return g.add(ir::Op::Gather, {x, indices}, Type{g.type(x).dtype, ti.shape},
               "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], "
               "index_vector_dim = " + std::to_string(ti.rank()) +
                   ">, slice_sizes = array<i64: 1>, indices_are_sorted = false");
}

Value scatter_1d(Graph& g, Value x, Value indices, Value updates) {
  return scatter_1d_combine(g, x, indices, updates, Combiner::Replace);
}

std::vector<Value> while_loop(Graph& g, const std::vector<Value>& init, const LoopCond& cond, const LoopBody& body) {
  auto region = [&](auto&& build) {
    auto r = std::make_shared<Graph>();
    r->set_options(g.options());
    std::vector<Value> carried;
    for (Value v : init) carried.push_back(r->parameter(g.type(v)));
    build(*r, carried);
    return r;
  };
  auto loop = std::make_shared<LoopRegions>();
  loop->cond = region([&](Graph& r, const std::vector<Value>& carried) { r.add_output(cond(r, carried)); });
  loop->body = region([&](Graph& r, const std::vector<Value>& carried) {
    std::vector<Value> next = body(r, carried);
    if (next.size() != carried.size()) throw std::logic_error("ir: a loop body must return every carried value");
    for (size_t k = 0; k < next.size(); ++k) {
      if (!(r.type(next[k]) == r.type(carried[k])))
        throw std::logic_error("ir: a loop body changed the type of carried value " + std::to_string(k));
      r.add_output(next[k]);
    }
  });
  return g.add_while(init, std::move(loop));
}

std::vector<Value> fori_loop(Graph& g, int64_t trip_count, const std::vector<Value>& init, const ForBody& body) {
  std::vector<Value> carried{constant_int(g, DType::S64, 0)};
  carried.insert(carried.end(), init.begin(), init.end());
  auto results = while_loop(
      g, carried,
      [&](Graph& r, const std::vector<Value>& c) {
        return compare(r, c[0], constant_int(r, DType::S64, trip_count), Compare::LT);
      },
      [&](Graph& r, const std::vector<Value>& c) {
        std::vector<Value> next{binary(r, ir::Op::Add, c[0], constant_int(r, DType::S64, 1))};
        std::vector<Value> rest = body(r, c[0], std::vector<Value>(c.begin() + 1, c.end()));
        next.insert(next.end(), rest.begin(), rest.end());
        return next;
      });
  return std::vector<Value>(results.begin() + 1, results.end());
}

// ---- conv builders

ConvDims ConvDims::channels_first(int64_t spatial_rank) {
  ConvDims d;
  for (int64_t i = 0; i < spatial_rank; ++i) {
    d.input_spatial.push_back(2 + i);
    d.kernel_spatial.push_back(2 + i);
    d.output_spatial.push_back(2 + i);
  }
  return d;
}

namespace {

// One side of "#stablehlo.conv<[b, f, 0, 1]x...>": the role of each position.
std::string conv_layout(int64_t rank, int64_t first, char first_name, int64_t second, char second_name,
                        const Dims& spatial) {
  std::vector<std::string> roles(rank, "?");
  roles.at(first) = std::string(1, first_name);
  roles.at(second) = std::string(1, second_name);
  for (size_t i = 0; i < spatial.size(); ++i) roles.at(spatial[i]) = std::to_string(i);
  std::string s = "[";
  for (int64_t i = 0; i < rank; ++i) s += (i ? ", " : "") + roles[i];
  return s + "]";
}

std::string padding_attr(const Padding& padding) {
  std::string s = "dense<[";
  for (size_t i = 0; i < padding.size(); ++i) {
    if (i) s += ", ";
    s += "[" + std::to_string(padding[i].first) + ", " + std::to_string(padding[i].second) + "]";
  }
  return s + "]> : tensor<" + std::to_string(padding.size()) + "x2xi64>";
}

// Extent of a dilated, padded, strided window sweep (0 when the window does not fit).
int64_t window_output_size(int64_t size, int64_t base_dilation, int64_t lo, int64_t hi, int64_t window,
                           int64_t window_dilation, int64_t stride) {
  int64_t dilated = size == 0 ? 0 : (size - 1) * base_dilation + 1;
  int64_t padded = dilated + lo + hi;
  int64_t extent = (window - 1) * window_dilation + 1;
  if (padded < extent) return 0;
  return (padded - extent) / stride + 1;
}

}  // namespace

Value convolution(Graph& g, Value lhs, Value rhs, const ConvDims& dn, const Dims& window_strides,
                  const Padding& padding, const Dims& lhs_dilation, const Dims& rhs_dilation,
                  int64_t feature_group_count, int64_t batch_group_count, DType result_dtype) {
  const Type& tl = g.type(lhs);
  const Type& tr = g.type(rhs);
  size_t n = dn.input_spatial.size();
  require(window_strides.size() == n && padding.size() == n && lhs_dilation.size() == n &&
              rhs_dilation.size() == n && dn.kernel_spatial.size() == n && dn.output_spatial.size() == n,
          "convolution: spatial rank mismatch");
  Shape shape(tl.rank());
  shape.at(dn.output_batch) = tl.shape[dn.input_batch] / batch_group_count;
  shape.at(dn.output_feature) = tr.shape[dn.kernel_output];
  for (size_t i = 0; i < n; ++i)
    shape.at(dn.output_spatial[i]) =
        window_output_size(tl.shape[dn.input_spatial[i]], lhs_dilation[i], padding[i].first, padding[i].second,
                           tr.shape[dn.kernel_spatial[i]], rhs_dilation[i], window_strides[i]);
  std::string attrs = "dimension_numbers = #stablehlo.conv<" +
                      conv_layout(tl.rank(), dn.input_batch, 'b', dn.input_feature, 'f', dn.input_spatial) + "x" +
                      conv_layout(tr.rank(), dn.kernel_output, 'o', dn.kernel_input, 'i', dn.kernel_spatial) +
                      "->" +
                      conv_layout(tl.rank(), dn.output_batch, 'b', dn.output_feature, 'f', dn.output_spatial) + ">";
  attrs += ", window_strides = " + i64_array(window_strides) + ", padding = " + padding_attr(padding) +
           ", lhs_dilation = " + i64_array(lhs_dilation) + ", rhs_dilation = " + i64_array(rhs_dilation) +
           ", feature_group_count = " + std::to_string(feature_group_count) +
           " : i64, batch_group_count = " + std::to_string(batch_group_count) + " : i64";
  attrs += precision_config(g, tl.dtype);
  return g.add(ir::Op::Convolution, {lhs, rhs}, Type{result_dtype, shape}, attrs);
}

Value reduce_window(Graph& g, Value x, Value init, const Dims& window_dimensions, const Dims& window_strides,
                    const Dims& base_dilations, const Dims& window_dilations, const Padding& padding,
                    Combiner combiner) {
  const Type& t = g.type(x);
  require(window_dimensions.size() == static_cast<size_t>(t.rank()) && window_strides.size() == window_dimensions.size() &&
              base_dilations.size() == window_dimensions.size() &&
              window_dilations.size() == window_dimensions.size() && padding.size() == window_dimensions.size(),
          "reduce_window: rank mismatch");
  Shape shape(t.rank());
  for (int64_t i = 0; i < t.rank(); ++i)
    shape[i] = window_output_size(t.shape[i], base_dilations[i], padding[i].first, padding[i].second,
                                  window_dimensions[i], window_dilations[i], window_strides[i]);
  return g.add(ir::Op::ReduceWindow, {x, init}, Type{t.dtype, shape},
               "window_dimensions = " + i64_array(window_dimensions) + ", window_strides = " +
                   i64_array(window_strides) + ", base_dilations = " + i64_array(base_dilations) +
                   ", window_dilations = " + i64_array(window_dilations) + ", padding = " + padding_attr(padding),
               combiner);
}

Value reverse(Graph& g, Value x, const Dims& dims) {
  if (dims.empty()) return x;
  return g.add(ir::Op::Reverse, {x}, g.type(x), "dimensions = " + i64_array(dims));
}

Value scatter_1d_combine(Graph& g, Value x, Value indices, Value updates, Combiner combiner) {
  const Type& ti = g.type(indices);
  return g.add(ir::Op::Scatter, {x, indices, updates}, g.type(x),
               "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], "
               "scatter_dims_to_operand_dims = [0], index_vector_dim = " + std::to_string(ti.rank()) +
                   ">, indices_are_sorted = false, unique_indices = false",
               combiner);
}

}  // namespace tpu::ir

// ---- index/shape builders
namespace tpu::ir {

Value gather_rows(Graph& g, Value x, Value indices) {
  const Type& tx = g.type(x);
  const Type& ti = g.type(indices);
  require(tx.rank() >= 1, "gather_rows of a 0-dim operand");
  Shape shape = ti.shape;
  Dims offset_dims, slice_sizes{1};
  for (int64_t d = 1; d < tx.rank(); ++d) {
    offset_dims.push_back(static_cast<int64_t>(shape.size()));
    shape.push_back(tx.shape[d]);
    slice_sizes.push_back(tx.shape[d]);
  }
  return g.add(ir::Op::Gather, {x, indices}, Type{tx.dtype, shape},
               "dimension_numbers = #stablehlo.gather<offset_dims = " + i64_list(offset_dims) +
                   ", collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = " +
                   std::to_string(ti.rank()) + ">, slice_sizes = " + i64_array(slice_sizes) +
                   ", indices_are_sorted = false");
}

Value scatter_rows(Graph& g, Value x, Value indices, Value updates, Combiner combiner) {
  const Type& tx = g.type(x);
  const Type& ti = g.type(indices);
  require(tx.rank() >= 1, "scatter_rows into a 0-dim operand");
  require(combiner != Combiner::None, "scatter_rows needs a combiner");
  Dims window;
  for (int64_t d = 1; d < tx.rank(); ++d) window.push_back(ti.rank() + d - 1);
  return g.add(ir::Op::Scatter, {x, indices, updates}, tx,
               "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = " + i64_list(window) +
                   ", inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = " +
                   std::to_string(ti.rank()) + ">, indices_are_sorted = false, unique_indices = false",
               combiner);
}

}  // namespace tpu::ir

// ---- nn builders
namespace tpu::ir {

Value constant_tensor(Graph& g, DType dtype, const Shape& shape, const std::vector<double>& values) {
  require(static_cast<int64_t>(values.size()) == numel(shape), "constant_tensor: value count differs from the shape");
  Type t{dtype, shape};
  if (values.empty()) return full(g, dtype, 0, shape);
  // One little-endian hex blob of the raw elements: exact for every dtype.
  std::string blob = "\"0x";
  char buf[4];
  auto put = [&](const void* p, int n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (int i = 0; i < n; ++i) {
      std::snprintf(buf, sizeof(buf), "%02X", b[i]);
      blob += buf;
    }
  };
  for (double v : values) {
    switch (dtype) {
      case DType::F64: put(&v, 8); break;
      case DType::F32: { float f = static_cast<float>(v); put(&f, 4); break; }
      case DType::BF16: { uint16_t h = float_to_bf16_bits(static_cast<float>(v)); put(&h, 2); break; }
      case DType::F16: { uint16_t h = float_to_half_bits(static_cast<float>(v)); put(&h, 2); break; }
      case DType::Pred: { uint8_t b = v != 0; put(&b, 1); break; }
      case DType::C64: { float f[2] = {static_cast<float>(v), 0.0f}; put(f, 8); break; }
      case DType::C128: { double d[2] = {v, 0.0}; put(d, 16); break; }
      default: {
        int64_t i = static_cast<int64_t>(v);
        put(&i, byte_width(dtype));  // little-endian: the low bytes come first
        break;
      }
    }
  }
  blob += "\"";
  return g.add(ir::Op::Constant, {}, t, "value = dense<" + blob + "> : " + t.mlir());
}

Value pad_interior(Graph& g, Value x, Value padding_value, const Dims& low, const Dims& high, const Dims& interior) {
  const Type& t = g.type(x);
  Shape shape = t.shape;
  for (size_t i = 0; i < shape.size(); ++i)
    shape[i] += low[i] + high[i] + (shape[i] > 0 ? (shape[i] - 1) * interior[i] : 0);
  return g.add(ir::Op::Pad, {x, padding_value}, Type{t.dtype, shape},
               "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " + i64_array(high) +
                   ", interior_padding = " + i64_array(interior));
}

}  // namespace tpu::ir

// ---- linalg factor builders
namespace tpu::ir {

Value triangular_solve(Graph& g, Value a, Value b, bool left_side, bool lower, bool unit_diagonal,
                       bool transpose_a) {
  const Type& ta = g.type(a);
  const Type& tb = g.type(b);
  require(ta.rank() >= 2 && ta.rank() == tb.rank() && ta.dtype == tb.dtype, "triangular_solve operand types");
  int64_t r = ta.rank();
  require(ta.shape[r - 1] == ta.shape[r - 2], "triangular_solve of a non-square a");
  require(tb.shape[left_side ? r - 2 : r - 1] == ta.shape[r - 1], "triangular_solve: a and b do not match");
  for (int64_t d = 0; d < r - 2; ++d) require(ta.shape[d] == tb.shape[d], "triangular_solve batch dims differ");
  auto flag = [](bool v) { return v ? "true" : "false"; };
  return g.add(ir::Op::TriangularSolve, {a, b}, tb,
               std::string("left_side = ") + flag(left_side) + ", lower = " + flag(lower) +
                   ", unit_diagonal = " + flag(unit_diagonal) + ", transpose_a = #stablehlo<transpose " +
                   (transpose_a ? "TRANSPOSE" : "NO_TRANSPOSE") + ">");
}

}  // namespace tpu::ir

// ---- complex/fft builders
namespace tpu::ir {

Value complex(Graph& g, Value re, Value im) {
  const Type& t = g.type(re);
  require(t == g.type(im), "complex: parts differ in type");
  return g.add(ir::Op::Complex, {re, im}, Type{complex_of(t.dtype), t.shape});
}

Value real(Graph& g, Value x) {
  const Type& t = g.type(x);
  if (!is_complex(t.dtype)) return x;
  return g.add(ir::Op::Real, {x}, Type{complex_part(t.dtype), t.shape});
}

Value imag(Graph& g, Value x) {
  const Type& t = g.type(x);
  if (!is_complex(t.dtype)) return full(g, t.dtype, 0, t.shape);
  return g.add(ir::Op::Imag, {x}, Type{complex_part(t.dtype), t.shape});
}

Value complex_abs(Graph& g, Value x) {
  const Type& t = g.type(x);
  require(is_complex(t.dtype), "complex_abs of a real tensor");
  return g.add(ir::Op::Abs, {x}, Type{complex_part(t.dtype), t.shape});
}

Value fft(Graph& g, Value x, FftType type, const Dims& lengths) {
  static const char* names[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
  const Type& t = g.type(x);
  size_t k = lengths.size();
  require(k >= 1 && k <= 3 && static_cast<int64_t>(k) <= t.rank(), "fft: 1 to 3 innermost dimensions");
  Type result = t;
  if (type == FftType::RFFT) {
    result.dtype = complex_of(t.dtype);
    result.shape.back() = lengths.back() / 2 + 1;
  } else if (type == FftType::IRFFT) {
    result.dtype = complex_part(t.dtype);
    result.shape.back() = lengths.back();
  }
  return g.add(ir::Op::Fft, {x}, result,
               std::string("fft_type = #stablehlo<fft_type ") + names[static_cast<int>(type)] +
                   ">, fft_length = " + i64_array(lengths));
}

}  // namespace tpu::ir
