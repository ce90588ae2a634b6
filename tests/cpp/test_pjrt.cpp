// Native test of the torch-free layers: csrc/pjrt (RAII over the PJRT C API)
// and csrc/ir (StableHLO graph builder + MLIR text emitter).
//
// Usage: test_pjrt PLUGIN_PATH [NAME_SUBSTRING...]
//        test_pjrt --leak-self-check                 (leaks from our code on purpose)
//        test_pjrt --leak-self-check-pjrt PLUGIN_PATH (drops a PJRT_Event on purpose)
// The self-checks let the harness prove that LeakSanitizer is active and that
// it attributes both kinds of leak to us.
//
// Prints one line per case ("PASS name" / "FAIL name: why") and a summary;
// exits 1 if any case failed. Built and run by tests/test_pjrt_native.py,
// also under LeakSanitizer.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "ir/graph.h"
#include "ir/ops.h"
#include "pjrt/pjrt.h"
#include "pjrt_c_api.h"

namespace ir = tpu::ir;
namespace pj = tpu::pjrt;
using ir::DType;
using ir::Graph;
using ir::Shape;
using ir::Type;
using ir::Value;
using pj::ElementType;

// ------------------------------------------------------------------ checks

namespace {

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
std::string str(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, std::string>) {
    os << '"' << v << '"';
  } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
    os << static_cast<int>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    os.precision(9);
    os << v;
  } else if constexpr (std::is_same_v<T, Type>) {
    os << v.mlir();
  } else if constexpr (std::is_same_v<T, ir::Ints>) {
    os << '[';
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << ']';
  } else if constexpr (std::is_enum_v<T>) {
    os << static_cast<long long>(v);
  } else {
    os << v;
  }
  return os.str();
}

template <typename T>
std::string str(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += str(v[i]);
  }
  return s + "]";
}

[[noreturn]] void fail(const char* file, int line, const std::string& what) {
  throw Failure(std::string(file) + ":" + std::to_string(line) + ": " + what);
}

#define CHECK(cond)                                              \
  do {                                                           \
    if (!(cond)) fail(__FILE__, __LINE__, "CHECK(" #cond ")");   \
  } while (0)

#define CHECK_EQ(a, b)                                                                  \
  do {                                                                                  \
    const auto a_ = (a);                                                                \
    const auto b_ = (b);                                                                \
    if (!(a_ == b_))                                                                    \
      fail(__FILE__, __LINE__, "CHECK_EQ(" #a ", " #b "): " + str(a_) + " != " + str(b_)); \
  } while (0)

#define CHECK_CONTAINS(haystack, needle)                                            \
  do {                                                                              \
    const std::string h_ = (haystack);                                              \
    const std::string n_ = (needle);                                                \
    if (h_.find(n_) == std::string::npos)                                           \
      fail(__FILE__, __LINE__, "expected " + str(n_) + " in " + str(h_));           \
  } while (0)

// Runs `fn`, which must throw E; returns the exception's what().
template <typename E>
std::string expect_throw(const char* file, int line, const std::function<void()>& fn, int* code = nullptr) {
  try {
    fn();
  } catch (const E& e) {
    if constexpr (std::is_same_v<E, pj::Error>) {
      if (code) *code = e.code();
    }
    return e.what();
  } catch (const std::exception& e) {
    fail(file, line, std::string("threw the wrong exception type: ") + e.what());
  }
  fail(file, line, "did not throw");
}
#define EXPECT_THROW(E, ...) expect_throw<E>(__FILE__, __LINE__, __VA_ARGS__)

// Compares floats within a relative tolerance (default: exactly); NaN matches NaN.
void check_close(const char* file, int line, const std::vector<float>& got,
                 const std::vector<float>& want, float tol = 0) {
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ok = std::isnan(got[i]);
    } else if (std::isinf(want[i])) {
      ok = got[i] == want[i];
    } else {
      ok = std::fabs(got[i] - want[i]) <= tol * std::max(1.0f, std::fabs(want[i]));
    }
  }
  if (!ok) fail(file, line, "values differ: got " + str(got) + ", want " + str(want));
}
#define CHECK_CLOSE(...) check_close(__FILE__, __LINE__, __VA_ARGS__)

// ------------------------------------------------------------------ environment

struct Env {
  std::string plugin_path;
  std::shared_ptr<pj::Plugin> plugin;
  std::unique_ptr<pj::Client> client;
  PJRT_Device* device = nullptr;
} env;

ElementType element_type(DType d) {
  switch (d) {
    case DType::Pred: return ElementType::Pred;
    case DType::S8: return ElementType::S8;
    case DType::S16: return ElementType::S16;
    case DType::S32: return ElementType::S32;
    case DType::S64: return ElementType::S64;
    case DType::U8: return ElementType::U8;
    case DType::U16: return ElementType::U16;
    case DType::U32: return ElementType::U32;
    case DType::U64: return ElementType::U64;
    case DType::F16: return ElementType::F16;
    case DType::BF16: return ElementType::BF16;
    case DType::F32: return ElementType::F32;
    case DType::F64: return ElementType::F64;
  }
  return ElementType::Invalid;
}

size_t width(ElementType t) {
  switch (t) {
    case ElementType::Pred: case ElementType::S8: case ElementType::U8: return 1;
    case ElementType::S16: case ElementType::U16: case ElementType::F16: case ElementType::BF16: return 2;
    case ElementType::S32: case ElementType::U32: case ElementType::F32: return 4;
    case ElementType::S64: case ElementType::U64: case ElementType::F64: case ElementType::C64: return 8;
    case ElementType::C128: return 16;
    default: return 0;
  }
}

// Host data of one array: element type, shape, raw bytes.
template <typename T>
std::unique_ptr<pj::Buffer> upload(const std::vector<T>& data, DType dtype, const Shape& dims) {
  ElementType t = element_type(dtype);
  if (width(t) != sizeof(T)) fail(__FILE__, __LINE__, "upload: host type width mismatch");
  if (static_cast<int64_t>(data.size()) != ir::numel(dims)) fail(__FILE__, __LINE__, "upload: size mismatch");
  return env.client->buffer_from_host(data.data(), t, dims.vec(), env.device);
}

template <typename T>
std::vector<T> download(const pj::Buffer& b) {
  if (width(b.element_type()) != sizeof(T)) {
    fail(__FILE__, __LINE__, "download: buffer element type " + str(b.element_type()) +
                                 " has width " + std::to_string(width(b.element_type())) +
                                 ", host type has " + std::to_string(sizeof(T)));
  }
  std::vector<T> out(static_cast<size_t>(ir::numel(b.dimensions())));
  // Never pass dst == nullptr (an empty vector's data()): PJRT reads that as a
  // size query that returns no event, and Buffer::to_host would await a null
  // event (see roundtrip_zero_size).
  T dummy{};
  b.to_host(out.empty() ? &dummy : out.data(), out.size() * sizeof(T));
  return out;
}

std::unique_ptr<pj::Executable> compile(const Graph& g) {
  std::string text = g.to_mlir();
  try {
    auto exe = env.client->compile(text);
    CHECK_EQ(exe->num_outputs(), g.num_outputs());
    return exe;
  } catch (const pj::Error& e) {
    throw Failure(std::string(e.what()) + "\n--- module ---\n" + text);
  }
}

std::vector<std::unique_ptr<pj::Buffer>> execute(const pj::Executable& exe,
                                                 const std::vector<const pj::Buffer*>& args) {
  std::vector<PJRT_Buffer*> raw;
  for (const pj::Buffer* b : args) raw.push_back(b->raw());
  auto out = exe.execute(env.device, raw);
  CHECK_EQ(out.size(), exe.num_outputs());
  for (auto& b : out) CHECK(b != nullptr && b->raw() != nullptr);
  return out;
}

// Compiles and runs `g` once.
std::vector<std::unique_ptr<pj::Buffer>> run(const Graph& g, const std::vector<const pj::Buffer*>& args) {
  CHECK_EQ(args.size(), g.num_parameters());
  auto exe = compile(g);
  return execute(*exe, args);  // outputs outlive the executable on purpose
}

