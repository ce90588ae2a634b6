// A small typed SSA graph of StableHLO operations and its text emitter.
// Knows nothing of PJRT or torch.
#pragma once

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/ints.h"
#include "ir/op.h"

namespace tpu::ir {

enum class DType : uint8_t {
  Pred, S8, S16, S32, S64, U8, U16, U32, U64, F16, BF16, F32, F64,
  C64, C128,  // complex<f32>, complex<f64>
};

const char* mlir_name(DType dtype);  // "f32", "i1", "ui8", ...
int byte_width(DType dtype);
bool is_floating(DType dtype);
bool is_unsigned(DType dtype);
bool is_complex(DType dtype);
// The element type of a complex type's real and imaginary parts (F32 for C64);
// other types map to themselves.
DType complex_part(DType dtype);
// The complex type whose parts are `dtype` (C64 for F32, C128 for F64).
DType complex_of(DType dtype);

using Shape = Ints;
inline int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

struct Type {
  DType dtype;
  Shape shape;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool operator==(const Type& o) const { return dtype == o.dtype && shape == o.shape; }
  std::string mlir() const;  // "tensor<2x3xf32>"
};

struct Value {
  int id = -1;
  bool valid() const { return id >= 0; }
};

// The body of a reduce/scatter region: how two scalars combine; LessThan and
// GreaterThan are sort comparators (the region returns lhs < rhs / lhs > rhs).
enum class Combiner : uint8_t { None, Add, Mul, Max, Min, And, Or, Replace, LessThan, GreaterThan, Xor };

class Graph;
struct GraphPiece;

// A 128-bit hash of a graph's structure (what Graph::key() spells out), in two
// independent 64-bit lanes: the in-memory program cache's key, trusted like
// the key itself. Computing it builds no text, which formatting every node of
// the key on every launch did.
struct Fingerprint {
  uint64_t low = 0, high = 0;
  bool operator==(const Fingerprint& o) const { return low == o.low && high == o.high; }
};
struct FingerprintHash {
  size_t operator()(const Fingerprint& f) const { return static_cast<size_t>(f.low); }
};

// The two regions of a stablehlo.while: each a graph whose parameters are the
// loop-carried values. `cond` has one output (tensor<i1>), `body` one output
// per carried value. Regions see no outer values: what they need is carried.
struct LoopRegions {
  std::shared_ptr<const Graph> cond, body;
};

// A function defined outside torch_tpu (a StableHLO module lowered by JAX),
// called by name. `text` holds its func.func definitions, renamed so that every
// symbol in it starts with `name` (unique per content), which keeps functions
// of different origins apart when graphs are appended into one program.
struct Callee {
  std::string name;          // the entry function's symbol, without '@'
  std::string text;          // func.func definitions: the entry and its private helpers
  std::vector<Type> results;
};

// A node's rendered attribute entries (without braces), shared by the copies
// of the node: a graph kept to be appended again (an op's remembered graph)
// copies its nodes each time, and copying the text cost more than the rest of
// the node. Immutable; empty holds nothing. The text's 128-bit hash is taken
// once, here, so a graph's fingerprint reads two words per node, not the text.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::string text);   // NOLINT: implicit, ops pass their text
  Attrs(const char* text) : Attrs(std::string(text)) {}  // NOLINT
  const std::string& str() const { return text_ ? text_->text : empty_text(); }
  bool empty() const { return text_ == nullptr; }
  bool operator==(const Attrs& o) const { return text_ == o.text_ || str() == o.str(); }
  // The text's hash (both words 0 when empty): equal texts, equal hashes.
  uint64_t hash_low() const { return text_ ? text_->low : 0; }
  uint64_t hash_high() const { return text_ ? text_->high : 0; }

 private:
  struct Text {
    std::string text;
    uint64_t low, high;
  };
  static const std::string& empty_text() {
    static const std::string empty;
    return empty;
  }
  std::shared_ptr<const Text> text_;
};

// The k-th result of a multi-result node (a while loop, a call) is a node of its own:
// op Op::Result, one operand (the loop), attrs = k. It emits no line.

