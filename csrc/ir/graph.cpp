#include "ir/graph.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <new>
#include <stdexcept>
#include <type_traits>

namespace tpu::ir {

namespace {
constexpr const char* kOpNames[] = {
    "parameter", "result",
#define TPU_IR_OP_NAME(name, mlir) mlir,
    TPU_IR_OPS(TPU_IR_OP_NAME)
#undef TPU_IR_OP_NAME
};
}  // namespace

const char* mlir_name(Op op) { return kOpNames[static_cast<size_t>(op)]; }

const char* short_name(Op op) {
  const char* name = mlir_name(op);
  const char* dot = std::strchr(name, '.');
  return dot != nullptr ? dot + 1 : name;
}

const char* mlir_name(DotPrecision precision) {
  static const char* names[] = {"DEFAULT", "HIGH", "HIGHEST"};
  return names[static_cast<int>(precision)];
}

const char* mlir_name(DType dtype) {
  switch (dtype) {
    case DType::Pred: return "i1";
    case DType::S8: return "i8";
    case DType::S16: return "i16";
    case DType::S32: return "i32";
    case DType::S64: return "i64";
    case DType::U8: return "ui8";
    case DType::U16: return "ui16";
    case DType::U32: return "ui32";
    case DType::U64: return "ui64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::C64: return "complex<f32>";
    case DType::C128: return "complex<f64>";
  }
  return "?";
}

int byte_width(DType dtype) {
  switch (dtype) {
    case DType::Pred: case DType::S8: case DType::U8: return 1;
    case DType::S16: case DType::U16: case DType::F16: case DType::BF16: return 2;
    case DType::S32: case DType::U32: case DType::F32: return 4;
    case DType::S64: case DType::U64: case DType::F64: case DType::C64: return 8;
    case DType::C128: return 16;
  }
  return 0;
}

bool is_floating(DType d) {
  return d == DType::F16 || d == DType::BF16 || d == DType::F32 || d == DType::F64;
}

bool is_unsigned(DType d) {
  return d == DType::U8 || d == DType::U16 || d == DType::U32 || d == DType::U64;
}

bool is_complex(DType d) { return d == DType::C64 || d == DType::C128; }

DType complex_part(DType d) {
  return d == DType::C64 ? DType::F32 : d == DType::C128 ? DType::F64 : d;
}

DType complex_of(DType d) {
  if (d == DType::F64 || d == DType::C128) return DType::C128;
  if (d == DType::F32 || d == DType::C64) return DType::C64;
  throw std::invalid_argument(std::string("ir: no complex type with ") + mlir_name(d) + " parts");
}

std::string Type::mlir() const {
  std::string s = "tensor<";
  for (int64_t d : shape) {
    s += std::to_string(d);
    s += 'x';
  }
  s += mlir_name(dtype);
  s += '>';
  return s;
}

namespace {

// Chunks freed on this thread, kept for the next graphs. Every op builds a small
// graph and the pending graph is rebuilt every step, so the same chunk sizes are
// asked for again at once, and malloc serves chunks this large (16 nodes and
// up) outside its per-thread cache, through its slower shared bins.
class ChunkCache {
 public:
  static constexpr size_t kSizes = 7;    // chunks 0..6 (up to kFirst << 6 nodes)
  static constexpr size_t kPerSize = 2;  // the pending graph's and an op's
  static ChunkCache* of_this_thread() {
    thread_local bool gone = false;  // trivially destroyed: readable after `owner` is
    thread_local ChunkCache* cache = nullptr;
    if (cache == nullptr && !gone) {
      thread_local Owner owner{&cache, &gone};  // frees the chunks when the thread ends
      cache = new ChunkCache();
    }
    return cache;
  }
  Node* take(size_t k) { return k < kSizes && count_[k] > 0 ? chunks_[k][--count_[k]] : nullptr; }
  bool keep(size_t k, Node* chunk) {
    if (k >= kSizes || count_[k] == kPerSize) return false;
    chunks_[k][count_[k]++] = chunk;
    return true;
  }