uint16_t bf16_bits(float f) {  // round to nearest even, finite inputs only
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float bf16_value(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

Value param(Graph& g, DType d, Shape s) { return g.parameter(Type{d, std::move(s)}); }

// ------------------------------------------------------------------ ir cases

void ir_types() {
  CHECK_EQ(std::string(ir::mlir_name(DType::Pred)), std::string("i1"));
  CHECK_EQ(std::string(ir::mlir_name(DType::U8)), std::string("ui8"));
  CHECK_EQ(std::string(ir::mlir_name(DType::S64)), std::string("i64"));
  CHECK_EQ(std::string(ir::mlir_name(DType::BF16)), std::string("bf16"));
  CHECK_EQ(ir::byte_width(DType::Pred), 1);
  CHECK_EQ(ir::byte_width(DType::BF16), 2);
  CHECK_EQ(ir::byte_width(DType::F32), 4);
  CHECK_EQ(ir::byte_width(DType::U64), 8);
  CHECK(ir::is_floating(DType::BF16) && !ir::is_floating(DType::S32));
  CHECK(ir::is_unsigned(DType::U16) && !ir::is_unsigned(DType::S16) && !ir::is_unsigned(DType::Pred));
  CHECK_EQ(ir::numel({}), int64_t{1});
  CHECK_EQ(ir::numel({2, 0, 3}), int64_t{0});
  CHECK_EQ(ir::numel({2, 3, 4}), int64_t{24});
  CHECK_EQ((Type{DType::F32, {2, 3}}.mlir()), std::string("tensor<2x3xf32>"));
  CHECK_EQ((Type{DType::Pred, {}}.mlir()), std::string("tensor<i1>"));
  CHECK((Type{DType::F32, {2}} == Type{DType::F32, {2}}));
  CHECK(!(Type{DType::F32, {2}} == Type{DType::S32, {2}}));
  // Every dtype maps onto the PJRT element type of the same width.
  for (int d = 0; d <= static_cast<int>(DType::F64); ++d) {
    auto dt = static_cast<DType>(d);
    CHECK_EQ(width(element_type(dt)), static_cast<size_t>(ir::byte_width(dt)));
  }
}

void ir_graph_text() {
  Graph g;
  Value a = param(g, DType::F32, {2, 3});
  Value b = param(g, DType::F32, {2, 3});
  Value s = ir::binary(g, ir::Op::Add, a, b);
  Value z = ir::constant(g, DType::F32, 0.0);
  Value r = ir::reduce(g, s, z, {1}, ir::Combiner::Add);
  g.add_output(r);
  g.add_output(a);  // a parameter as an output
  CHECK_EQ(g.num_parameters(), size_t{2});
  CHECK_EQ(g.num_outputs(), size_t{2});
  CHECK_EQ(g.size(), size_t{5});
  CHECK_EQ(g.type(r), (Type{DType::F32, {2}}));
  std::string t = g.to_mlir();
  CHECK_CONTAINS(t, "func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>) -> (tensor<2xf32>, tensor<2x3xf32>)");
  CHECK_CONTAINS(t, "%2 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>");
  CHECK_CONTAINS(t, "value = dense<0x00000000> : tensor<f32>");
  CHECK_CONTAINS(t, "^bb0(%lhs: tensor<f32>, %rhs: tensor<f32>)");
  CHECK_CONTAINS(t, "{dimensions = array<i64: 1>}");
  CHECK_CONTAINS(t, "\"func.return\"(%4, %arg0) : (tensor<2xf32>, tensor<2x3xf32>) -> ()");
}

Graph key_graph(int64_t start, DType dtype, bool second_output) {
  Graph g;
  Value x = param(g, dtype, {8});
  Value s = ir::slice(g, x, {start}, {start + 4});
  g.add_output(s);
  if (second_output) g.add_output(x);
  return g;
}

void ir_key() {
  std::string k = key_graph(1, DType::F32, false).key();
  CHECK_EQ(key_graph(1, DType::F32, false).key(), k);
  CHECK(key_graph(2, DType::F32, false).key() != k);  // attribute differs
  CHECK(key_graph(1, DType::S32, false).key() != k);  // dtype differs
  CHECK(key_graph(1, DType::F32, true).key() != k);   // outputs differ
  Graph a, b;
  Value xa = param(a, DType::F32, {4});
  Value xb = param(b, DType::F32, {4});
  a.add_output(ir::reduce(a, xa, ir::constant(a, DType::F32, 0), {0}, ir::Combiner::Add));
  b.add_output(ir::reduce(b, xb, ir::constant(b, DType::F32, 0), {0}, ir::Combiner::Max));
  CHECK(a.key() != b.key());  // combiner differs
}

// The in-memory cache's fingerprint follows the key: equal for equal graphs,
// different wherever the keys differ (attributes, dtypes, outputs, combiners,
// loop regions, donation).
void ir_fingerprint() {
  auto same = [](const Graph& a, const Graph& b) { return a.fingerprint() == b.fingerprint(); };
  CHECK(same(key_graph(1, DType::F32, false), key_graph(1, DType::F32, false)));
  CHECK(!same(key_graph(2, DType::F32, false), key_graph(1, DType::F32, false)));
  CHECK(!same(key_graph(1, DType::S32, false), key_graph(1, DType::F32, false)));
  CHECK(!same(key_graph(1, DType::F32, true), key_graph(1, DType::F32, false)));
  auto reduced = [](ir::Combiner c) {
    Graph g;
    Value x = param(g, DType::F32, {4});
    g.add_output(ir::reduce(g, x, ir::constant(g, DType::F32, 0), {0}, c));
    return g;
  };
  CHECK(same(reduced(ir::Combiner::Add), reduced(ir::Combiner::Add)));
  CHECK(!same(reduced(ir::Combiner::Add), reduced(ir::Combiner::Max)));
  auto counted = [](int64_t limit) {
    Graph g;
    Value x = param(g, DType::S32, {});
    auto out = ir::while_loop(
        g, {x},
        [limit](Graph& r, const std::vector<Value>& c) {
          return ir::compare(r, c[0], ir::constant(r, DType::S32, limit), ir::Compare::LT);
        },
        [](Graph& r, const std::vector<Value>& c) {
          return std::vector<Value>{r.add(ir::Op::Add, {c[0], ir::constant(r, DType::S32, 1)}, r.type(c[0]))};
        });
    g.add_output(out[0]);
    return g;
  };
  CHECK(same(counted(3), counted(3)));
  CHECK(!same(counted(3), counted(4)));  // differs only inside the loop's condition
  Graph donated = key_graph(1, DType::F32, true);
  Graph kept = key_graph(1, DType::F32, true);
  CHECK(same(donated, kept));
  donated.alias_output(0, 1);
  CHECK(!same(donated, kept));
  // Words that run into each other: "ab" then "c" is not "a" then "bc".
  auto attributed = [](const char* first, const char* second) {
    Graph g;
    Value x = param(g, DType::F32, {4});
    Value y = g.add(ir::Op::Negate, {x}, g.type(x), first);
    g.add_output(g.add(ir::Op::Negate, {y}, g.type(y), second));
    return g;
  };
  CHECK(!same(attributed("ab", "c"), attributed("a", "bc")));
  CHECK(same(attributed("a long attribute text, longer than a word", "b"),
             attributed("a long attribute text, longer than a word", "b")));
  CHECK(!same(attributed("a long attribute text, longer than a word", "b"),
              attributed("a long attribute text, longer than a wore", "b")));
  // Operand ids are read two to a word: their order and count still tell graphs apart.
  auto selected = [](int a, int b, int c) {
    Graph g;
    Value v[] = {param(g, DType::Pred, {4}), param(g, DType::F32, {4}), param(g, DType::F32, {4})};
    g.add_output(g.add(ir::Op::Select, {v[a], v[b], v[c]}, g.type(v[1])));
    return g;
  };
  CHECK(same(selected(0, 1, 2), selected(0, 1, 2)));
  CHECK(!same(selected(0, 1, 2), selected(0, 2, 1)));
  CHECK(!same(selected(0, 1, 2), selected(0, 1, 1)));
  Graph replicated = key_graph(1, DType::F32, false);
  replicated.set_replicas({0, 1});
  CHECK(!same(replicated, key_graph(1, DType::F32, false)));
}

// Node chunks freed on one thread are reused by the next graphs, on that
// thread or another: every graph keeps its own nodes intact.
void ir_node_chunks_reused() {
  auto build = [](int length, int64_t width) {
    Graph g;
    Value v = param(g, DType::F32, {width});
    for (int i = 0; i < length; ++i) v = g.add(ir::Op::Negate, {v}, g.type(v));
    g.add_output(v);
    return g;
  };
  auto check = [](const Graph& g, int length, int64_t width) {
    CHECK_EQ(g.size(), size_t(length + 1));
    for (int i = 0; i <= length; ++i) CHECK_EQ(g.type(Value{i}), (Type{DType::F32, {width}}));
  };
  Graph kept = build(300, 7);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        Graph a = build(5 + round * 13, t + 1), b = build(round, 100 + t);
        check(a, 5 + round * 13, t + 1);
        check(b, round, 100 + t);
        Graph moved = std::move(a);  // freed on this thread, built here
        check(moved, 5 + round * 13, t + 1);
      }
    });
  for (auto& th : threads) th.join();
  check(kept, 300, 7);
  Graph after = build(300, 9);  // reuses chunks freed by the threads' graphs or ours
  check(after, 300, 9);
  check(kept, 300, 7);
}

// The op vocabulary: each enumerator names one MLIR op, no two alike; the key
// text names ops without their dialect.
void ir_op_names() {
  CHECK_EQ(std::string(ir::mlir_name(ir::Op::Add)), std::string("stablehlo.add"));
  CHECK_EQ(std::string(ir::mlir_name(ir::Op::ErfInv)), std::string("chlo.erf_inv"));
  CHECK_EQ(std::string(ir::mlir_name(ir::Op::Call)), std::string("func.call"));
  CHECK_EQ(std::string(ir::short_name(ir::Op::DotGeneral)), std::string("dot_general"));
  std::set<std::string> names;
  size_t count = 0;
#define COUNT_NAME(name, mlir)                                              \
  names.insert(ir::mlir_name(ir::Op::name));                                \
  CHECK_EQ(std::string(ir::mlir_name(ir::Op::name)), std::string(mlir));    \
  ++count;
  TPU_IR_OPS(COUNT_NAME)
#undef COUNT_NAME
  CHECK_EQ(names.size(), count);
  Graph g;
  Value x = param(g, DType::F32, {2});
  g.add_output(ir::unary(g, ir::Op::Negate, x));
  CHECK_CONTAINS(g.key(), "negate(");
  CHECK_CONTAINS(g.to_mlir(), "\"stablehlo.negate\"(");
}

void ir_errors() {
  Graph g;
  Value x = param(g, DType::F32, {2, 3});
  Value y = param(g, DType::S32, {2, 3});
  std::string m = EXPECT_THROW(std::logic_error, [&] { g.add(ir::Op::Abs, {Value{7}}, g.type(x)); });
  CHECK_CONTAINS(m, "stablehlo.abs");
  EXPECT_THROW(std::logic_error, [&] { g.add(ir::Op::Abs, {Value{}}, g.type(x)); });
  m = EXPECT_THROW(std::invalid_argument, [&] { ir::reshape(g, x, {5}); });
  CHECK_CONTAINS(m, "element count");
  EXPECT_THROW(std::invalid_argument, [&] { ir::binary(g, ir::Op::Add, x, y); });
  EXPECT_THROW(std::invalid_argument, [&] { ir::compare(g, x, y, ir::Compare::LT); });
  EXPECT_THROW(std::invalid_argument, [&] { ir::broadcast_in_dim(g, x, {4, 2, 3}, {1}); });
  EXPECT_THROW(std::invalid_argument, [&] { ir::broadcast_to(g, x, {3}); });
  CHECK_EQ(g.size(), size_t{2});  // nothing was added by the failed builders
}

// ir::Ints keeps up to kInline entries in place and spills to the heap past
// that; every std::vector-like operation the lowerings use must agree with
// std::vector on both sides of the boundary, and moves must hand over the heap.
void ir_ints() {
  using ir::Ints;
  for (size_t n : {size_t{0}, size_t{3}, Ints::kInline, Ints::kInline + 1, size_t{40}}) {
    std::vector<int64_t> ref;
    Ints v;
    for (size_t i = 0; i < n; ++i) {
      ref.push_back(static_cast<int64_t>(i * 7 - 3));
      v.push_back(static_cast<int64_t>(i * 7 - 3));
    }
    CHECK_EQ(v.vec(), ref);
    CHECK_EQ(Ints(ref).vec(), ref);
    Ints copy = v;
    CHECK(copy == v);
    Ints moved = std::move(copy);
    CHECK(moved == v);
    CHECK(copy.empty());
    copy = moved;  // assigning into a moved-from list
    CHECK(copy == v);
    ref.insert(ref.begin(), 99);
    v.insert(v.begin(), 99);
    ref.insert(ref.begin() + 1, {5, 6});
    v.insert(v.begin() + 1, {5, 6});
    CHECK_EQ(v.vec(), ref);
    ref.insert(ref.end(), ref.begin(), ref.begin() + 2);  // a range of the list itself
    v.insert(v.end(), v.begin(), v.begin() + 2);
    CHECK_EQ(v.vec(), ref);
    ref.erase(ref.begin() + 1);
    v.erase(v.begin() + 1);
    ref.erase(ref.end() - 2, ref.end());
    v.erase(v.end() - 2, v.end());
    CHECK_EQ(v.vec(), ref);
    ref.resize(n + 2, 4);
    v.resize(n + 2, 4);
    CHECK_EQ(v.vec(), ref);
    CHECK_EQ(std::vector<int64_t>(v.rbegin(), v.rend()), std::vector<int64_t>(ref.rbegin(), ref.rend()));
    CHECK_EQ(v.at(n + 1), ref.at(n + 1));
    bool threw = false;
    try {
      v.at(n + 2);  // past the end: an exception, as std::vector's at()
    } catch (const std::out_of_range&) {
      threw = true;
    }
    CHECK(threw);
  }
  CHECK((Ints{1, 2} < Ints{1, 3}));
  CHECK((Ints{1, 2} != Ints{1, 2, 0}));
  CHECK_EQ(Ints(3, 9).vec(), (std::vector<int64_t>{9, 9, 9}));
}