struct Node {
  Op op;
  // The node's operand ids are operand_ids_[first_operand, first_operand +
  // num_operands) of its graph: one pool per graph, not one allocation per node.
  uint32_t first_operand = 0, num_operands = 0;
  Type type;
  Attrs attrs;
  Combiner combiner = Combiner::None;
  std::shared_ptr<const LoopRegions> loop;  // stablehlo.while only
  std::shared_ptr<const Callee> callee;     // func.call only
};

// A graph's nodes, in chunks that never move (references returned by
// Graph::type() stay valid while nodes are added): chunk k holds kFirst << k
// nodes, so a graph of n nodes makes O(log n) allocations, not one per few nodes.
class NodeStore {
 public:
  NodeStore() = default;
  NodeStore(const NodeStore& other) { *this = other; }
  NodeStore(NodeStore&& other) noexcept { steal(other); }
  NodeStore& operator=(const NodeStore& other);
  NodeStore& operator=(NodeStore&& other) noexcept {
    if (this != &other) {
      clear();
      steal(other);
    }
    return *this;
  }
  ~NodeStore() { clear(); }

  size_t size() const { return size_; }
  Node& operator[](size_t i) { return *slot(i); }
  const Node& operator[](size_t i) const { return *slot(i); }
  void push_back(Node&& node);
  void clear();
  // Destroys the nodes but keeps the chunks for the next ones: a graph rebuilt
  // as often as the pending graph (every cut) then allocates nothing.
  void clear_keeping_memory();

  // Rebuilding (Graph::restart): the store is emptied but its nodes are kept,
  // beyond size(), for the new nodes to be compared with. next_kept() is the
  // kept node at position size() (nullptr past them), take_kept() makes it the
  // next node as it is; push_back() first drops whatever is still kept.
  void keep_for_rebuild() { size_ = 0; }
  const Node* next_kept() const { return size_ < constructed_ ? slot(size_) : nullptr; }
  void take_kept() { ++size_; }
  // The kept node `ahead` positions past next_kept() (nullptr past them); take_kept(n) takes n at once.
  const Node* kept_ahead(size_t ahead) const { return size_ + ahead < constructed_ ? slot(size_ + ahead) : nullptr; }
  void take_kept(size_t n) { size_ += n; }
  void drop_kept();

  template <class Store, class N>
  struct Iterator {
    Store* store;
    size_t i;
    N& operator*() const { return (*store)[i]; }
    Iterator& operator++() { ++i; return *this; }
    bool operator!=(const Iterator& o) const { return i != o.i; }
  };
  Iterator<NodeStore, Node> begin() { return {this, 0}; }
  Iterator<NodeStore, Node> end() { return {this, size_}; }
  Iterator<const NodeStore, const Node> begin() const { return {this, 0}; }
  Iterator<const NodeStore, const Node> end() const { return {this, size_}; }

 private:
  static constexpr size_t kFirst = 16;
  static size_t chunk_of(size_t i) {  // the chunk holding node i
    // Chunks 0..k-1 hold kFirst * (2^k - 1) nodes.
    return static_cast<size_t>(std::bit_width(i / kFirst + 1)) - 1;
  }
  static size_t chunk_start(size_t k) { return kFirst * ((size_t(1) << k) - 1); }
  Node* slot(size_t i) const {
    size_t k = chunk_of(i);
    return chunks_[k] + (i - chunk_start(k));
  }
  void steal(NodeStore& other) {
    chunks_ = std::move(other.chunks_);
    size_ = other.size_;
    constructed_ = other.constructed_;
    other.chunks_.clear();
    other.size_ = other.constructed_ = 0;
  }
  std::vector<Node*> chunks_;  // raw storage; nodes [0, constructed_) are constructed
  size_t size_ = 0;            // the nodes of the graph; those up to constructed_ are kept ones
  size_t constructed_ = 0;
};