 private:
  struct Owner {
    ChunkCache** cache;
    bool* gone;
    ~Owner() {
      ChunkCache* c = *cache;
      *cache = nullptr;
      *gone = true;
      for (size_t k = 0; k < kSizes; ++k)
        for (size_t i = 0; i < c->count_[k]; ++i) ::operator delete(c->chunks_[k][i], std::align_val_t{alignof(Node)});
      delete c;
    }
  };
  Node* chunks_[kSizes][kPerSize] = {};
  size_t count_[kSizes] = {};
};

}  // namespace

void NodeStore::push_back(Node&& node) {
  if (constructed_ > size_) drop_kept();
  size_t k = chunk_of(size_);
  if (k == chunks_.size()) {
    ChunkCache* cache = ChunkCache::of_this_thread();
    Node* chunk = cache ? cache->take(k) : nullptr;
    if (chunk == nullptr)
      chunk = static_cast<Node*>(::operator new(sizeof(Node) * (kFirst << k), std::align_val_t{alignof(Node)}));
    chunks_.push_back(chunk);
  }
  new (chunks_[k] + (size_ - chunk_start(k))) Node(std::move(node));
  constructed_ = ++size_;
}

void NodeStore::drop_kept() {
  for (size_t i = size_; i < constructed_; ++i) slot(i)->~Node();
  constructed_ = size_;
}

void NodeStore::clear() {
  for (size_t i = 0; i < constructed_; ++i) slot(i)->~Node();
  ChunkCache* cache = chunks_.empty() ? nullptr : ChunkCache::of_this_thread();
  for (size_t k = 0; k < chunks_.size(); ++k)
    if (cache == nullptr || !cache->keep(k, chunks_[k])) ::operator delete(chunks_[k], std::align_val_t{alignof(Node)});
  chunks_.clear();
  size_ = constructed_ = 0;
}

void NodeStore::clear_keeping_memory() {
  for (size_t i = 0; i < constructed_; ++i) slot(i)->~Node();
  size_ = constructed_ = 0;
  // Kept up to chunk 7 (4080 nodes): a graph that once grew huge does not hold its memory.
  constexpr size_t kKeptChunks = 8;
  while (chunks_.size() > kKeptChunks) {
    ::operator delete(chunks_.back(), std::align_val_t{alignof(Node)});
    chunks_.pop_back();
  }
}

NodeStore& NodeStore::operator=(const NodeStore& other) {
  if (this == &other) return *this;
  clear();
  for (size_t i = 0; i < other.size_; ++i) push_back(Node(other[i]));
  return *this;
}

void Graph::clear() {
  nodes_.clear_keeping_memory();
  constexpr size_t kKeptOperandIds = size_t{1} << 14;
  if (operand_ids_.capacity() > kKeptOperandIds) operand_ids_ = {};
  operand_ids_.clear();
  outputs_.clear();
  aliases_.clear();
  num_parameters_ = 0;
  replicas_.clear();
  options_ = GraphOptions{};
  remembered_.clear();
  remembered_ids_.clear();
  kept_.comparing = false;
  kept_.nodes = 0;
}

void Graph::restart(const Fingerprint& kept_fingerprint) {
  kept_.nodes = nodes_.size();
  kept_.fingerprint = kept_fingerprint;
  kept_.operand_ids.swap(operand_ids_);
  kept_.outputs.swap(outputs_);
  kept_.aliases.swap(aliases_);
  kept_.replicas.swap(replicas_);
  kept_.remembered.swap(remembered_);
  kept_.remembered_ids.swap(remembered_ids_);
  kept_.next_remembered = 0;
  remembered_.clear();
  remembered_ids_.clear();
  kept_.comparing = true;
  nodes_.keep_for_rebuild();
  operand_ids_.clear();
  outputs_.clear();
  aliases_.clear();
  replicas_.clear();
  num_parameters_ = 0;
  options_ = GraphOptions{};
}

void Graph::push_node(Node&& node) {
  if (kept_.comparing && nodes_.next_kept() != nullptr) stop_rebuild();  // a node other than the kept one
  nodes_.push_back(std::move(node));
}

void Graph::stop_rebuild() {
  kept_.comparing = false;
  nodes_.drop_kept();
}

template <class Ids>
bool Graph::reuse_kept(Op op, const Type& type, const Attrs& attrs, Combiner combiner, size_t count, Ids&& ids) {
  if (!kept_.comparing) return false;
  const Node* kept = nodes_.next_kept();
  if (kept == nullptr) return false;  // past the kept graph: nothing left to compare
  // A node with a region or a callee is never taken: those are set after the node is added.
  bool same = kept->op == op && kept->num_operands == count && kept->combiner == combiner && !kept->loop &&
              !kept->callee && kept->type == type && kept->attrs == attrs;
  // Every earlier node is the kept one, so this one's operand ids start where the kept one's did.
  const int* kept_ids = kept_.operand_ids.data() + kept->first_operand;
  for (size_t i = 0; same && i < count; ++i) same = kept_ids[i] == ids(i);
  if (!same) {
    stop_rebuild();
    return false;
  }
  for (size_t i = 0; i < count; ++i) operand_ids_.push_back(kept_ids[i]);
  nodes_.take_kept();
  return true;
}

bool Graph::rebuilt_unchanged() const {
  return kept_.comparing && nodes_.size() == kept_.nodes && outputs_ == kept_.outputs && aliases_ == kept_.aliases &&
         replicas_ == kept_.replicas;
}

Value Graph::parameter(Type type) {
  if (!reuse_kept(Op::Parameter, type, Attrs(), Combiner::None, 0, [](size_t) { return 0; }))
    push_node(Node{Op::Parameter, 0, 0, std::move(type), {}, Combiner::None});
  ++num_parameters_;
  return Value{static_cast<int>(nodes_.size()) - 1};
}

Value Graph::add_node(Op op, const Value* operands, size_t count, Type type, Attrs attrs,
                      Combiner combiner) {
  if (reuse_kept(op, type, attrs, combiner, count, [&](size_t i) { return operands[i].id; }))
    return Value{static_cast<int>(nodes_.size()) - 1};
  Node node{op, static_cast<uint32_t>(operand_ids_.size()), static_cast<uint32_t>(count), std::move(type),
            std::move(attrs), combiner};
  // An op's graph has a handful of nodes: one allocation instead of growing by 1, 2, 4, 8.
  if (operand_ids_.capacity() == 0) operand_ids_.reserve(16);
  for (size_t i = 0; i < count; ++i) {
    if (operands[i].id < 0 || operands[i].id >= static_cast<int>(nodes_.size())) {
      operand_ids_.resize(node.first_operand);
      throw std::logic_error(std::string("ir: invalid operand for ") + mlir_name(op));
    }
    operand_ids_.push_back(operands[i].id);
  }
  push_node(std::move(node));
  return Value{static_cast<int>(nodes_.size()) - 1};
}

void Graph::push_mapped(Node&& n, OperandIds ids, const std::vector<Value>& mapped) {
  n.first_operand = static_cast<uint32_t>(operand_ids_.size());
  for (int o : ids) operand_ids_.push_back(mapped[o].id);
  push_node(std::move(n));
}

template <class Source, class Argument>
void Graph::append_from(Source& other, Argument&& argument, std::vector<Value>& mapped) {
  if (&other == this) throw std::logic_error("ir: a graph cannot append itself");
  mapped.clear();
  mapped.reserve(other.nodes_.size());
  size_t next_argument = 0;
  auto take = [](auto& source) -> Node {
    if constexpr (std::is_const_v<Source>) return source;
    else return std::move(source);
  };
  for (auto& source : other.nodes_) {
    if (source.op == Op::Parameter) {
      mapped.push_back(argument(next_argument++));
      continue;
    }
    OperandIds ids = other.operands(source);
    const bool plain = !source.loop && !source.callee;
    if (source.op == Op::Reshape) {  // of a reshape here (a storage's flat value, mostly): as ir::reshape folds it
      Value reshaped = reshaped_from(mapped[ids[0]]);
      if (type(reshaped) == source.type) {
        mapped.push_back(reshaped);
        continue;
      }
      if (!reuse_kept(source.op, source.type, source.attrs, source.combiner, 1, [&](size_t) { return reshaped.id; })) {
        Node n = take(source);
        n.first_operand = static_cast<uint32_t>(operand_ids_.size());
        operand_ids_.push_back(reshaped.id);
        push_node(std::move(n));
      }
    } else if (!plain ||
               !reuse_kept(source.op, source.type, source.attrs, source.combiner, ids.size(),
                           [&](size_t i) { return mapped[ids[i]].id; })) {
      push_mapped(take(source), ids, mapped);
    }
    mapped.push_back(Value{static_cast<int>(nodes_.size()) - 1});
  }
}

void Graph::append(Graph&& other, std::span<const Value> arguments, std::vector<Value>& mapped) {
  if (arguments.size() != other.num_parameters_) throw std::logic_error("ir: append needs one value per parameter");
  append_from(other, [&](size_t k) { return arguments[k]; }, mapped);
  other = Graph();
}

void Graph::append_copied(const Graph& other, Value (*argument)(void*, size_t), void* context,
                          std::vector<Value>& mapped) {
  append_from(other, [&](size_t k) { return argument(context, k); }, mapped);
}

void Graph::append_remembered(const Graph& other, uint64_t stamp, std::span<const Value> arguments,
                              std::vector<Value>& mapped) {
  if (arguments.size() != other.num_parameters_) throw std::logic_error("ir: append needs one value per parameter");
  const size_t start = nodes_.size();
  if (stamp == 0 || !take_remembered(stamp, arguments, mapped))
    append_from(other, [&](size_t k) { return arguments[k]; }, mapped);
  if (stamp != 0) note_remembered(stamp, start, arguments, mapped);
}

bool Graph::take_remembered(uint64_t stamp, std::span<const Value> arguments, std::vector<Value>& mapped) {
  if (!kept_.comparing) return false;
  const size_t start = nodes_.size();
  auto& copies = kept_.remembered;
  size_t& next = kept_.next_remembered;
  while (next < copies.size() && copies[next].start < start) ++next;
  if (next == copies.size()) return false;
  const RememberedCopy& copy = copies[next];
  if (copy.start != start || copy.stamp != stamp || copy.num_arguments != arguments.size()) return false;
  const int* ids = kept_.remembered_ids.data() + copy.ids;
  for (size_t k = 0; k < arguments.size(); ++k)
    if (ids[k] != arguments[k].id) return false;
  // Every node so far is the kept one, so the copy's nodes and operand ids are
  // the kept ones at this position, operand ids included, in one run.
  if (copy.count > 0) {
    const Node* first = nodes_.next_kept();
    const Node* last = nodes_.kept_ahead(copy.count - 1);
    if (start + copy.count > kept_.nodes || first == nullptr || last == nullptr ||
        first->first_operand != operand_ids_.size())
      return false;
    operand_ids_.insert(operand_ids_.end(), kept_.operand_ids.begin() + first->first_operand,
                        kept_.operand_ids.begin() + last->first_operand + last->num_operands);
    nodes_.take_kept(copy.count);
  }
  mapped.resize(copy.num_mapped);
  const int* mapped_ids = ids + copy.num_arguments;
  for (uint32_t i = 0; i < copy.num_mapped; ++i) mapped[i].id = mapped_ids[i];
  ++next;
  return true;
}

void Graph::note_remembered(uint64_t stamp, size_t start, std::span<const Value> arguments,
                            const std::vector<Value>& mapped) {
  remembered_.push_back(RememberedCopy{stamp, static_cast<uint32_t>(start), static_cast<uint32_t>(nodes_.size() - start),
                                       static_cast<uint32_t>(remembered_ids_.size()),
                                       static_cast<uint32_t>(arguments.size()), static_cast<uint32_t>(mapped.size())});
  size_t at = remembered_ids_.size();
  remembered_ids_.resize(at + arguments.size() + mapped.size());
  int* ids = remembered_ids_.data() + at;
  for (Value v : arguments) *ids++ = v.id;
  for (Value v : mapped) *ids++ = v.id;
}

std::vector<GraphPiece> Graph::split(std::span<const size_t> ends) const {
  if (ends.empty() || ends.back() != nodes_.size()) throw std::logic_error("ir: split must end at the graph's size");
  // The piece of each node, and which nodes a later piece or the outputs read.
  std::vector<uint32_t> piece_of(nodes_.size());
  for (size_t piece = 0, begin = 0; piece < ends.size(); begin = ends[piece++])
    for (size_t i = begin; i < ends[piece]; ++i) piece_of[i] = static_cast<uint32_t>(piece);
  std::vector<uint8_t> exported(nodes_.size(), 0);
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (int o : operands(nodes_[i]))
      if (piece_of[o] != piece_of[i]) exported[o] = 1;
  for (int o : outputs_) exported[o] = 1;

  std::vector<GraphPiece> pieces(ends.size());
  std::vector<int> local(nodes_.size(), -1);  // a node's value in its piece's graph (or as a parameter there)
  for (size_t piece = 0, begin = 0; piece < ends.size(); begin = ends[piece++]) {
    GraphPiece& p = pieces[piece];
    p.graph.set_options(options_);
    auto input = [&](int id) {
      if (local[id] < 0 || piece_of[id] != piece) {
        p.inputs.push_back(id);
        local[id] = p.graph.parameter(nodes_[id].type).id;
        piece_of[id] = static_cast<uint32_t>(piece);  // later reads in this piece use the parameter
      }
      return local[id];
    };
    for (size_t i = begin; i < ends[piece]; ++i) {
      const Node& n = nodes_[i];
      if (n.op == Op::Parameter) {
        input(static_cast<int>(i));
        continue;
      }
      Node copy = n;
      copy.first_operand = static_cast<uint32_t>(p.graph.operand_ids_.size());
      for (int o : operands(n)) {
        int id = input(o);
        p.graph.operand_ids_.push_back(id);
      }
      p.graph.nodes_.push_back(std::move(copy));
      local[i] = static_cast<int>(p.graph.nodes_.size()) - 1;
    }
    for (size_t i = begin; i < ends[piece]; ++i)
      if (exported[i] && nodes_[i].op != Op::Parameter) {
        p.outputs.push_back(static_cast<int>(i));
        p.graph.add_output(Value{local[i]});
      }
  }
  return pieces;
}

std::vector<Value> Graph::add_while(std::vector<Value> init, std::shared_ptr<const LoopRegions> loop) {
  if (init.empty() || loop->cond->num_outputs() != 1 || loop->body->num_outputs() != init.size() ||
      loop->cond->num_parameters() != init.size() || loop->body->num_parameters() != init.size())
    throw std::logic_error("ir: while regions do not match the carried values");
  Value w = add(Op::While, init, type(init[0]));
  nodes_[w.id].loop = std::move(loop);
  std::vector<Value> results;
  for (size_t k = 0; k < init.size(); ++k) results.push_back(add(Op::Result, {w}, type(init[k]), std::to_string(k)));
  return results;
}

std::vector<Value> Graph::add_call(std::shared_ptr<const Callee> callee, const std::vector<Value>& args) {
  if (!callee || callee->results.empty()) throw std::logic_error("ir: a call needs a callee with results");
  Value c = add(Op::Call, args, callee->results[0], "callee = @" + callee->name);
  nodes_[c.id].callee = callee;
  std::vector<Value> results;
  for (size_t k = 0; k < callee->results.size(); ++k)
    results.push_back(add(Op::Result, {c}, callee->results[k], std::to_string(k)));
  return results;
}

Value Graph::reshaped_from(Value v) const {
  const Node& n = nodes_[v.id];
  if (n.op != Op::Reshape) return v;
  return Value{operands(n)[0]};
}

namespace {

// Spells a graph's identity as text: the disk cache's key (stable across
// processes). Separators delimit its variable-length parts.
class KeyText {
 public:
  explicit KeyText(size_t nodes) { text_.reserve(nodes * 48); }
  void op(Op op) { text_ += op == Op::Parameter ? "P" : short_name(op); }
  void separator(char c) { text_ += c; }
  void symbol(char c) { text_ += c; }
  void count(size_t) {}  // the separators delimit lists
  // Decimal digits, appended without a temporary string.
  void number(int64_t v) {
    char digits[24];
    auto [end, error] = std::to_chars(digits, digits + sizeof(digits), v);
    text_.append(digits, end);
  }
  void optional_text(const std::string& s, char open, char close) {
    if (s.empty()) return;
    text_ += open;
    text_ += s;
    text_ += close;
  }
  void optional_symbol(bool present, char c) {
    if (present) text_ += c;
  }
  void nested(const Graph& g, char open, char close) {
    text_ += open;
    text_ += g.key();
    text_ += close;
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

// A 128-bit hash, a 64-bit word at a time: two independent multiply-rotate
// lanes, each finished with murmur3's fmix64.
class KeyHash {
 public:
  void mix(uint64_t w) {
    ++words_;
    low_ = rotl(low_ ^ (w * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
    high_ = rotl(high_ + (w * 0xc2b2ae3d27d4eb4full), 29) * 0x165667b19e3779f9ull;
  }
  void bytes(const char* p, size_t n) {
    mix(n);
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    if (n > 0) {
      uint64_t w = 0;
      std::memcpy(&w, p, n);
      mix(w);
    }
  }
  Fingerprint finish() const { return {fmix(low_ ^ words_), fmix(high_ ^ (words_ * 0x9e3779b97f4a7c15ull))}; }

 private:
  static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static uint64_t fmix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
  }
  uint64_t low_ = 0x9e3779b97f4a7c15ull, high_ = 0x6a09e667f3bcc909ull, words_ = 0;
};

}  // namespace

template <class Sink>
void Graph::describe(Sink& sink) const {
  for (const Node& n : nodes_) {
    sink.op(n.op);
    OperandIds ids = operands(n);
    sink.count(ids.size());
    sink.separator('(');
    for (int o : ids) {
      sink.number(o);
      sink.separator(',');
    }
    sink.separator(')');
    sink.symbol(static_cast<char>('A' + static_cast<int>(n.type.dtype)));
    sink.count(n.type.shape.size());
    for (int64_t d : n.type.shape) {
      sink.number(d);
      sink.separator('x');
    }
    sink.optional_text(n.attrs.str(), '{', '}');
    sink.optional_symbol(n.combiner != Combiner::None, static_cast<char>('0' + static_cast<int>(n.combiner)));
    sink.count(n.loop ? 1 : 0);
    if (n.loop) {
      sink.nested(*n.loop->cond, '[', ']');
      sink.nested(*n.loop->body, '[', ']');
    }
    sink.separator(';');
  }
  sink.separator('-');
  sink.separator('>');
  sink.count(outputs_.size());
  for (int o : outputs_) {
    sink.number(o);
    sink.separator(',');
  }
  sink.count(aliases_.size());
  for (auto [parameter, output] : aliases_) {
    sink.separator('@');
    sink.number(parameter);
    sink.separator('>');
    sink.number(output);
  }
  if (replicas_.empty()) return;  // (keeps the keys programs had before replication)
  sink.separator('R');
  sink.count(replicas_.size());
  for (int device : replicas_) {
    sink.number(device);
    sink.separator(',');
  }
}

std::string Graph::key() const {
  KeyText text(nodes_.size());
  describe(text);
  return text.take();
}

std::string Graph::difference(const Graph& other) const {
  if (num_parameters_ != other.num_parameters_)
    return std::to_string(num_parameters_) + " parameters instead of " + std::to_string(other.num_parameters_);
  size_t common = std::min(nodes_.size(), other.nodes_.size());
  for (size_t i = 0, parameter = 0; i < common; ++i) {
    const Node &a = nodes_[i], &b = other.nodes_[i];
    std::string where = a.op == Op::Parameter ? "parameter " + std::to_string(parameter++)
                                        : "node " + std::to_string(i) + " (" + short_name(a.op) + ")";
    if (a.op != b.op)
      return "node " + std::to_string(i) + ": " + short_name(a.op) + " instead of " + short_name(b.op);
    if (!(a.type == b.type)) return where + ": " + a.type.mlir() + " instead of " + b.type.mlir();
    if (!(a.attrs == b.attrs)) return where + ": attributes {" + a.attrs.str() + "} instead of {" + b.attrs.str() + "}";
    OperandIds x = operands(a), y = other.operands(b);
    if (!std::equal(x.begin(), x.end(), y.begin(), y.end())) return where + ": other operands";
  }
  if (nodes_.size() != other.nodes_.size())
    return std::to_string(nodes_.size()) + " nodes instead of " + std::to_string(other.nodes_.size());
  if (outputs_ != other.outputs_) return "other outputs";
  if (aliases_ != other.aliases_) return "other donated parameters";
  return key() == other.key() ? "" : "other attributes";
}

size_t Graph::agreement(const Graph& other) const {
  size_t ops = 0, types = 0, common = std::min(nodes_.size(), other.nodes_.size());
  for (size_t i = 0; i < common; ++i) {
    const Node &a = nodes_[i], &b = other.nodes_[i];
    bool op = a.op == b.op;
    ops += op;
    types += op && a.type == b.type;
  }
  return ops * (common + 1) + types;  // the same ops first; the same types among those
}

Attrs::Attrs(std::string text) {
  if (text.empty()) return;
  KeyHash hash;
  hash.bytes(text.data(), text.size());
  Fingerprint f = hash.finish();
  text_ = std::make_shared<const Text>(Text{std::move(text), f.low, f.high});
}

// Reads what key() spells, packed: a word for each node's fixed-size fields,
// its operand ids two to a word, a word per dimension, the attributes' hash.
// The header says how many words follow it, so distinct graphs feed distinct
// word sequences. Once per launch of every program: kept lean.
Fingerprint Graph::fingerprint() const { return rebuilt_unchanged() ? kept_.fingerprint : hash_structure(); }

Fingerprint Graph::hash_structure() const {
  KeyHash hash;
  constexpr uint64_t kSaturated = 0xffff;
  for (const Node& n : nodes_) {
    OperandIds ids = operands(n);
    uint64_t count = std::min<uint64_t>(ids.size(), kSaturated);
    uint64_t rank = std::min<uint64_t>(n.type.shape.size(), kSaturated);
    hash.mix(static_cast<uint64_t>(n.op) | count << 16 | rank << 32 | static_cast<uint64_t>(n.type.dtype) << 48 |
             static_cast<uint64_t>(n.combiner) << 56 | static_cast<uint64_t>(n.loop != nullptr) << 62 |
             static_cast<uint64_t>(!n.attrs.empty()) << 63);
    if (count == kSaturated) hash.mix(ids.size());
    if (rank == kSaturated) hash.mix(n.type.shape.size());
    for (size_t i = 0; i < ids.size(); i += 2)
      hash.mix(static_cast<uint32_t>(ids[i]) |
               (i + 1 < ids.size() ? static_cast<uint64_t>(static_cast<uint32_t>(ids[i + 1])) << 32 : 0));
    for (int64_t d : n.type.shape) hash.mix(static_cast<uint64_t>(d));
    if (!n.attrs.empty()) {
      hash.mix(n.attrs.hash_low());
      hash.mix(n.attrs.hash_high());
    }
    if (n.loop) {
      for (const Graph* region : {n.loop->cond.get(), n.loop->body.get()}) {
        Fingerprint f = region->fingerprint();
        hash.mix(f.low);
        hash.mix(f.high);
      }
    }
  }
  hash.mix(outputs_.size());
  for (int o : outputs_) hash.mix(static_cast<uint32_t>(o));
  hash.mix(aliases_.size());
  for (auto [parameter, output] : aliases_)
    hash.mix(static_cast<uint32_t>(parameter) | static_cast<uint64_t>(static_cast<uint32_t>(output)) << 32);
  if (!replicas_.empty()) {
    hash.mix(replicas_.size());
    for (int device : replicas_) hash.mix(static_cast<uint32_t>(device));
  }
  return hash.finish();
}

namespace {

const char* combiner_op(Combiner c) {  // the MLIR name of a region's combining op
  switch (c) {
    case Combiner::Add: return mlir_name(Op::Add);
    case Combiner::Mul: return mlir_name(Op::Multiply);
    case Combiner::Max: return mlir_name(Op::Maximum);
    case Combiner::Min: return mlir_name(Op::Minimum);
    case Combiner::And: return mlir_name(Op::And);
    case Combiner::Or: return mlir_name(Op::Or);
    case Combiner::Xor: return mlir_name(Op::Xor);
    default: return nullptr;
  }
}

const char* comparison_direction(Combiner c) {
  return c == Combiner::LessThan ? "LT" : c == Combiner::GreaterThan ? "GT" : nullptr;
}


template <class Ids>
std::string type_list(const NodeStore& nodes, const Ids& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ", ";
    s += nodes[ids[i]].type.mlir();
  }
  return s;
}

}  // namespace

void Graph::emit_body(std::string& out, const std::string& prefix, const std::vector<std::string>& parameter_names,
                      const char* terminator, const std::string& indent) const {
  std::vector<std::string> names(nodes_.size());
  size_t next_parameter = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const OperandIds ids = operands(n);
    if (n.op == Op::Parameter) {
      names[i] = parameter_names[next_parameter++];
      continue;
    }
    if (n.op == Op::Result) {
      names[i] = names[ids[0]] + "#" + n.attrs.str();
      continue;
    }
    names[i] = "%" + prefix + std::to_string(i);
    out += indent + names[i];
    if (n.loop) out += ":" + std::to_string(ids.size());
    if (n.callee) out += ":" + std::to_string(n.callee->results.size());
    out += std::string(" = \"") + mlir_name(n.op) + "\"(";
    for (size_t j = 0; j < ids.size(); ++j) {
      if (j) out += ", ";
      out += names[ids[j]];
    }
    out += ")";
    if (n.loop) {
      // Regions name their values after the loop, so nested names never clash.
      std::string types = type_list(nodes_, ids);
      auto region = [&](const Graph& r, const std::string& tag) {
        std::string p = prefix + "w" + std::to_string(i) + tag;
        std::vector<std::string> args;
        out += indent + "^bb0(";
        for (size_t a = 0; a < ids.size(); ++a) {
          args.push_back("%" + p + "a" + std::to_string(a));
          out += (a ? ", " : "") + args.back() + ": " + nodes_[ids[a]].type.mlir();
        }
        out += "):\n";
        r.emit_body(out, p + "_", args, "stablehlo.return", indent + "  ");
      };
      out += " ({\n";
      region(*n.loop->cond, "c");
      out += indent + "}, {\n";
      region(*n.loop->body, "b");
      out += indent + "}) : (" + types + ") -> (" + types + ")\n";
      continue;
    }
    if (n.callee) {
      std::string results;
      for (const Type& t : n.callee->results) results += (results.empty() ? "" : ", ") + t.mlir();
      out += " {" + n.attrs.str() + "} : (" + type_list(nodes_, ids) + ") -> (" + results + ")\n";
      continue;
    }
    if (n.combiner != Combiner::None) {
      // Region over scalars of the first operand's element type.
      std::string scalar = Type{nodes_[ids[0]].type.dtype, {}}.mlir();
      out += " ({\n" + indent + "^bb0(%lhs: " + scalar + ", %rhs: " + scalar + "):\n";
      if (n.combiner == Combiner::Replace) {
        out += indent + "  \"stablehlo.return\"(%rhs) : (" + scalar + ") -> ()\n";
      } else if (const char* direction = comparison_direction(n.combiner)) {
        out += indent + "  %r = \"stablehlo.compare\"(%lhs, %rhs) {comparison_direction = "
               "#stablehlo<comparison_direction " + direction + ">} : (" + scalar + ", " + scalar +
               ") -> tensor<i1>\n";
        out += indent + "  \"stablehlo.return\"(%r) : (tensor<i1>) -> ()\n";
      } else {
        out += indent + "  %r = \"" + combiner_op(n.combiner) + "\"(%lhs, %rhs) : (" + scalar + ", " + scalar +
               ") -> " + scalar + "\n";
        out += indent + "  \"stablehlo.return\"(%r) : (" + scalar + ") -> ()\n";
      }
      out += indent + "})";
    }
    if (!n.attrs.empty()) out += " {" + n.attrs.str() + "}";
    out += " : (" + type_list(nodes_, ids) + ") -> " + n.type.mlir() + "\n";
  }
  out += indent + "\"" + terminator + "\"(";
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (i) out += ", ";
    out += names[outputs_[i]];
  }
  out += ") : (" + type_list(nodes_, outputs_) + ") -> ()\n";
}

std::string Graph::to_mlir() const {
  std::string out = "module @torch_tpu attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = " +
                    std::to_string(std::max<size_t>(replicas_.size(), 1)) + " : i32} {\n";
  out += "  func.func public @main(";
  std::vector<std::string> parameter_names;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].op != Op::Parameter) continue;
    int p = static_cast<int>(parameter_names.size());
    parameter_names.push_back("%arg" + std::to_string(p));
    if (p > 0) out += ", ";
    out += parameter_names.back() + ": " + nodes_[i].type.mlir();
    for (auto [parameter, output] : aliases_)
      if (parameter == p) out += " {tf.aliasing_output = " + std::to_string(output) + " : i32}";
  }
  out += ") -> (" + type_list(nodes_, outputs_) + ") {\n";
  emit_body(out, "", parameter_names, "func.return", "    ");
  out += "  }\n";
  std::vector<const Callee*> emitted;  // each callee's definitions once
  for (const Node& n : nodes_) {
    if (!n.callee) continue;
    bool seen = false;
    for (const Callee* c : emitted) seen = seen || c->name == n.callee->name;
    if (seen) continue;
    emitted.push_back(n.callee.get());
    out += n.callee->text;
    if (!n.callee->text.empty() && n.callee->text.back() != '\n') out += '\n';
  }
  out += "}\n";
  return out;
}

}  // namespace tpu::ir