// A graph's nodes live in chunks of growing size: types stay valid while
// nodes are added, and copies and moves keep every node.
void ir_node_store() {
  Graph g;
  Value x = param(g, DType::F32, {2, 3});
  const Type& first = g.type(x);
  Value v = x;
  for (int i = 0; i < 1000; ++i) v = g.add(ir::Op::Negate, {v}, g.type(v));
  CHECK_EQ(g.size(), size_t{1001});
  CHECK_EQ(first, (Type{DType::F32, {2, 3}}));  // the reference taken before the growth
  CHECK_EQ(&first, &g.type(x));
  g.add_output(v);
  Graph copy = g;
  CHECK_EQ(copy.key(), g.key());
  Graph moved = std::move(copy);
  CHECK_EQ(moved.key(), g.key());
  CHECK_EQ(moved.to_mlir(), g.to_mlir());
  Graph appended;
  Value argument = appended.parameter(Type{DType::F32, {2, 3}});
  std::vector<Value> mapped;
  appended.append(std::move(moved), std::span<const Value>(&argument, 1), mapped);
  CHECK_EQ(appended.size(), size_t{1001});
  CHECK_EQ(mapped[v.id].id, 1000);
}

// Appending into a reused buffer (the pending graph, once per op) replaces
// its contents: each op's mapping, not the sum of them.
void ir_append_into_buffer() {
  Graph pending;
  Value a = pending.parameter(Type{DType::F32, {4}});
  std::vector<Value> mapped(50, Value{7});  // stale contents from an earlier op
  for (int op = 0; op < 3; ++op) {
    Graph one;
    Value x = param(one, DType::F32, {4});
    Value y = one.add(ir::Op::Negate, {x}, one.type(x));
    pending.append(std::move(one), std::span<const Value>(&a, 1), mapped);
    CHECK_EQ(mapped.size(), size_t{2});
    CHECK_EQ(mapped[x.id].id, a.id);
    CHECK_EQ(mapped[y.id].id, static_cast<int>(pending.size()) - 1);
    CHECK_EQ(one.size(), size_t{0});  // consumed
    a = mapped[y.id];
  }
  CHECK_EQ(pending.size(), size_t{4});
  Graph bad;
  param(bad, DType::F32, {4});
  bool threw = false;
  try {
    pending.append(std::move(bad), std::span<const Value>(), mapped);
  } catch (const std::logic_error&) {
    threw = true;
  }
  CHECK(threw);
}

// Appending a kept graph by copy (an op's remembered graph): the kept graph is
// unchanged, each parameter's value is asked for when the copy reaches it (so
// what the caller adds for it lands there), and the result is the graph the
// caller would have built itself: the same key.
void ir_append_copy() {
  Graph kept;
  Value x = param(kept, DType::F32, {6});
  Value shaped = ir::reshape(kept, x, {2, 3});
  Value y = param(kept, DType::F32, {});
  Value sum = kept.add(ir::Op::Add, {shaped, ir::broadcast_to(kept, y, {2, 3})}, Type{DType::F32, {2, 3}});
  std::string kept_key = kept.key();

  Graph built;  // what a caller building by hand makes: a [2, 3] buffer read flat, then the op
  Value buffer = param(built, DType::F32, {2, 3});
  Value flat = ir::reshape(built, buffer, {6});
  Value scale = param(built, DType::F32, {});
  built.add(ir::Op::Add, {ir::reshape(built, flat, {2, 3}), ir::broadcast_to(built, scale, {2, 3})},
            Type{DType::F32, {2, 3}});

  for (int round = 0; round < 2; ++round) {
    Graph g;
    std::vector<size_t> asked;
    std::vector<Value> mapped;
    g.append_copy(kept, [&](size_t k) {
      asked.push_back(k);
      if (k == 0) return ir::reshape(g, param(g, DType::F32, {2, 3}), {6});  // a storage's flat value
      return param(g, DType::F32, {});
    }, mapped);
    CHECK_EQ(asked, (std::vector<size_t>{0, 1}));
    CHECK_EQ(g.key(), built.key());  // the reshape of the flat value folded into its buffer
    CHECK_EQ(mapped.size(), kept.size());
    CHECK_EQ(g.type(mapped[sum.id]), (Type{DType::F32, {2, 3}}));
    CHECK_EQ(kept.key(), kept_key);  // copied, not consumed: the same again next round
  }
}

// A restarted graph rebuilt the same way is the graph a fresh build makes, and
// keeps the last build's fingerprint only where it is equal to it: every kind
// of difference (a node, an operand, an attribute, a type, the outputs, the
// donations, more or fewer nodes, a loop) gives the fresh build's fingerprint.
void ir_restart() {
  // `variant` picks one difference from the base build (0: none).
  auto build = [](Graph& g, int variant) {
    Value x = param(g, DType::F32, {6});
    Value y = param(g, variant == 1 ? DType::S32 : DType::F32, {6});
    Value a = g.add(ir::Op::Add, {x, variant == 2 ? x : ir::convert(g, y, DType::F32)}, Type{DType::F32, {6}});
    Value s = ir::slice(g, a, {variant == 3 ? 2 : 1}, {5});
    if (variant == 4) s = ir::unary(g, ir::Op::Negate, s);
    if (variant != 5) g.add_output(s);
    g.add_output(a);
    if (variant == 6) g.alias_output(0, 1);
    if (variant == 7) {
      auto out = ir::while_loop(
          g, {ir::constant(g, DType::S32, 0)},
          [](Graph& r, const std::vector<Value>& c) {
            return ir::compare(r, c[0], ir::constant(r, DType::S32, 3), ir::Compare::LT);
          },
          [](Graph& r, const std::vector<Value>& c) {
            return std::vector<Value>{r.add(ir::Op::Add, {c[0], ir::constant(r, DType::S32, 1)}, r.type(c[0]))};
          });
      g.add_output(out[0]);
    }
  };
  for (int kept_variant : {0, 7}) {
    Graph g;
    build(g, kept_variant);
    for (int variant = 0; variant <= 7; ++variant) {
      Graph fresh;
      build(fresh, variant);
      g.restart(g.fingerprint());
      build(g, variant);
      bool equal = fresh.key() == [&] { Graph k; build(k, kept_variant); return k.key(); }();
      CHECK_EQ(g.key(), fresh.key());
      CHECK_EQ(g.size(), fresh.size());
      CHECK_EQ(g.num_parameters(), fresh.num_parameters());
      CHECK_EQ(g.rebuilt_unchanged(), equal && kept_variant != 7);  // a loop is always built anew
      CHECK(g.fingerprint() == fresh.fingerprint());
      CHECK_EQ(g.to_mlir(), fresh.to_mlir());
      Graph copy = g;  // a copy has the rebuilt graph's nodes only
      CHECK_EQ(copy.key(), fresh.key());
      CHECK(!copy.rebuilt_unchanged() || g.size() == 0);
      // Rebuilt back to the kept variant for the next round.
      g.restart(g.fingerprint());
      build(g, kept_variant);
    }
    // Stopping early: a prefix of the kept graph, then other nodes.
    g.restart(g.fingerprint());
    Value x = param(g, DType::F32, {6});
    g.add_output(ir::unary(g, ir::Op::Negate, x));
    Graph fresh;
    fresh.add_output(ir::unary(fresh, ir::Op::Negate, param(fresh, DType::F32, {6})));
    CHECK_EQ(g.key(), fresh.key());
    CHECK(g.fingerprint() == fresh.fingerprint());
    CHECK(!g.rebuilt_unchanged());
  }
  // Appending a kept op graph by copy into a restarted graph.
  Graph op;
  Value p0 = param(op, DType::F32, {4});
  op.add(ir::Op::Multiply, {p0, p0}, Type{DType::F32, {4}});
  Graph g;
  std::vector<Value> mapped;
  for (int round = 0; round < 3; ++round) {
    if (round > 0) g.restart(g.fingerprint());
    Value in = param(g, DType::F32, {4});
    g.append_copy(op, [&](size_t) { return in; }, mapped);
    g.append_copy(op, [&](size_t) { return mapped[1]; }, mapped);
    g.add_output(mapped[1]);
    CHECK_EQ(g.size(), size_t{3});
    CHECK_EQ(g.rebuilt_unchanged(), round > 0);
  }
}

// A remembered op graph appended into a restarted graph: taken whole where the
// kept build appended the same graph (stamp) at the same position with the same
// arguments, built as append_copy builds it otherwise; either way the graph, its
// fingerprint and the values handed back are a fresh build's.
void ir_append_remembered() {
  // The op: reshape of its parameter (folds into a reshaped argument), then a square.
  Graph square;
  {
    Value p = param(square, DType::F32, {2, 3});
    Value flat = ir::reshape(square, p, {6});
    square.add(ir::Op::Multiply, {flat, flat}, Type{DType::F32, {6}});
  }
  Graph negate;
  ir::unary(negate, ir::Op::Negate, param(negate, DType::F32, {6}));
  // variant 0: the kept build; 1: the second copy reads another value; 2: another
  // graph under another stamp first; 3: the first copy's argument is a reshape (folds).
  auto build = [&](Graph& g, int variant, std::vector<Value>& seen) {
    Value a = param(g, DType::F32, {2, 3});
    Value b = param(g, DType::F32, {2, 3});
    std::vector<Value> mapped;
    seen.clear();
    if (variant == 2) {
      g.append_remembered(negate, 2, std::vector<Value>{ir::reshape(g, a, {6})}, mapped);
      seen.insert(seen.end(), mapped.begin(), mapped.end());
    }
    Value first_in = variant == 3 ? ir::reshape(g, param(g, DType::F32, {6}), {2, 3}) : a;
    g.append_remembered(square, 1, std::vector<Value>{first_in}, mapped);
    seen.insert(seen.end(), mapped.begin(), mapped.end());
    Value first = mapped[2];
    g.append_remembered(square, 1, std::vector<Value>{variant == 1 ? a : b}, mapped);
    seen.insert(seen.end(), mapped.begin(), mapped.end());
    g.add_output(first);
    g.add_output(mapped[2]);
  };
  for (int variant = 0; variant <= 3; ++variant) {
    Graph g;
    std::vector<Value> seen, fresh_seen;
    build(g, 0, seen);
    for (int round = 0; round < 2; ++round) {  // round 1: kept from a rebuild that took copies whole
      g.restart(g.fingerprint());
      build(g, variant, seen);
      Graph fresh;
      build(fresh, variant, fresh_seen);
      CHECK_EQ(g.key(), fresh.key());
      CHECK(g.fingerprint() == fresh.fingerprint());
      CHECK_EQ(g.to_mlir(), fresh.to_mlir());
      CHECK_EQ(g.rebuilt_unchanged(), variant == 0 || round == 1);
      CHECK_EQ(seen.size(), fresh_seen.size());
      for (size_t i = 0; i < seen.size(); ++i) CHECK_EQ(seen[i].id, fresh_seen[i].id);
    }
  }
  Graph g;
  std::vector<Value> mapped;
  bool threw = false;
  try {
    g.append_remembered(square, 1, std::vector<Value>{}, mapped);
  } catch (const std::logic_error&) {
    threw = true;
  }
  CHECK(threw);
}