// The precision XLA is asked for in float32 dots and convolutions
// (torch.set_float32_matmul_precision "highest" / "high" / "medium"); other
// element types always ask for HIGHEST. On a TPU, DEFAULT is one bf16 pass,
// HIGH three, HIGHEST six; XLA:CPU computes float32 whatever is asked.
enum class DotPrecision : uint8_t { Default, High, Highest };
const char* mlir_name(DotPrecision precision);  // "DEFAULT", "HIGH", "HIGHEST"

// Who splits long reductions. XLA:CPU splits every reduction of a dimension
// longer than 32 into a reduce_window of 32-element windows and a reduce of
// the partial results, for accuracy; that reduce_window is a loop of its own
// that XLA fuses with nothing, even for the 64-wide rows of a softmax or a
// layer norm. With Explicit (chosen for XLA:CPU, whose own split is then turned
// off) reduce() makes the same split itself, except for reductions over a
// tensor's trailing dimensions of at most kLongestUnsplitReduction elements:
// those stay one reduction, which XLA fuses with its operand and vectorizes
// (tested against float64 to 2e-6 up to that length).
enum class ReductionSplit : uint8_t { ByCompiler, Explicit };
constexpr int64_t kLongestUnsplitReduction = 16384;

// How ops are built into a graph: options of whoever builds it (the plugin's
// policy, torch's settings), passed in, never globals. Each is applied when a
// node is built and baked into it (so part of the program's identity); loop
// regions inherit their graph's.
struct GraphOptions {
  ReductionSplit reduction_split = ReductionSplit::ByCompiler;
  // Asked only when a dot or convolution is built (none: HIGHEST).
  DotPrecision (*dot_precision)() = nullptr;
};

class Graph {
 public:
  void set_options(const GraphOptions& options) { options_ = options; }
  const GraphOptions& options() const { return options_; }
  DotPrecision dot_precision() const {
    return options_.dot_precision != nullptr ? options_.dot_precision() : DotPrecision::Highest;
  }

  Value parameter(Type type);
  Value add(Op op, std::initializer_list<Value> operands, Type type, Attrs attrs = {},
            Combiner combiner = Combiner::None) {
    return add_node(op, operands.begin(), operands.size(), std::move(type), std::move(attrs), combiner);
  }
  Value add(Op op, const std::vector<Value>& operands, Type type, Attrs attrs = {},
            Combiner combiner = Combiner::None) {
    return add_node(op, operands.data(), operands.size(), std::move(type), std::move(attrs), combiner);
  }
  // A stablehlo.while over `init` (see LoopRegions); returns its results,
  // one per carried value. ir::while_loop (ops.h) builds the regions.
  std::vector<Value> add_while(std::vector<Value> init, std::shared_ptr<const LoopRegions> loop);
  // A func.call of `callee` with `args`; returns its results. The program's
  // text then carries the callee's definitions after @main.
  std::vector<Value> add_call(std::shared_ptr<const Callee> callee, const std::vector<Value>& args);
  void add_output(Value v) { outputs_.push_back(v.id); }
  // Makes the graph a replicated program: one replica per device id (in this
  // order), which its collectives' replica groups number 0, 1, ...
  void set_replicas(std::vector<int> device_ids) { replicas_ = std::move(device_ids); }
  const std::vector<int>& replicas() const { return replicas_; }  // empty: not replicated
  // Empties the graph (as Graph() would) but keeps its memory for the next nodes.
  void clear();
  // Empties the graph, as clear(), but keeps its nodes to rebuild it: while each
  // node added equals the kept one at its position, that node is taken as it is
  // (nothing built or freed), and a graph rebuilt equal to the kept one (nodes,
  // outputs, donations) has `kept_fingerprint`, the kept graph's, as its
  // fingerprint without hashing it again. The first node that differs drops
  // what is left of the kept graph. For a graph built the same way again and
  // again (the pending graph of a training step).
  void restart(const Fingerprint& kept_fingerprint);
  // Moves every node of `other` (left empty) to the end of this graph; its k-th
  // parameter becomes `arguments[k]` of this graph. `mapped` is replaced by the
  // new value of each node of `other` (by id): a caller appending graph after
  // graph (the pending graph, once per op) reuses one buffer.
  void append(Graph&& other, std::span<const Value> arguments, std::vector<Value>& mapped);
  // The same, copying the nodes of `other` (left as it is), and asking
  // `argument(k)` for the value of its k-th parameter when the copy reaches that
  // parameter: whatever the caller adds to this graph for it lands where it would
  // have had the caller built `other`'s nodes itself, so the result is the same
  // graph (an op's remembered graph, aten/op_memo.h).
  template <class Argument>
  void append_copy(const Graph& other, Argument&& argument, std::vector<Value>& mapped) {
    using F = std::remove_reference_t<Argument>;
    append_copied(other, [](void* f, size_t k) { return (*static_cast<F*>(f))(k); },
                  const_cast<void*>(static_cast<const void*>(&argument)), mapped);
  }
  // append_copy() of a graph that never changes once made, named by `stamp`
  // (unique to it for the process's life: an op's remembered graph), whose k-th
  // parameter is `arguments[k]`. While rebuilding (restart()), a copy that the
  // kept build made at this very position, of the same graph with the same
  // arguments, is taken whole: its nodes are the kept ones by construction, so
  // none is compared (a training step's ops are nearly all such copies).
  void append_remembered(const Graph& other, uint64_t stamp, std::span<const Value> arguments,
                         std::vector<Value>& mapped);
  // Input/output aliasing: the buffer of parameter `parameter` (by position)
  // is donated to output `output`, which must have the parameter's type.
  void alias_output(int parameter, int output) { aliases_.push_back({parameter, output}); }
  const std::vector<std::pair<int, int>>& aliases() const { return aliases_; }
  // Removes the outputs and the aliases into them: what a run that did not launch had added.
  void clear_outputs() {
    outputs_.clear();
    aliases_.clear();
  }

  // Cuts the graph at `ends` (ascending node counts, the last one size()) into
  // consecutive pieces, each a graph of its own that computes its nodes from
  // the values it reads of earlier pieces (and the graph's parameters among
  // its nodes) and returns those of its values that later pieces or the
  // graph's outputs read. Run in order, the pieces compute the graph.
  std::vector<GraphPiece> split(std::span<const size_t> ends) const;

  bool is_parameter(Value v) const { return nodes_[v.id].op == Op::Parameter; }
  Op op(Value v) const { return nodes_[v.id].op; }
  const Type& type(Value v) const { return nodes_[v.id].type; }
  // The value that `v` reshapes when `v` is a stablehlo.reshape; otherwise `v`.
  Value reshaped_from(Value v) const;
  size_t num_parameters() const { return num_parameters_; }
  size_t num_outputs() const { return outputs_.size(); }
  const std::vector<int>& outputs() const { return outputs_; }
  size_t size() const { return nodes_.size(); }

  // Structural identity: equal keys <=> identical programs.
  std::string key() const;
  // The first structural difference from `other`, in words ("parameter 1:
  // tensor<4x8xf32> instead of tensor<4x4xf32>"); "" when the structures are equal.
  std::string difference(const Graph& other) const;
  // How near `other` is: the nodes whose op agrees, position by position, and
  // among graphs with as many, those whose type agrees too.
  size_t agreement(const Graph& other) const;
  // The same identity hashed (equal keys => equal fingerprints).
  Fingerprint fingerprint() const;
  // Whether the graph was rebuilt (restart()) equal to the kept graph.
  bool rebuilt_unchanged() const;
  // The program as a StableHLO module (MLIR text), entry function @main.
  std::string to_mlir() const;

 private:
  // Emits the nodes and the terminator; parameters are named by `parameter_names`,
  // other values "%<prefix><id>" (regions get prefixes of their own).
  void emit_body(std::string& out, const std::string& prefix, const std::vector<std::string>& parameter_names,
                 const char* terminator, const std::string& indent) const;