// A call of an external function: results through result nodes, the callee's
// definitions emitted once after @main however often it is called, its name in the key.
void ir_call_external() {
  auto callee = std::make_shared<ir::Callee>();
  callee->name = "ext_f";
  callee->text = "  func.func private @ext_f(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<i32>) { }\n";
  callee->results = {Type{DType::F32, {2}}, Type{DType::S32, {}}};
  Graph g;
  Value x = param(g, DType::F32, {2});
  std::vector<Value> first = g.add_call(callee, {x});
  std::vector<Value> second = g.add_call(callee, {first[0]});
  CHECK_EQ(first.size(), size_t{2});
  CHECK(g.type(first[1]) == (Type{DType::S32, {}}));
  g.add_output(second[0]);
  g.add_output(first[1]);
  std::string text = g.to_mlir();
  CHECK(text.find("\"func.call\"(%arg0) {callee = @ext_f} : (tensor<2xf32>) -> (tensor<2xf32>, tensor<i32>)") !=
        std::string::npos);
  CHECK(text.find("%1#0") != std::string::npos && text.find("%1#1") != std::string::npos);
  size_t definition = text.find("func.func private @ext_f");
  CHECK(definition != std::string::npos && definition > text.find("func.func public @main"));
  CHECK(text.find("func.func private @ext_f", definition + 1) == std::string::npos);  // once
  CHECK(g.key().find("ext_f") != std::string::npos);
  Graph empty;
  bool threw = false;
  try {
    empty.add_call(std::make_shared<ir::Callee>(), {});
  } catch (const std::logic_error&) {
    threw = true;
  }
  CHECK(threw);
}

void ir_identity_folds() {
  Graph g;
  Value x = param(g, DType::F32, {2, 3});
  CHECK_EQ(ir::convert(g, x, DType::F32).id, x.id);
  CHECK_EQ(ir::reshape(g, x, {2, 3}).id, x.id);
  CHECK_EQ(ir::transpose(g, x, {0, 1}).id, x.id);
  CHECK_EQ(ir::slice(g, x, {0, 0}, {2, 3}).id, x.id);
  CHECK_EQ(ir::broadcast_in_dim(g, x, {2, 3}, {0, 1}).id, x.id);
  CHECK_EQ(ir::broadcast_to(g, x, {2, 3}).id, x.id);
  CHECK_EQ(g.size(), size_t{1});
  CHECK_EQ(g.type(ir::transpose(g, x, {1, 0})), (Type{DType::F32, {3, 2}}));
  CHECK_EQ(g.type(ir::slice(g, x, {0, 1}, {2, 3}, {1, 2})), (Type{DType::F32, {2, 1}}));
  CHECK_EQ(g.type(ir::broadcast_to(g, x, {4, 2, 3})), (Type{DType::F32, {4, 2, 3}}));
}

// A reshape of a reshape is one reshape of the source (or the source), when built
// and when an op's graph is appended onto a storage's flat value; a cleared graph
// is empty as a new one, and builds the same program again.
void ir_reshape_folds() {
  Graph g;
  Value x = param(g, DType::F32, {2, 3});
  Value flat = ir::reshape(g, x, {6});
  CHECK_EQ(ir::reshape(g, flat, {2, 3}).id, x.id);
  Value r = ir::reshape(g, flat, {3, 2});
  CHECK_EQ(g.reshaped_from(r).id, x.id);
  size_t before = g.size();
  Graph op;
  Value p = param(op, DType::F32, {6});
  Value shaped = ir::reshape(op, p, {2, 3});
  Value negated = op.add(ir::Op::Negate, {shaped}, op.type(shaped));
  std::vector<Value> mapped;
  g.append(std::move(op), std::span<const Value>(&flat, 1), mapped);
  CHECK_EQ(mapped[shaped.id].id, x.id);  // no node: the flat value's source
  CHECK_EQ(g.size(), before + 1);
  g.add_output(mapped[negated.id]);
  std::string key = g.key();
  g.clear();
  CHECK_EQ(g.size(), size_t{0});
  CHECK_EQ(g.num_parameters(), size_t{0});
  CHECK_EQ(g.num_outputs(), size_t{0});
  Value y = param(g, DType::F32, {2, 3});
  Value yflat = ir::reshape(g, y, {6});
  CHECK_EQ(g.type(ir::reshape(g, yflat, {3, 2})), (Type{DType::F32, {3, 2}}));
  Graph op2;
  Value p2 = param(op2, DType::F32, {6});
  Value n2 = op2.add(ir::Op::Negate, {ir::reshape(op2, p2, {2, 3})}, Type{DType::F32, {2, 3}});
  g.append(std::move(op2), std::span<const Value>(&yflat, 1), mapped);
  g.add_output(mapped[n2.id]);
  CHECK_EQ(g.key(), key);
}

// ------------------------------------------------------------------ plugin / client cases

void plugin_api_version() {
  CHECK_EQ(env.plugin->api_major(), PJRT_API_MAJOR);
  CHECK(env.plugin->api_minor() > 0);
  CHECK(env.plugin->api_minor() < 10000);
  CHECK(env.plugin->api() != nullptr);
  CHECK_EQ(env.plugin->path(), env.plugin_path);
  CHECK(env.plugin->has_entry(offsetof(PJRT_Api, PJRT_Client_Create)));
  CHECK(env.plugin->has_entry(offsetof(PJRT_Api, PJRT_LoadedExecutable_Execute)));
  CHECK(!env.plugin->has_entry(env.plugin->api()->struct_size));
  CHECK(!env.plugin->has_entry(size_t{1} << 20));
  std::printf("  (plugin PJRT API %d.%d, header %d.%d)\n", env.plugin->api_major(), env.plugin->api_minor(),
              PJRT_API_MAJOR, PJRT_API_MINOR);
}

void plugin_load_twice() {
  auto a = pj::Plugin::load(env.plugin_path);
  auto b = pj::Plugin::load(env.plugin_path);
  CHECK(a.get() == b.get());
  CHECK(a.get() == env.plugin.get());
  CHECK(a->api() == env.plugin->api());
}

size_t thread_count() {
  size_t n = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
    closedir(dir);
  }
  return n;
}

void client_info() {
  const pj::Client& c = *env.client;
  CHECK(c.plugin().get() == env.plugin.get());
  CHECK_EQ(c.platform_name(), std::string("cpu"));
  CHECK(!c.platform_version().empty());
  CHECK(!c.devices().empty());
  for (size_t i = 0; i < c.devices().size(); ++i) {
    CHECK(c.devices()[i].device != nullptr);
    CHECK(!c.devices()[i].kind.empty());
    for (size_t j = 0; j < i; ++j) CHECK(c.devices()[i].id != c.devices()[j].id);
    // Memory statistics are optional in PJRT: absent or sane, never an exception.
    if (auto stats = c.memory_stats(c.devices()[i].device)) {
      CHECK(stats->bytes_in_use >= 0);
      CHECK(stats->bytes_limit == -1 || stats->bytes_limit >= stats->bytes_in_use);
      std::printf("  (device %zu memory: %lld bytes in use, limit %lld)\n", i,
                  static_cast<long long>(stats->bytes_in_use), static_cast<long long>(stats->bytes_limit));
    } else if (i == 0) {
      std::printf("  (the plugin reports no memory statistics)\n");
    }
  }
  // DMA registration of host memory is optional too: where the plugin maps it,
  // it unmaps; where it does not (XLA:CPU), the answer is false, asked twice
  // (the second time without calling the plugin), with no error object leaked.
  {
    std::vector<char> host(1 << 16);
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool mapped = c.dma_map(host.data(), host.size());
      if (mapped) c.dma_unmap(host.data());
      if (c.platform_name() == "cpu") CHECK(!mapped);
      if (attempt == 0) std::printf("  (DMA mapping of host memory: %s)\n", mapped ? "yes" : "not offered");
    }
  }

  // A second client on the same plugin is independent and destroys cleanly.
  // (LeakSanitizer cannot see a client that is never destroyed: its worker
  // threads keep it reachable. Its threads going away shows that it was.)
  size_t threads_before = thread_count();
  auto other = pj::Client::create(env.plugin);
  CHECK_EQ(other->platform_name(), c.platform_name());
  CHECK_EQ(other->devices().size(), c.devices().size());
  size_t threads_with_two = thread_count();
  other.reset();
  size_t threads_after = thread_count();
  std::printf("  (threads: %zu with one client, %zu with two, %zu after destroying one)\n", threads_before,
              threads_with_two, threads_after);
  CHECK(threads_with_two > threads_before);
  CHECK(threads_after <= threads_before);
}

template <typename T>
void check_roundtrip(const std::vector<T>& data, DType dtype, const Shape& dims) {
  auto b = upload(data, dtype, dims);
  CHECK_EQ(b->element_type(), element_type(dtype));
  CHECK_EQ(b->dimensions(), dims);
  CHECK_EQ(b->on_device_size(), data.size() * sizeof(T));
  b->ready_event()->await();
  CHECK(b->ready_event()->is_ready());
  std::vector<T> back(data.size(), T{});
  auto ev = b->to_host_async(back.data(), back.size() * sizeof(T));
  ev->await();
  CHECK(ev->is_ready());
  CHECK_EQ(back, data);
  CHECK_EQ(download<T>(*b), data);  // a second download of the same buffer
}

void roundtrip_f32() {
  std::vector<float> v{0.0f, -0.0f, 1.5f, -2.25f, 3.4028235e38f, 1e-45f,
                       std::numeric_limits<float>::infinity(), 6.0f};
  check_roundtrip(v, DType::F32, {2, 4});
  check_roundtrip(std::vector<float>{42.5f}, DType::F32, {});  // rank 0
  // NaN payload survives bit-exactly.
  std::vector<uint32_t> nan_bits{0x7fc00001u, 0xffc12345u};
  std::vector<float> nans(2);
  std::memcpy(nans.data(), nan_bits.data(), 8);
  auto b = upload(nans, DType::F32, {2});
  auto back = download<uint32_t>(*b);
  CHECK_EQ(back, nan_bits);
}

void roundtrip_bf16() {
  std::vector<uint16_t> v{bf16_bits(1.0f), bf16_bits(-2.5f), bf16_bits(3.140625f), 0x7f80, 0x0001, 0x8000};
  check_roundtrip(v, DType::BF16, {3, 2});
  CHECK_EQ(bf16_value(v[2]), 3.140625f);
}

void roundtrip_i64() {
  std::vector<int64_t> v{0, -1, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                         int64_t{1} << 40, -123456789012345};
  check_roundtrip(v, DType::S64, {6});
  check_roundtrip(std::vector<int64_t>(1000, 7), DType::S64, {10, 10, 10});
}

void roundtrip_pred() {
  std::vector<uint8_t> v{1, 0, 0, 1, 1};
  check_roundtrip(v, DType::Pred, {5});
  CHECK_EQ(upload(v, DType::Pred, {5})->on_device_size(), size_t{5});  // one byte per element
}