  Value add_node(Op op, const Value* operands, size_t count, Type type, Attrs attrs,
                 Combiner combiner);
  Fingerprint hash_structure() const;
  // While rebuilding (restart()): whether the node described, with operand ids
  // `ids(i)` for i < count, is the kept node at this position; it is then taken
  // as the graph's next node. Otherwise the rebuild stops comparing.
  template <class Ids>
  bool reuse_kept(Op op, const Type& type, const Attrs& attrs, Combiner combiner, size_t count, Ids&& ids);
  void stop_rebuild();
  // Adds `node` as the graph's next node (its operand ids already added).
  void push_node(Node&& node);
  // Feeds what identifies the graph to `sink`, which spells it (key()); fingerprint() reads the same fields.
  template <class Sink>
  void describe(Sink& sink) const;
  // The operand ids of `n`, a node of this graph.
  struct OperandIds {
    const int* first;
    size_t count;
    const int* begin() const { return first; }
    const int* end() const { return first + count; }
    size_t size() const { return count; }
    int operator[](size_t i) const { return first[i]; }
  };
  OperandIds operands(const Node& n) const { return {operand_ids_.data() + n.first_operand, n.num_operands}; }
  // Appends `n` (of another graph, whose operand ids are `ids`) with each operand id mapped.
  void push_mapped(Node&& n, OperandIds ids, const std::vector<Value>& mapped);
  void append_copied(const Graph& other, Value (*argument)(void*, size_t), void* context, std::vector<Value>& mapped);
  // append()'s body: `Source` is Graph (nodes moved) or const Graph (nodes copied);
  // `argument(k)` is the value of the k-th parameter.
  template <class Source, class Argument>
  void append_from(Source& other, Argument&& argument, std::vector<Value>& mapped);

  // What append_remembered() did in this build, for a rebuild to redo it whole.
  struct RememberedCopy {
    uint64_t stamp;
    uint32_t start, count;  // its nodes in this graph
    uint32_t ids;           // where its arguments, then its mapped ids, start in remembered_ids_
    uint32_t num_arguments, num_mapped;
  };
  // Takes the kept build's copy at this position when it is `stamp`'s with `arguments`.
  bool take_remembered(uint64_t stamp, std::span<const Value> arguments, std::vector<Value>& mapped);
  void note_remembered(uint64_t stamp, size_t start, std::span<const Value> arguments,
                       const std::vector<Value>& mapped);

  NodeStore nodes_;
  std::vector<int> operand_ids_;
  std::vector<RememberedCopy> remembered_;
  std::vector<int> remembered_ids_;
  std::vector<int> outputs_;
  std::vector<std::pair<int, int>> aliases_;  // (parameter position, output index)
  size_t num_parameters_ = 0;
  std::vector<int> replicas_;
  GraphOptions options_;
  // What restart() kept of the last build. A copy of the graph does not rebuild
  // (it starts with nothing kept); a moved graph takes it along.
  struct Kept {
    bool comparing = false;  // every node so far equals the kept one at its position
    size_t nodes = 0;
    std::vector<int> operand_ids, outputs, replicas;
    std::vector<std::pair<int, int>> aliases;
    Fingerprint fingerprint;
    std::vector<RememberedCopy> remembered;
    std::vector<int> remembered_ids;
    size_t next_remembered = 0;  // the first remembered copy not yet passed
    Kept() = default;
    Kept(const Kept&) {}
    Kept& operator=(const Kept&) {
      *this = Kept();
      return *this;
    }
    Kept(Kept&& other) noexcept { *this = std::move(other); }
    Kept& operator=(Kept&& other) noexcept {
      comparing = other.comparing;
      nodes = other.nodes;
      operand_ids = std::move(other.operand_ids);
      outputs = std::move(other.outputs);
      replicas = std::move(other.replicas);
      aliases = std::move(other.aliases);
      fingerprint = other.fingerprint;
      remembered = std::move(other.remembered);
      remembered_ids = std::move(other.remembered_ids);
      next_remembered = other.next_remembered;
      other.comparing = false;
      other.nodes = 0;
      return *this;
    }
  };
  Kept kept_;
};

// A piece of Graph::split: `graph`'s k-th parameter is the split graph's
// value inputs[k], and its k-th output the value outputs[k].
struct GraphPiece {
  Graph graph;
  std::vector<int> inputs, outputs;
};

}  // namespace tpu::ir