void roundtrip_zero_size() {
  std::vector<float> empty;
  auto b = upload(empty, DType::F32, {0, 3});
  CHECK_EQ(b->dimensions(), (Shape{0, 3}));
  CHECK_EQ(b->on_device_size(), size_t{0});
  // Copies out through a non-null pointer. (to_host(nullptr, 0) crashes: the
  // plugin treats a null dst as a size query and returns no event, which
  // Event::await then dereferences.)
  CHECK_EQ(download<float>(*b).size(), size_t{0});
}

// ------------------------------------------------------------------ op cases

void op_broadcast_in_dim() {
  Graph g;
  Value x = param(g, DType::F32, {3});
  g.add_output(ir::broadcast_in_dim(g, x, {2, 3}, {1}));
  g.add_output(ir::broadcast_in_dim(g, x, {3, 2}, {0}));
  g.add_output(ir::full(g, DType::F32, 2.5, {2, 2}));
  g.add_output(ir::broadcast_to(g, x, {2, 1, 3}));
  auto in = upload(std::vector<float>{1, 2, 3}, DType::F32, {3});
  auto out = run(g, {in.get()});
  CHECK_EQ(out[0]->dimensions(), (Shape{2, 3}));
  CHECK_CLOSE(download<float>(*out[0]), {1, 2, 3, 1, 2, 3});
  CHECK_EQ(out[1]->dimensions(), (Shape{3, 2}));
  CHECK_CLOSE(download<float>(*out[1]), {1, 1, 2, 2, 3, 3});
  CHECK_CLOSE(download<float>(*out[2]), {2.5, 2.5, 2.5, 2.5});
  CHECK_EQ(out[3]->dimensions(), (Shape{2, 1, 3}));
  CHECK_CLOSE(download<float>(*out[3]), {1, 2, 3, 1, 2, 3});
}

void op_elementwise() {
  Graph g;
  Value a = param(g, DType::F32, {2, 2});
  Value b = param(g, DType::F32, {2, 2});
  Value i = param(g, DType::S64, {3});
  Value j = param(g, DType::S64, {3});
  g.add_output(ir::binary(g, ir::Op::Add, a, b));
  g.add_output(ir::binary(g, ir::Op::Multiply, a, b));
  g.add_output(ir::unary(g, ir::Op::Negate, a));
  g.add_output(ir::binary(g, ir::Op::Add, i, j));
  auto ba = upload(std::vector<float>{1, 2, 3, 4}, DType::F32, {2, 2});
  auto bb = upload(std::vector<float>{0.5, -2, 10, 0.25}, DType::F32, {2, 2});
  auto bi = upload(std::vector<int64_t>{1, -5, int64_t{1} << 40}, DType::S64, {3});
  auto bj = upload(std::vector<int64_t>{2, 3, 1}, DType::S64, {3});
  auto out = run(g, {ba.get(), bb.get(), bi.get(), bj.get()});
  CHECK_CLOSE(download<float>(*out[0]), {1.5, 0, 13, 4.25});
  CHECK_CLOSE(download<float>(*out[1]), {0.5, -4, 30, 1});
  CHECK_CLOSE(download<float>(*out[2]), {-1, -2, -3, -4});
  CHECK_EQ(download<int64_t>(*out[3]), (std::vector<int64_t>{3, -2, (int64_t{1} << 40) + 1}));
}

void op_reduce() {
  Graph g;
  Value x = param(g, DType::F32, {2, 3});
  Value n = param(g, DType::S64, {4});
  Value zero = ir::constant(g, DType::F32, 0.0);
  g.add_output(ir::reduce(g, x, zero, {1}, ir::Combiner::Add));
  g.add_output(ir::reduce(g, x, zero, {0, 1}, ir::Combiner::Add));
  // Several reductions in one function: each region reuses the same names.
  g.add_output(ir::reduce(g, x, ir::constant(g, DType::F32, -INFINITY), {0}, ir::Combiner::Max));
  g.add_output(ir::reduce(g, n, ir::constant_int(g, DType::S64, 0), {0}, ir::Combiner::Add));
  g.add_output(ir::reduce(g, n, ir::constant_int(g, DType::S64, 1), {0}, ir::Combiner::Mul));
  auto bx = upload(std::vector<float>{1, 2, 3, 4, -5, 6.5}, DType::F32, {2, 3});
  auto bn = upload(std::vector<int64_t>{3, -2, 5, 1000000}, DType::S64, {4});
  auto out = run(g, {bx.get(), bn.get()});
  CHECK_EQ(out[0]->dimensions(), (Shape{2}));
  CHECK_CLOSE(download<float>(*out[0]), {6, 5.5});
  CHECK_EQ(out[1]->dimensions(), (Shape{}));
  CHECK_CLOSE(download<float>(*out[1]), {11.5});
  CHECK_CLOSE(download<float>(*out[2]), {4, 2, 6.5});
  CHECK_EQ(download<int64_t>(*out[3]), (std::vector<int64_t>{1000006}));
  CHECK_EQ(download<int64_t>(*out[4]), (std::vector<int64_t>{-30000000}));
}

void op_while_loop() {
  // Sum of 0..9 and a running product over a vector, carried together; and a
  // reduce inside a nested loop, so region names must not clash.
  Graph g;
  Value x = param(g, DType::F32, {3});
  auto out = ir::fori_loop(g, 10, {ir::constant(g, DType::F32, 0), x},
                           [](Graph& r, Value i, const std::vector<Value>& c) {
                             Value fi = ir::convert(r, i, DType::F32);
                             Value two = ir::full(r, DType::F32, 2.0, {3});
                             return std::vector<Value>{ir::binary(r, ir::Op::Add, c[0], fi),
                                                       ir::binary(r, ir::Op::Multiply, c[1], two)};
                           });
  g.add_output(out[0]);
  g.add_output(out[1]);
  auto nested = ir::fori_loop(g, 3, {ir::constant(g, DType::F32, 0), x},
                              [](Graph& r, Value, const std::vector<Value>& c) {
                                auto inner = ir::fori_loop(r, 2, {c[0], c[1]},
                                                           [](Graph& q, Value, const std::vector<Value>& d) {
                                                             Value s = ir::reduce(q, d[1], ir::constant(q, DType::F32, 0),
                                                                                  {0}, ir::Combiner::Add);
                                                             return std::vector<Value>{
                                                                 ir::binary(q, ir::Op::Add, d[0], s), d[1]};
                                                           });
                                return inner;
                              });
  g.add_output(nested[0]);
  // while_loop with a data-dependent trip count: halve until below 1.
  auto halved = ir::while_loop(
      g, {ir::constant(g, DType::F32, 100)},
      [](Graph& r, const std::vector<Value>& c) {
        return ir::compare(r, c[0], ir::constant(r, DType::F32, 1), ir::Compare::GE);
      },
      [](Graph& r, const std::vector<Value>& c) {
        return std::vector<Value>{ir::binary(r, ir::Op::Multiply, c[0], ir::constant(r, DType::F32, 0.5))};
      });
  g.add_output(halved[0]);
  auto bx = upload(std::vector<float>{1, -2, 0.5}, DType::F32, {3});
  auto res = run(g, {bx.get()});
  CHECK_CLOSE(download<float>(*res[0]), {45});
  CHECK_CLOSE(download<float>(*res[1]), {1024, -2048, 512});
  CHECK_CLOSE(download<float>(*res[2]), {-3});  // 3 * 2 * (1 - 2 + 0.5)
  CHECK_CLOSE(download<float>(*res[3]), {0.78125});
  // Structural keys see the regions: a different trip count is another program.
  Graph a, b;
  Value xa = param(a, DType::F32, {}), xb = param(b, DType::F32, {});
  auto body = [](Graph& r, Value, const std::vector<Value>& c) { return c; };
  a.add_output(ir::fori_loop(a, 2, {xa}, body)[0]);
  b.add_output(ir::fori_loop(b, 3, {xb}, body)[0]);
  CHECK(a.key() != b.key());
}

void op_dot_general() {
  Graph g;
  Value a = param(g, DType::F32, {2, 3});
  Value b = param(g, DType::F32, {3, 2});
  Value p = param(g, DType::F32, {2, 2, 3});
  Value q = param(g, DType::F32, {2, 3, 1});
  g.add_output(ir::dot_general(g, a, b, {}, {}, {1}, {0}, DType::F32));        // a @ b
  g.add_output(ir::dot_general(g, a, a, {}, {}, {1}, {1}, DType::F32));        // a @ a^T
  g.add_output(ir::dot_general(g, p, q, {0}, {0}, {2}, {1}, DType::F32));      // batched
  CHECK_EQ(g.type(Value{static_cast<int>(g.size()) - 1}), (Type{DType::F32, {2, 2, 1}}));
  std::vector<float> va{1, 2, 3, 4, 5, 6}, vb{7, 8, 9, 10, 11, 12};
  std::vector<float> vp{1, 2, 3, 4, 5, 6, -1, 0, 1, 2, 0.5, 0}, vq{1, 1, 1, 2, 0, -1};
  auto ba = upload(va, DType::F32, {2, 3});
  auto bb = upload(vb, DType::F32, {3, 2});
  auto bp = upload(vp, DType::F32, {2, 2, 3});
  auto bq = upload(vq, DType::F32, {2, 3, 1});
  auto out = run(g, {ba.get(), bb.get(), bp.get(), bq.get()});
  CHECK_EQ(out[0]->dimensions(), (Shape{2, 2}));
  CHECK_CLOSE(download<float>(*out[0]), {58, 64, 139, 154});
  CHECK_CLOSE(download<float>(*out[1]), {14, 32, 32, 77});
  // batch 0: [[1,2,3],[4,5,6]] @ [1,1,1]^T = [6, 15]; batch 1: [[-1,0,1],[2,.5,0]] @ [2,0,-1]^T = [-3, 4]
  CHECK_CLOSE(download<float>(*out[2]), {6, 15, -3, 4});
}

void op_transpose() {
  Graph g;
  Value x = param(g, DType::S32, {2, 3, 4});
  g.add_output(ir::transpose(g, x, {2, 0, 1}));
  std::vector<int32_t> v(24);
  for (int i = 0; i < 24; ++i) v[i] = i;
  auto bx = upload(v, DType::S32, {2, 3, 4});
  auto out = run(g, {bx.get()});
  CHECK_EQ(out[0]->dimensions(), (Shape{4, 2, 3}));
  std::vector<int32_t> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(i * 12 + j * 4 + k);
  CHECK_EQ(download<int32_t>(*out[0]), want);
}

void op_slice() {
  Graph g;
  Value x = param(g, DType::F32, {10});
  Value m = param(g, DType::F32, {3, 4});
  g.add_output(ir::slice(g, x, {1}, {8}, {3}));
  g.add_output(ir::slice(g, m, {1, 1}, {3, 3}));
  std::vector<float> vx(10), vm(12);
  for (int i = 0; i < 10; ++i) vx[i] = static_cast<float>(i * 10);
  for (int i = 0; i < 12; ++i) vm[i] = static_cast<float>(i);
  auto bx = upload(vx, DType::F32, {10});
  auto bm = upload(vm, DType::F32, {3, 4});
  auto out = run(g, {bx.get(), bm.get()});
  CHECK_EQ(out[0]->dimensions(), (Shape{3}));
  CHECK_CLOSE(download<float>(*out[0]), {10, 40, 70});
  CHECK_EQ(out[1]->dimensions(), (Shape{2, 2}));
  CHECK_CLOSE(download<float>(*out[1]), {5, 6, 9, 10});
}

void op_dynamic_slice() {
  Graph g;
  Value x = param(g, DType::F32, {8});
  Value off = param(g, DType::S64, {});
  Value m = param(g, DType::S32, {4, 4});
  Value r = param(g, DType::S32, {});
  Value c = param(g, DType::S32, {});
  g.add_output(ir::dynamic_slice(g, x, {off}, {3}));
  g.add_output(ir::dynamic_slice(g, m, {r, c}, {2, 2}));
  auto exe = compile(g);
  std::vector<float> vx{0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<int32_t> vm(16);
  for (int i = 0; i < 16; ++i) vm[i] = i;
  auto bx = upload(vx, DType::F32, {8});
  auto bm = upload(vm, DType::S32, {4, 4});
  struct Probe { int64_t off; std::vector<float> want; int32_t r, c; std::vector<int32_t> want_m; };
  // Start indices are clamped into range, as StableHLO specifies.
  std::vector<Probe> probes{{2, {2, 3, 4}, 1, 2, {6, 7, 10, 11}},
                            {0, {0, 1, 2}, 0, 0, {0, 1, 4, 5}},
                            {7, {5, 6, 7}, 3, 3, {10, 11, 14, 15}},
                            {-4, {0, 1, 2}, -1, 1, {1, 2, 5, 6}}};
  for (const Probe& p : probes) {
    auto boff = upload(std::vector<int64_t>{p.off}, DType::S64, {});
    auto br = upload(std::vector<int32_t>{p.r}, DType::S32, {});
    auto bc = upload(std::vector<int32_t>{p.c}, DType::S32, {});
    auto out = execute(*exe, {bx.get(), boff.get(), bm.get(), br.get(), bc.get()});
    CHECK_CLOSE(download<float>(*out[0]), p.want);
    CHECK_EQ(download<int32_t>(*out[1]), p.want_m);
  }
}

void op_dynamic_update_slice() {
  Graph g;
  Value x = param(g, DType::F32, {6});
  Value u = param(g, DType::F32, {2});
  Value off = param(g, DType::S64, {});
  g.add_output(ir::dynamic_update_slice(g, x, u, {off}));
  auto exe = compile(g);
  auto bx = upload(std::vector<float>{0, 1, 2, 3, 4, 5}, DType::F32, {6});
  auto bu = upload(std::vector<float>{-1, -2}, DType::F32, {2});
  for (auto [o, want] : std::vector<std::pair<int64_t, std::vector<float>>>{
           {3, {0, 1, 2, -1, -2, 5}}, {0, {-1, -2, 2, 3, 4, 5}}, {5, {0, 1, 2, 3, -1, -2}}}) {
    auto boff = upload(std::vector<int64_t>{o}, DType::S64, {});
    auto out = execute(*exe, {bx.get(), bu.get(), boff.get()});
    CHECK_EQ(out[0]->dimensions(), (Shape{6}));
    CHECK_CLOSE(download<float>(*out[0]), want);
  }
  CHECK_CLOSE(download<float>(*bx), {0, 1, 2, 3, 4, 5});  // the input is not modified
}

void op_pad() {
  Graph g;
  Value x = param(g, DType::F32, {2, 2});
  Value y = param(g, DType::F32, {4});
  Value pv = ir::constant(g, DType::F32, -1.0);
  g.add_output(ir::pad(g, x, pv, {1, 0}, {0, 2}));
  g.add_output(ir::pad(g, y, pv, {-1}, {2}));  // negative padding crops
  auto bx = upload(std::vector<float>{1, 2, 3, 4}, DType::F32, {2, 2});
  auto by = upload(std::vector<float>{5, 6, 7, 8}, DType::F32, {4});
  auto out = run(g, {bx.get(), by.get()});
  CHECK_EQ(out[0]->dimensions(), (Shape{3, 4}));
  CHECK_CLOSE(download<float>(*out[0]), {-1, -1, -1, -1, 1, 2, -1, -1, 3, 4, -1, -1});
  CHECK_EQ(out[1]->dimensions(), (Shape{5}));
  CHECK_CLOSE(download<float>(*out[1]), {6, 7, 8, -1, -1});
}

void op_gather_1d() {
  Graph g;
  Value x = param(g, DType::F32, {5});
  Value i2 = param(g, DType::S32, {2, 2});
  Value i1 = param(g, DType::S64, {3});
  g.add_output(ir::gather_1d(g, x, i2));
  g.add_output(ir::gather_1d(g, x, i1));
  auto bx = upload(std::vector<float>{10, 11, 12, 13, 14}, DType::F32, {5});
  auto b2 = upload(std::vector<int32_t>{4, 0, 2, 2}, DType::S32, {2, 2});
  auto b1 = upload(std::vector<int64_t>{1, 3, 1}, DType::S64, {3});
  auto out = run(g, {bx.get(), b2.get(), b1.get()});
  CHECK_EQ(out[0]->dimensions(), (Shape{2, 2}));
  CHECK_CLOSE(download<float>(*out[0]), {14, 10, 12, 12});
  CHECK_EQ(out[1]->dimensions(), (Shape{3}));
  CHECK_CLOSE(download<float>(*out[1]), {11, 13, 11});
}

void op_scatter_1d() {
  Graph g;
  Value x = param(g, DType::F32, {5});
  Value idx = param(g, DType::S64, {3});
  Value upd = param(g, DType::F32, {3});
  Value idx2 = param(g, DType::S32, {2, 2});
  Value upd2 = param(g, DType::F32, {2, 2});
  g.add_output(ir::scatter_1d(g, x, idx, upd));
  g.add_output(ir::scatter_1d(g, x, idx2, upd2));
  auto bx = upload(std::vector<float>{0, 1, 2, 3, 4}, DType::F32, {5});
  auto bi = upload(std::vector<int64_t>{4, 0, 2}, DType::S64, {3});
  auto bu = upload(std::vector<float>{10, 20, 30}, DType::F32, {3});
  auto bi2 = upload(std::vector<int32_t>{1, 3, 0, 4}, DType::S32, {2, 2});
  auto bu2 = upload(std::vector<float>{-1, -3, -0.5, -4}, DType::F32, {2, 2});
  auto out = run(g, {bx.get(), bi.get(), bu.get(), bi2.get(), bu2.get()});
  CHECK_CLOSE(download<float>(*out[0]), {20, 1, 30, 3, 10});
  CHECK_CLOSE(download<float>(*out[1]), {-0.5, -1, 2, -3, -4});
}

void op_compare_select() {
  Graph g;
  Value a = param(g, DType::F32, {4});
  Value b = param(g, DType::F32, {4});
  Value si = param(g, DType::S32, {3});
  Value sj = param(g, DType::S32, {3});
  Value ui = param(g, DType::U32, {3});
  Value uj = param(g, DType::U32, {3});
  Value gt = ir::compare(g, a, b, ir::Compare::GT);
  g.add_output(ir::select(g, gt, a, b));  // elementwise max
  g.add_output(gt);
  g.add_output(ir::compare(g, a, b, ir::Compare::EQ));
  g.add_output(ir::compare(g, si, sj, ir::Compare::LT));  // signed
  g.add_output(ir::compare(g, ui, uj, ir::Compare::LT));  // unsigned
  g.add_output(ir::compare(g, a, b, ir::Compare::NE));
  auto ba = upload(std::vector<float>{1, 5, -2, NAN}, DType::F32, {4});
  auto bb = upload(std::vector<float>{3, 5, -4, 0}, DType::F32, {4});
  auto bsi = upload(std::vector<int32_t>{-1, 2, 0}, DType::S32, {3});
  auto bsj = upload(std::vector<int32_t>{1, 2, -7}, DType::S32, {3});
  auto bui = upload(std::vector<uint32_t>{0xffffffffu, 1, 0}, DType::U32, {3});
  auto buj = upload(std::vector<uint32_t>{1, 2, 0}, DType::U32, {3});
  auto out = run(g, {ba.get(), bb.get(), bsi.get(), bsj.get(), bui.get(), buj.get()});
  CHECK_CLOSE(download<float>(*out[0]), {3, 5, -2, 0});  // NaN > 0 is false -> picks b
  CHECK_EQ(out[1]->element_type(), ElementType::Pred);
  CHECK_EQ(download<uint8_t>(*out[1]), (std::vector<uint8_t>{0, 0, 1, 0}));
  CHECK_EQ(download<uint8_t>(*out[2]), (std::vector<uint8_t>{0, 1, 0, 0}));
  CHECK_EQ(download<uint8_t>(*out[3]), (std::vector<uint8_t>{1, 0, 0}));
  CHECK_EQ(download<uint8_t>(*out[4]), (std::vector<uint8_t>{0, 1, 0}));
  CHECK_EQ(download<uint8_t>(*out[5]), (std::vector<uint8_t>{1, 0, 1, 1}));
}

void op_convert() {
  Graph g;
  Value f = param(g, DType::F32, {4});
  Value s = param(g, DType::S32, {3});
  Value p = param(g, DType::Pred, {3});
  g.add_output(ir::convert(g, f, DType::S32));
  g.add_output(ir::convert(g, s, DType::F32));
  g.add_output(ir::convert(g, f, DType::BF16));
  g.add_output(ir::convert(g, p, DType::F32));
  g.add_output(ir::convert(g, s, DType::S64));
  g.add_output(ir::convert(g, f, DType::Pred));
  auto bf = upload(std::vector<float>{1.7f, -1.7f, 2.5f, 1.00390625f}, DType::F32, {4});
  auto bs = upload(std::vector<int32_t>{-3, 0, 16777217}, DType::S32, {3});
  auto bp = upload(std::vector<uint8_t>{1, 0, 1}, DType::Pred, {3});
  auto out = run(g, {bf.get(), bs.get(), bp.get()});
  CHECK_EQ(download<int32_t>(*out[0]), (std::vector<int32_t>{1, -1, 2, 1}));  // truncation
  CHECK_CLOSE(download<float>(*out[1]), {-3, 0, 16777216});                  // rounds to f32
  CHECK_EQ(out[2]->element_type(), ElementType::BF16);
  // 1.00390625 = 1 + 2^-8 is halfway between two bf16 values: ties to even -> 1.0
  CHECK_EQ(download<uint16_t>(*out[2]),
           (std::vector<uint16_t>{bf16_bits(1.7f), bf16_bits(-1.7f), bf16_bits(2.5f), bf16_bits(1.0f)}));
  CHECK_CLOSE(download<float>(*out[3]), {1, 0, 1});
  CHECK_EQ(download<int64_t>(*out[4]), (std::vector<int64_t>{-3, 0, 16777217}));
  CHECK_EQ(download<uint8_t>(*out[5]), (std::vector<uint8_t>{1, 1, 1, 1}));
}

void op_iota() {
  Graph g;
  g.add_output(ir::iota(g, DType::S32, {2, 3}, 1));
  g.add_output(ir::iota(g, DType::F32, {2, 3}, 0));
  g.add_output(ir::iota(g, DType::S64, {5}, 0));
  auto out = run(g, {});
  CHECK_EQ(download<int32_t>(*out[0]), (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  CHECK_CLOSE(download<float>(*out[1]), {0, 0, 0, 1, 1, 1});
  CHECK_EQ(download<int64_t>(*out[2]), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

void op_bitcast_convert() {
  Graph g;
  Value f = param(g, DType::F32, {3});
  Value u = param(g, DType::U32, {2});
  g.add_output(ir::bitcast_convert(g, f, DType::S32, {3}));
  g.add_output(ir::bitcast_convert(g, u, DType::F32, {2}));
  auto bf = upload(std::vector<float>{1.0f, -2.0f, 0.0f}, DType::F32, {3});
  auto bu = upload(std::vector<uint32_t>{0x40490fdbu, 0x7f800000u}, DType::U32, {2});
  auto out = run(g, {bf.get(), bu.get()});
  CHECK_EQ(download<int32_t>(*out[0]), (std::vector<int32_t>{0x3f800000, static_cast<int32_t>(0xc0000000u), 0}));
  CHECK_CLOSE(download<float>(*out[1]), {3.14159274f, INFINITY});
}

void op_constants() {
  // Constants are rendered as exact hex bit patterns; check what XLA parsed.
  Graph g;
  g.add_output(ir::constant(g, DType::F32, 0.1));
  g.add_output(ir::constant(g, DType::F64, 0.1));
  g.add_output(ir::constant(g, DType::BF16, 1.0 / 3.0));
  g.add_output(ir::full(g, DType::F16, 0.1, {2}));
  g.add_output(ir::constant(g, DType::F16, 65519.0));   // rounds down to max half
  g.add_output(ir::constant(g, DType::F16, 65520.0));   // tie rounds to even = inf
  g.add_output(ir::constant(g, DType::F16, 1e-7));      // subnormal
  g.add_output(ir::constant(g, DType::F16, -2.0));
  g.add_output(ir::constant(g, DType::F32, NAN));
  g.add_output(ir::constant_int(g, DType::S64, -(int64_t{1} << 40)));
  g.add_output(ir::constant_int(g, DType::U8, 255));
  g.add_output(ir::constant_int(g, DType::Pred, 1));
  g.add_output(ir::constant_int(g, DType::F32, 3));
  g.add_output(ir::constant(g, DType::Pred, 0.0));
  g.add_output(ir::constant(g, DType::BF16, 1.00390625));  // 1 + 2^-8: a tie, to even = 1.0
  g.add_output(ir::constant(g, DType::BF16, 1.01171875));  // 1 + 3*2^-8: a tie, to even = 1 + 2^-6
  auto out = run(g, {});
  CHECK_EQ(download<float>(*out[0])[0], 0.1f);
  CHECK_EQ(download<double>(*out[1])[0], 0.1);
  CHECK_EQ(download<uint16_t>(*out[2]), (std::vector<uint16_t>{0x3eab}));
  CHECK_EQ(download<uint16_t>(*out[3]), (std::vector<uint16_t>{0x2e66, 0x2e66}));
  CHECK_EQ(download<uint16_t>(*out[4]), (std::vector<uint16_t>{0x7bff}));
  CHECK_EQ(download<uint16_t>(*out[5]), (std::vector<uint16_t>{0x7c00}));
  CHECK_EQ(download<uint16_t>(*out[6]), (std::vector<uint16_t>{0x0002}));
  CHECK_EQ(download<uint16_t>(*out[7]), (std::vector<uint16_t>{0xc000}));
  CHECK(std::isnan(download<float>(*out[8])[0]));
  CHECK_EQ(download<int64_t>(*out[9]), (std::vector<int64_t>{-(int64_t{1} << 40)}));
  CHECK_EQ(download<uint8_t>(*out[10]), (std::vector<uint8_t>{255}));
  CHECK_EQ(download<uint8_t>(*out[11]), (std::vector<uint8_t>{1}));
  CHECK_EQ(download<float>(*out[12]), (std::vector<float>{3}));
  CHECK_EQ(download<uint8_t>(*out[13]), (std::vector<uint8_t>{0}));
  CHECK_EQ(download<uint16_t>(*out[14]), (std::vector<uint16_t>{0x3f80}));
  CHECK_EQ(download<uint16_t>(*out[15]), (std::vector<uint16_t>{0x3f82}));
}

void op_shape_ops() {
  Graph g;
  Value x = param(g, DType::F32, {2, 3});
  Value y = param(g, DType::F32, {1, 3});
  g.add_output(ir::reshape(g, x, {3, 2}));
  g.add_output(ir::concatenate(g, {x, y, x}, 0));
  g.add_output(ir::concatenate(g, {x, x}, 1));
  auto bx = upload(std::vector<float>{1, 2, 3, 4, 5, 6}, DType::F32, {2, 3});
  auto by = upload(std::vector<float>{7, 8, 9}, DType::F32, {1, 3});
  auto out = run(g, {bx.get(), by.get()});
  CHECK_EQ(out[0]->dimensions(), (Shape{3, 2}));
  CHECK_CLOSE(download<float>(*out[0]), {1, 2, 3, 4, 5, 6});
  CHECK_EQ(out[1]->dimensions(), (Shape{5, 3}));
  CHECK_CLOSE(download<float>(*out[1]), {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6});
  CHECK_EQ(out[2]->dimensions(), (Shape{2, 6}));
  CHECK_CLOSE(download<float>(*out[2]), {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6});
}

// A program using most builders at once (also used by the serialize case).
Graph composite_graph() {
  Graph g;
  Value x = param(g, DType::F32, {4});
  Value off = param(g, DType::S64, {});
  Value w = param(g, DType::F32, {4, 2});
  Value idx = ir::iota(g, DType::S32, {4}, 0);
  Value rev = ir::binary(g, ir::Op::Subtract, ir::broadcast_in_dim(g, ir::constant_int(g, DType::S32, 3), {4}, {}), idx);
  Value xr = ir::gather_1d(g, x, rev);                                       // x reversed
  Value h = ir::dot_general(g, ir::reshape(g, xr, {1, 4}), w, {}, {}, {1}, {0}, DType::F32);  // [1,2]
  Value ht = ir::transpose(g, h, {1, 0});                                    // [2,1]
  Value padded = ir::pad(g, ir::reshape(g, ht, {2}), ir::constant(g, DType::F32, 0), {1}, {1});  // [4]
  Value d = ir::dynamic_slice(g, x, {off}, {2});
  Value upd = ir::dynamic_update_slice(g, padded, d, {off});
  Value pos = ir::compare(g, upd, ir::full(g, DType::F32, 0, {4}), ir::Compare::GT);
  Value relu = ir::select(g, pos, upd, ir::full(g, DType::F32, 0, {4}));
  Value sum = ir::reduce(g, relu, ir::constant(g, DType::F32, 0), {0}, ir::Combiner::Add);
  g.add_output(relu);
  g.add_output(ir::convert(g, sum, DType::S32));
  g.add_output(ir::bitcast_convert(g, sum, DType::U32, {}));
  return g;
}

void check_composite(const pj::Executable& exe) {
  auto bx = upload(std::vector<float>{1, -2, 3, 4}, DType::F32, {4});
  auto boff = upload(std::vector<int64_t>{2}, DType::S64, {});
  auto bw = upload(std::vector<float>{1, 0, 0, 1, 1, 1, -1, 2}, DType::F32, {4, 2});
  auto out = execute(exe, {bx.get(), boff.get(), bw.get()});
  // xr = [4, 3, -2, 1]; h = xr @ w = [4 - 2 - 1, 3 - 2 + 2] = [1, 3];
  // padded = [0, 1, 3, 0]; d = x[2:4] = [3, 4]; upd = [0, 1, 3, 4]; relu = same; sum = 8
  CHECK_CLOSE(download<float>(*out[0]), {0, 1, 3, 4});
  CHECK_EQ(download<int32_t>(*out[1]), (std::vector<int32_t>{8}));
  CHECK_EQ(download<uint32_t>(*out[2]), (std::vector<uint32_t>{0x41000000u}));
}

void executable_composite_and_reuse() {
  Graph g = composite_graph();
  auto exe = compile(g);
  CHECK_EQ(exe->num_outputs(), size_t{3});
  for (int i = 0; i < 3; ++i) check_composite(*exe);
  // Outputs stay valid after their executable is destroyed.
  auto bx = upload(std::vector<float>{1, 1, 1, 1}, DType::F32, {4});
  auto boff = upload(std::vector<int64_t>{0}, DType::S64, {});
  auto bw = upload(std::vector<float>(8, 1), DType::F32, {4, 2});
  auto out = execute(*exe, {bx.get(), boff.get(), bw.get()});
  exe.reset();
  out[0]->ready_event()->await();
  CHECK_CLOSE(download<float>(*out[0]), {1, 1, 4, 0});
}

void executable_serialize_roundtrip() {
  Graph g = composite_graph();
  auto exe = compile(g);
  std::string bytes = exe->serialize();
  CHECK(bytes.size() > 16);
  CHECK_EQ(exe->serialize().size(), bytes.size());
  auto again = env.client->deserialize(bytes);
  CHECK_EQ(again->num_outputs(), exe->num_outputs());
  exe.reset();  // the deserialized copy is independent of the original
  check_composite(*again);
  // The same bytes load again into a second, independent executable.
  // (Re-serializing a *deserialized* XLA:CPU executable is not checked: this
  // plugin then emits a smaller blob without the compiled kernels, whose
  // execution fails with "Function select_select_fusion not found".)
  auto third = env.client->deserialize(bytes);
  again.reset();
  check_composite(*third);
}

// A program compiled for one device knows it (also when loaded from its bytes) and
// launches there through the plugin's plain path; a portable one has no device of its own.
void executable_for_one_device() {
  Graph g = composite_graph();
  auto portable = compile(g);
  CHECK(portable->own_device() == nullptr);
  auto pinned = env.client->compile(g.to_mlir(), {env.client->devices()[0].id});
  CHECK(pinned->own_device() == env.device);
  check_composite(*pinned);
  auto loaded = env.client->deserialize(pinned->serialize());
  CHECK(loaded->own_device() == env.device);
  check_composite(*loaded);
}

// ------------------------------------------------------------------ error paths

void error_invalid_mlir() {
  int code = -1;
  std::string m = EXPECT_THROW(pj::Error, [&] { env.client->compile("this is not MLIR"); }, &code);
  CHECK(m.rfind("XLA compilation failed: ", 0) == 0);
  CHECK(m.size() > std::strlen("XLA compilation failed: ") + 5);  // carries the plugin's message
  CHECK(code != 0);
  // Well-formed text, ill-typed program: add of f32 and i32 (bypasses ir::binary's check).
  Graph g;
  Value a = param(g, DType::F32, {2});
  Value b = param(g, DType::S32, {2});
  g.add_output(g.add(ir::Op::Add, {a, b}, Type{DType::F32, {2}}));
  m = EXPECT_THROW(pj::Error, [&] { env.client->compile(g.to_mlir()); }, &code);
  CHECK(m.rfind("XLA compilation failed: ", 0) == 0);
  CHECK(code != 0);
  // The client is still usable afterwards.
  Graph ok;
  ok.add_output(ir::iota(ok, DType::S32, {3}, 0));
  CHECK_EQ(download<int32_t>(*run(ok, {})[0]), (std::vector<int32_t>{0, 1, 2}));
  std::printf("  (plugin says: %s)\n", m.substr(0, 160).c_str());
}

void error_load_missing() {
  int code = -1;
  std::string path = "/nonexistent/dir/libno_such_pjrt_plugin.so";
  std::string m = EXPECT_THROW(pj::Error, [&] { pj::Plugin::load(path); }, &code);
  CHECK_CONTAINS(m, "cannot load PJRT plugin");
  CHECK_CONTAINS(m, path);
  CHECK_CONTAINS(m, "No such file");  // dlerror's reason is kept
  CHECK_EQ(code, static_cast<int>(PJRT_Error_Code_NOT_FOUND));
  // A failed load is not cached: it fails the same way again.
  std::string m2 = EXPECT_THROW(pj::Error, [&] { pj::Plugin::load(path); });
  CHECK_EQ(m2, m);
}

void error_load_not_a_plugin_libc() {
  int code = -1;
  std::string m = EXPECT_THROW(pj::Error, [&] { pj::Plugin::load("libc.so.6"); }, &code);
  CHECK_CONTAINS(m, "is not a PJRT plugin");
  CHECK_CONTAINS(m, "GetPjrtApi");
  CHECK_EQ(code, static_cast<int>(PJRT_Error_Code_INVALID_ARGUMENT));
}

void error_load_not_a_plugin_text_file() {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/test_pjrt_not_a_plugin_XXXXXX.so";
  std::vector<char> name(path.begin(), path.end());
  name.push_back('\0');
  int fd = mkstemps(name.data(), 3);
  CHECK(fd >= 0);
  const char text[] = "this is a text file, not a shared object\n";
  CHECK(write(fd, text, sizeof(text) - 1) == static_cast<ssize_t>(sizeof(text) - 1));
  close(fd);
  path = name.data();
  int code = -1;
  std::string m;
  try {
    m = EXPECT_THROW(pj::Error, [&] { pj::Plugin::load(path); }, &code);
  } catch (...) {
    unlink(path.c_str());
    throw;
  }
  unlink(path.c_str());
  CHECK_CONTAINS(m, "cannot load PJRT plugin");
  CHECK_CONTAINS(m, path);
  CHECK_EQ(code, static_cast<int>(PJRT_Error_Code_NOT_FOUND));
}

void error_wrong_argument_count() {
  Graph g;
  Value a = param(g, DType::F32, {2});
  Value b = param(g, DType::F32, {2});
  g.add_output(ir::binary(g, ir::Op::Add, a, b));
  auto exe = compile(g);
  auto ba = upload(std::vector<float>{1, 2}, DType::F32, {2});
  auto bb = upload(std::vector<float>{3, 4}, DType::F32, {2});
  auto bc = upload(std::vector<float>{5, 6}, DType::F32, {2});
  std::string m = EXPECT_THROW(pj::Error, [&] { exe->execute(env.device, {ba->raw()}); });
  CHECK_CONTAINS(m, "PJRT_LoadedExecutable_Execute: ");
  std::printf("  (plugin says: %s)\n", m.substr(0, 160).c_str());
  EXPECT_THROW(pj::Error, [&] { exe->execute(env.device, {ba->raw(), bb->raw(), bc->raw()}); });
  EXPECT_THROW(pj::Error, [&] { exe->execute(env.device, {}); });
  // The executable still works with the right arguments.
  auto out = execute(*exe, {ba.get(), bb.get()});
  CHECK_CLOSE(download<float>(*out[0]), {4, 6});
}

void error_deserialize_garbage() {
  std::string m = EXPECT_THROW(pj::Error, [&] { env.client->deserialize("definitely not an executable"); });
  CHECK_CONTAINS(m, "PJRT_Executable_DeserializeAndLoad: ");
  CHECK(m.size() > std::strlen("PJRT_Executable_DeserializeAndLoad: "));
}

void error_to_host_wrong_size() {
  auto b = upload(std::vector<float>{1, 2, 3, 4}, DType::F32, {4});
  std::vector<float> small(2);
  std::string m = EXPECT_THROW(pj::Error, [&] { b->to_host(small.data(), small.size() * sizeof(float)); });
  CHECK_CONTAINS(m, "PJRT_Buffer_ToHostBuffer: ");
  CHECK_CLOSE(download<float>(*b), {1, 2, 3, 4});
}

// ------------------------------------------------------------------ driver

struct Case {
  const char* name;
  void (*fn)();
  bool needs_plugin;
};

const Case kCases[] = {
    {"ir_types", ir_types, false},
    {"ir_graph_text", ir_graph_text, false},
    {"ir_key", ir_key, false},
    {"ir_fingerprint", ir_fingerprint, false},
    {"ir_node_chunks_reused", ir_node_chunks_reused, false},
    {"ir_op_names", ir_op_names, false},
    {"ir_errors", ir_errors, false},
    {"ir_ints", ir_ints, false},
    {"ir_node_store", ir_node_store, false},
    {"ir_append_into_buffer", ir_append_into_buffer, false},
    {"ir_append_copy", ir_append_copy, false},
    {"ir_restart", ir_restart, false},
    {"ir_append_remembered", ir_append_remembered, false},
    {"ir_call_external", ir_call_external, false},
    {"ir_identity_folds", ir_identity_folds, false},
    {"ir_reshape_folds", ir_reshape_folds, false},
    {"plugin_api_version", plugin_api_version, true},
    {"plugin_load_twice", plugin_load_twice, true},
    {"client_info", client_info, true},
    {"roundtrip_f32", roundtrip_f32, true},
    {"roundtrip_bf16", roundtrip_bf16, true},
    {"roundtrip_i64", roundtrip_i64, true},
    {"roundtrip_pred", roundtrip_pred, true},
    {"roundtrip_zero_size", roundtrip_zero_size, true},
    {"op_broadcast_in_dim", op_broadcast_in_dim, true},
    {"op_elementwise", op_elementwise, true},
    {"op_reduce", op_reduce, true},
    {"op_while_loop", op_while_loop, true},
    {"op_dot_general", op_dot_general, true},
    {"op_transpose", op_transpose, true},
    {"op_slice", op_slice, true},
    {"op_dynamic_slice", op_dynamic_slice, true},
    {"op_dynamic_update_slice", op_dynamic_update_slice, true},
    {"op_pad", op_pad, true},
    {"op_gather_1d", op_gather_1d, true},
    {"op_scatter_1d", op_scatter_1d, true},
    {"op_compare_select", op_compare_select, true},
    {"op_convert", op_convert, true},
    {"op_iota", op_iota, true},
    {"op_bitcast_convert", op_bitcast_convert, true},
    {"op_constants", op_constants, true},
    {"op_shape_ops", op_shape_ops, true},
    {"executable_composite_and_reuse", executable_composite_and_reuse, true},
    {"executable_serialize_roundtrip", executable_serialize_roundtrip, true},
    {"error_invalid_mlir", error_invalid_mlir, true},
    {"error_load_missing", error_load_missing, true},
    {"error_load_not_a_plugin_libc", error_load_not_a_plugin_libc, true},
    {"error_load_not_a_plugin_text_file", error_load_not_a_plugin_text_file, true},
    {"error_wrong_argument_count", error_wrong_argument_count, true},
    {"error_deserialize_garbage", error_deserialize_garbage, true},
    {"executable_for_one_device", executable_for_one_device, true},
    {"error_to_host_wrong_size", error_to_host_wrong_size, true},
};

void* volatile g_sink;

// Leaks on purpose, from our own code, so that the harness can check that
// LeakSanitizer is active and that its report is attributed to us.
__attribute__((noinline)) void leak_on_purpose() {
  auto* g = new Graph();
  Value x = g->parameter(Type{DType::F32, {3}});
  g->add_output(ir::unary(*g, ir::Op::Abs, x));
  g_sink = g;
  g_sink = nullptr;  // the only pointer is dropped: a definite leak
}

// Races on purpose, in our own code, so that the harness can check that
// ThreadSanitizer is active and that its report is attributed to us.
int g_raced = 0;
__attribute__((noinline)) void race_on_purpose() {
  std::thread other([] { ++g_raced; });
  ++g_raced;  // unsynchronized with the other thread's increment
  other.join();
}

__attribute__((noinline)) void leak_pjrt_event(const pj::Plugin& plugin, const pj::Buffer& buffer) {
  PJRT_Buffer_ReadyEvent_Args args{};
  args.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  args.buffer = buffer.raw();
  if (plugin.api()->PJRT_Buffer_ReadyEvent(&args) != nullptr) std::abort();
  g_sink = args.event;
  g_sink = nullptr;  // never PJRT_Event_Destroy'ed
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc >= 2 && std::string(argv[1]) == "--leak-self-check") {
    leak_on_purpose();
    std::printf("leaked on purpose\n");
    return 0;
  }
  if (argc >= 2 && std::string(argv[1]) == "--race-self-check") {
    race_on_purpose();
    std::printf("raced on purpose\n");
    return 0;
  }
  if (argc >= 3 && std::string(argv[1]) == "--leak-self-check-pjrt") {
    // Simulates a wrapper that forgets a PJRT_*_Destroy: the event handle is
    // allocated inside the plugin's C API entry point and then dropped.
    auto plugin = pj::Plugin::load(argv[2]);
    auto client = pj::Client::create(plugin);
    float one = 1.0f;
    auto buffer = client->buffer_from_host(&one, ElementType::F32, {}, client->devices()[0].device);
    leak_pjrt_event(*plugin, *buffer);
    std::printf("leaked a PJRT_Event on purpose\n");
    return 0;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PLUGIN_PATH [NAME_SUBSTRING...]\n", argv[0]);
    return 2;
  }
  env.plugin_path = argv[1];
  std::vector<std::string> filters(argv + 2, argv + argc);

  int passed = 0, failed = 0;
  auto run_case = [&](const char* name, const std::function<void()>& fn) {
    auto t0 = std::chrono::steady_clock::now();
    std::string error;
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown exception";
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (error.empty()) {
      ++passed;
      std::printf("PASS %s (%.0f ms)\n", name, ms);
    } else {
      ++failed;
      std::printf("FAIL %s: %s\n", name, error.c_str());
    }
  };

  bool setup_ok = true;
  for (const Case& c : kCases) {
    if (!filters.empty()) {
      bool match = false;
      for (const auto& f : filters) match = match || std::string(c.name).find(f) != std::string::npos;
      if (!match) continue;
    }
    if (c.needs_plugin && !env.client) {
      if (!setup_ok) {
        ++failed;
        std::printf("FAIL %s: plugin setup failed\n", c.name);
        continue;
      }
      run_case("setup_plugin_and_client", [] {
        env.plugin = pj::Plugin::load(env.plugin_path);
        env.client = pj::Client::create(env.plugin);
        CHECK(!env.client->devices().empty());
        env.device = env.client->devices()[0].device;
      });
      setup_ok = env.client != nullptr;
      if (!setup_ok) {
        ++failed;
        std::printf("FAIL %s: plugin setup failed\n", c.name);
        continue;
      }
    }
    run_case(c.name, c.fn);
  }
  env.client.reset();  // release the client before exit so leak checking sees it gone
  env.plugin.reset();
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
