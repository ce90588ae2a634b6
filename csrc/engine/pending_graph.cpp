#include "engine/pending_graph.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <pthread.h>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "engine/background_compile.h"
#include "engine/config.h"
#include "engine/diagnostics.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "engine/trace.h"
#include "ir/ops.h"

namespace tpu::engine {
namespace {

// Ops appended before a cut is forced: bounds compile time and host memory.
size_t max_ops() {
  static const size_t limit = static_cast<size_t>(config::positive_integer(config::Knob::FusedMaxOps, 4096));
  return limit;
}

// TORCH_TPU_FUSED_MERGE_BACKWARD=1: backward joins the forward's pending graph
// instead of starting its own, so activations saved for backward stay inside one
// program and are never written out (lower peak memory; the forward no longer runs
// while backward is recorded).
bool merge_backward() {
  static const bool merge = config::flag(config::Knob::FusedMergeBackward);
  return merge;
}

// Autograd's device threads, which record backward passes; c10 names them
// "pt_autograd_<device>" before they run any work.
bool on_autograd_thread() {
  thread_local const bool autograd = [] {
    char name[16] = {};
    return pthread_getname_np(pthread_self(), name, sizeof(name)) == 0 &&
           std::strncmp(name, "pt_autograd_", 12) == 0;
  }();
  return autograd;
}

thread_local Cut t_cut_reason = Cut::DataRead;

// A stable copy of an op's name: the pending graph lists its ops' names for a
// failed graph's message, after the ops returned, and some ops name
// themselves with a temporary string ("add_.out"). Names are mostly literals,
// so a per-thread cache by address (checked by content, since a temporary's
// address may be reused) answers without the lock.
const char* interned(const char* name) {
  struct Entry {
    const char* name = nullptr;
    const char* copy = nullptr;
  };
  thread_local std::array<Entry, 256> recent;
  Entry& entry = recent[(reinterpret_cast<uintptr_t>(name) >> 3) % recent.size()];
  if (entry.name == name && std::strcmp(name, entry.copy) == 0) return entry.copy;
  static std::mutex mutex;
  static auto* names = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mutex);
  entry = {name, names->emplace(name).first->c_str()};
  return entry.copy;
}

struct PendingGraph {
  // Recursive: a storage may die (forget_pending) on this thread while a cut
  // runs, e.g. when a warning handler lets Python collect garbage.
  std::recursive_mutex mutex;
  ir::Graph graph;
  std::vector<BufferRef> arguments;  // by parameter position
  // Storages whose buffer is a parameter (see StorageValue::bound_node), and
  // storages with a pending value, in first-write order (= output order);
  // nullptr once the storage died or got a buffer from elsewhere.
  std::vector<StorageValue*> bound;
  std::vector<StorageValue*> written;
  std::vector<const char*> ops;
  // The graph's size before and after each op's own nodes: op_by_op() runs
  // each op as one program, and each node between ops (a storage's flat view,
  // a reinterpretation, the outputs' shapes) as one, so that the programs are
  // the same whichever graph the op was recorded in.
  std::vector<size_t> op_begins, op_ends;
  std::thread::id recorder;  // the thread that appended the pending ops
  uint64_t runs = 0;  // graphs run so far: a capture is valid while this stays put
  std::vector<size_t> spare_slots;  // run()'s lists, kept between cuts
  std::vector<ir::Type> spare_types;

  ir::Value bind(const BufferRef& buffer, const ir::Type& type) {
    arguments.push_back(buffer);
    return graph.parameter(type);
  }

  // `parameter` holds value's buffer; returns it as the storage's flat value.
  ir::Value add_bound(StorageValue* value, ir::Value parameter, int position) {
    ir::Value flat = flat_storage_value(graph, parameter);
    value->bound_node = parameter.id;
    value->bound_flat = flat.id;
    value->bound_position = position;
    value->bound_slot = static_cast<int>(bound.size());
    bound.push_back(value);
    value->in_pending_graph = true;
    return flat;
  }

  static void unbind(StorageValue* value) {
    value->bound_node = value->bound_flat = value->bound_position = value->bound_slot = -1;
  }

  void drop_pending(StorageValue* value) {
    if (value->written_slot >= 0) written[value->written_slot] = nullptr;
    if (value->bound_slot >= 0) bound[value->bound_slot] = nullptr;
    unbind(value);
    value->written_slot = -1;
    value->pending_node = -1;
    value->in_pending_graph = false;
  }

  // What the graph returns as the new buffer of `value`, written in it: a bound
  // old buffer's shape is kept, so that the old buffer can be donated to it.
  ir::Value written_result(StorageValue* value) {
    ir::Value node{value->pending_node};
    if (value->bound_slot < 0) return storage_result(graph, node, nullptr);
    return storage_result(graph, node, &graph.type(ir::Value{value->bound_node}).shape);
  }

  void reset() {
    for (StorageValue* value : written) {
      if (value == nullptr) continue;
      value->pending_node = -1;
      if (value->buffer) value->dtype = value->buffer_dtype;  // a failed graph's pending dtype is gone
    }
    for (StorageValue* value : bound)
      if (value != nullptr) unbind(value);
    // Flags last, once per storage: a storage whose flag is clear may be freed at
    // once by its owner, without the lock (forget_pending).
    for (StorageValue* value : bound)
      if (value != nullptr && value->written_slot < 0) value->in_pending_graph = false;
    for (StorageValue* value : written)
      if (value != nullptr) value->written_slot = -1, value->in_pending_graph = false;
    graph.clear();  // its memory is kept for the next graph
    arguments.clear();
    bound.clear();
    written.clear();
    ops.clear();
    op_begins.clear();
    op_ends.clear();
  }

  // Graphs run before, kept to rebuild the next graph in (ir::Graph::restart):
  // a training step cuts its ops into the same graphs in the same order every
  // step, so the graph that followed the one just run is likely the next one,
  // and rebuilding it in place copies, frees and hashes nothing. Decoding with a
  // growing cache runs another graph at every length, each after the graph of
  // the length before: many are kept, within a bound on their nodes.
  struct KeptGraph {
    bool used = false;
    ir::Fingerprint after;  // the graph run just before it
    ir::Fingerprint self;   // its own, as it ran
    ir::Graph graph;
  };
  static constexpr size_t kKeptGraphs = 64;
  static constexpr size_t kKeptNodes = size_t(1) << 17;  // ~20 MB of nodes at most
  std::array<KeptGraph, kKeptGraphs> kept;
  size_t next_filed = 0;  // the slot a graph is filed in when none is free
  bool has_last_run = false;
  ir::Fingerprint last_run;

  KeptGraph* kept_after(const ir::Fingerprint& f) {
    for (KeptGraph& k : kept)
      if (k.used && k.after == f) return &k;
    return nullptr;
  }

  // Drops kept graphs other than `filed`, oldest filing slot first, until the
  // kept nodes are within kKeptNodes.
  void bound_kept(const KeptGraph* filed) {
    size_t nodes = 0;
    for (const KeptGraph& k : kept)
      if (k.used) nodes += k.graph.size();
    for (size_t i = 0; nodes > kKeptNodes && i < kKeptGraphs; ++i) {
      KeptGraph& k = kept[(next_filed + i) % kKeptGraphs];
      if (!k.used || &k == filed) continue;
      nodes -= k.graph.size();
      k.used = false;
      k.graph = ir::Graph();
    }
  }

  // reset() after the graph of fingerprint `ran` ran: files it as the graph that follows
  // the one run before it, and restarts from the graph that followed it last time, if kept.
  void reset_after_run(const ir::Fingerprint& ran) {
    if (has_last_run) {
      KeptGraph* slot = kept_after(last_run);
      for (size_t i = 0; slot == nullptr && i < kKeptGraphs; ++i)
        if (!kept[i].used) slot = &kept[i];
      if (slot == nullptr) {
        slot = &kept[next_filed];
        next_filed = (next_filed + 1) % kKeptGraphs;
      }
      slot->used = true;
      slot->after = last_run;
      slot->self = ran;
      std::swap(slot->graph, graph);
      bound_kept(slot);
    }
    last_run = ran;
    has_last_run = true;
    reset();  // empties what `graph` holds now: the slot's old graph, or the graph run
    if (KeptGraph* next = kept_after(ran)) {
      std::swap(next->graph, graph);
      next->used = false;
      graph.restart(next->self);
    }
  }

  std::string describe() const {
    std::string s = std::to_string(ops.size()) + " ops (";
    size_t first = ops.size() > 8 ? ops.size() - 8 : 0;
    if (first > 0) s += "..., ";
    for (size_t i = first; i < ops.size(); ++i) s += std::string(i > first ? ", " : "") + ops[i];
    return s + ")";
  }

  std::vector<BufferRef> run(int device, Cut reason, const std::vector<ir::Value>& results);
  // Throws an out-of-memory Error, before anything is launched and with the
  // graph as it was (its outputs removed), when its outputs alone need more
  // than the device has free. A launch that failed for memory would leave every
  // storage the graph writes (tensors made before the one too large among them)
  // without a value; refused here, they keep their pending values and a later
  // read, after the user frees memory, runs them.
  void check_memory(int device);
  // Runs the graph (outputs added) op by op, each op a program of its own, as
  // strict mode would; returns the buffers of its outputs.
  std::vector<BufferRef> op_by_op(int device);
  // The graph's outputs; queues its compile and runs its ops one by one where
  // its program is not in the cache.
  std::vector<BufferRef> execute(int device, const ir::Fingerprint& fingerprint);
};

std::vector<BufferRef> PendingGraph::op_by_op(int device) {
  std::vector<size_t> ends;
  size_t at = 0;
  for (size_t op = 0; op <= op_ends.size(); ++op) {
    size_t begin = op < op_ends.size() ? op_begins[op] : graph.size();
    for (; at < begin; ++at) ends.push_back(at + 1);
    if (op < op_ends.size() && op_ends[op] > at) ends.push_back(at = op_ends[op]);
  }
  std::vector<ir::GraphPiece> pieces = graph.split(ends);
  std::vector<BufferRef> values(graph.size());  // each value read across pieces, once computed
  for (size_t id = 0, position = 0; id < graph.size(); ++id)
    if (graph.is_parameter(ir::Value{static_cast<int>(id)})) values[id] = arguments[position++];
  // An intermediate is dropped after the last piece that reads it, so that the
  // peak memory is strict mode's, not every intermediate of the graph at once.
  constexpr size_t kKept = static_cast<size_t>(-1);
  std::vector<size_t> last_reader(graph.size(), 0);
  for (size_t k = 0; k < pieces.size(); ++k)
    for (int id : pieces[k].inputs) last_reader[id] = k;
  for (int id : graph.outputs()) last_reader[id] = kKept;
  Runtime& runtime = Runtime::get();
  for (size_t k = 0; k < pieces.size(); ++k) {
    ir::GraphPiece& piece = pieces[k];
    if (piece.outputs.empty()) continue;
    std::vector<BufferRef> args;
    args.reserve(piece.inputs.size());
    for (int id : piece.inputs) args.push_back(values[id]);
    for (int id : piece.inputs)
      if (last_reader[id] == k) values[id].reset();
    std::vector<BufferRef> results = runtime.execute(piece.graph, args, device);
    for (size_t j = 0; j < results.size(); ++j) values[piece.outputs[j]] = std::move(results[j]);
  }
  std::vector<BufferRef> outputs;
  outputs.reserve(graph.num_outputs());
  for (int id : graph.outputs()) outputs.push_back(values[id]);
  return outputs;
}

std::vector<BufferRef> PendingGraph::execute(int device, const ir::Fingerprint& fingerprint) {
  Runtime& runtime = Runtime::get();
  if (!background_compile_enabled()) return runtime.execute(graph, fingerprint, arguments, device);
  if (auto exe = runtime.find(graph, fingerprint, device)) return runtime.launch(*exe, graph, arguments, device);
  // The compiler gets a copy: the ops' launches below overlap the compile.
  ir::Graph copy = graph;
  if (!compile_in_background(std::move(copy), fingerprint, describe(), device))
    return runtime.execute(graph, fingerprint, arguments, device);
  metrics().add("fused_graphs_run_op_by_op");
  return op_by_op(device);
}

std::array<PendingGraph, kMaxDevices> g_pending;

PendingGraph& pending_for(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw std::runtime_error("torch_tpu: tpu device index out of range: " + std::to_string(device));
  return g_pending[device];
}

void PendingGraph::check_memory(int device) {
  // Below this the device's free memory is not asked for (on XLA:CPU that reads /proc).
  constexpr int64_t kCheckedFrom = int64_t{256} << 20;
  int64_t needed = 0;
  for (int id : graph.outputs()) {
    const ir::Type& type = graph.type(ir::Value{id});
    needed += ir::numel(type.shape) * ir::byte_width(type.dtype);
  }
  if (needed < kCheckedFrom) return;
  int64_t free_bytes = 0;
  try {
    free_bytes = Runtime::get().memory_info(device).first;
  } catch (const pjrt::Error&) {
    return;  // the plugin reports no memory: the launch finds out
  }
  if (needed <= free_bytes) return;
  graph.clear_outputs();  // added by run() only: the graph is as it was before
  constexpr int kResourceExhausted = 8;  // PJRT_Error_Code_RESOURCE_EXHAUSTED
  throw pjrt::Error("Out of memory: a fused graph of " + describe() + " needs " + std::to_string(needed >> 20) +
                        " MiB for the tensors it writes, and tpu:" + std::to_string(device) + " has " +
                        std::to_string(free_bytes >> 20) +
                        " MiB free. Nothing was run: its tensors keep their values once memory is freed",
                    kResourceExhausted);
}

std::vector<BufferRef> PendingGraph::run(int device, Cut reason, const std::vector<ir::Value>& results) {
  ++runs;
  trace::ScopedName trace_name("fused graph");
  trace::Span span(trace::Kind::Cut, device);
  if (span.active()) {
    span.event().name = std::string("cut: ") + cut_name(reason);
    span.event().args = {{"ops", std::to_string(ops.size())}, {"last_op", ops.empty() ? "" : ops.back()}};
  }
  // The written storages' slots and their new buffers' types, in lists kept from the
  // last run (a re-entered run gets empty ones): no allocation per cut.
  std::vector<size_t> slots = std::move(spare_slots);
  std::vector<ir::Type> types = std::move(spare_types);
  slots.clear();
  types.clear();
  for (size_t slot = 0; slot < written.size(); ++slot) {
    StorageValue* value = written[slot];
    if (value == nullptr || value->pending_node < 0) continue;
    int output = static_cast<int>(graph.num_outputs());
    ir::Value node = written_result(value);
    // Donate the old buffer when only this graph and the storage hold it.
    if (value->bound_slot >= 0) {
      ir::Value parameter{value->bound_node};
      int position = value->bound_position;
      const BufferRef& old = arguments[position];
      if (old.use_count() == 2 && value->buffer == old && graph.type(parameter) == graph.type(node))
        graph.alias_output(position, output);
    }
    graph.add_output(node);
    types.push_back(graph.type(node));
    slots.push_back(slot);
  }
  for (ir::Value v : results) graph.add_output(v);
  size_t num_ops = ops.size();
  if (graph.num_outputs() == 0) {
    reset();
    return {};
  }
  check_memory(device);
  const ir::Fingerprint fingerprint = graph.fingerprint();
  if (graph.rebuilt_unchanged()) metrics().add(Counter::FusedGraphsKept);
  std::vector<BufferRef> outputs;
  try {
    outputs = execute(device, fingerprint);
  } catch (const pjrt::Error& e) {
    auto what = std::make_shared<const std::string>("a fused graph of " + describe() + " failed on tpu:" +
                                                    std::to_string(device) + ": " + e.what());
    // What the graph was to compute is gone: its storages say so when read,
    // rather than give their value from before the graph, or zeros.
    for (StorageValue* value : written)
      if (value != nullptr && value->pending_node >= 0) value->lost = what;
    reset();
    throw std::runtime_error("torch_tpu: " + *what + "\nRun with TORCH_TPU_EAGER_MODE=debug to find the op at fault.");
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    StorageValue* value = written[slots[i]];
    if (value == nullptr) continue;  // died while the graph was launched
    value->hold(std::move(outputs[i]), types[i]);
    value->pending_node = -1;
  }
  std::vector<BufferRef> extra(outputs.begin() + slots.size(), outputs.end());
  spare_slots = std::move(slots);
  spare_types = std::move(types);
  reset_after_run(fingerprint);
  auto& m = metrics();
  m.add("fused_graphs");
  m.add("fused_graph_ops", static_cast<double>(num_ops));
  m.record_max("fused_graph_ops_max", static_cast<double>(num_ops));
  m.add(std::string("fused_cut_") + cut_name(reason));
  // A compile that failed in the background surfaces here, after this graph's
  // values are safe in their storages.
  if (auto error = take_background_error(device)) throw std::runtime_error(*error);
  return extra;
}

}  // namespace

const char* cut_name(Cut reason) {
  switch (reason) {
    case Cut::DataRead: return "data_read";
    case Cut::Fallback: return "fallback";
    case Cut::Sync: return "sync";
    case Cut::SizeLimit: return "size_limit";
    case Cut::ModeSwitch: return "mode_switch";
    case Cut::OptimizerStep: return "optimizer_step";
    case Cut::ThreadSwitch: return "thread_switch";
  }
  return "?";
}

bool fused_mode() { return eager_mode() == EagerMode::Fused; }

namespace {
// defer()'s body; `append` adds the op's nodes to the pending graph, given the
// values of its graph's parameters, and maps each of its nodes to its new value.
template <class Append>
std::vector<BufferRef> append_op(int device, const char* op, std::span<const ProgramArgument> arguments,
                                 std::span<const std::pair<StorageValue*, ir::Value>> written,
                                 std::span<const ir::Value> results, Append&& append) {
  PendingGraph& p = pending_for(device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  // Ops from another thread start a new graph. Backward runs on autograd's
  // device thread, so the forward graph executes while backward is recorded,
  // and the backward graph while the optimizer is: a training step overlaps
  // host and device instead of alternating between them. Merging backward
  // keeps only the second cut.
  if (!p.ops.empty() && p.recorder != std::this_thread::get_id() && !(merge_backward() && on_autograd_thread()))
    p.run(device, Cut::ThreadSwitch, {});
  p.recorder = std::this_thread::get_id();
  // Per-thread buffers, reused: the op's operands and its node mapping, once per op.
  thread_local std::vector<ir::Value> inputs;
  inputs.clear();
  for (const ProgramArgument& a : arguments) {
    StorageValue* value = a.storage;
    ir::Value v;
    if (value == nullptr) {
      v = p.bind(a.buffer, a.type);
    } else if (value->pending_node >= 0) {
      v = ir::Value{value->pending_node};
    } else if (value->bound_slot >= 0) {
      v = ir::Value{value->bound_flat};
    } else if (value->buffer) {
      int position = static_cast<int>(p.arguments.size());
      v = p.add_bound(value, p.bind(value->buffer, value->buffer_type()), position);
    } else {  // emptied by another thread since the op was built: zeros, as for a fresh storage
      v = ir::full(p.graph, a.type.dtype, 0, a.type.shape);
    }
    // Another thread may have rewritten the storage in another dtype meanwhile.
    if (p.graph.type(v).dtype != a.type.dtype) v = ir::reinterpret(p.graph, v, a.type.dtype);
    inputs.push_back(v);
  }
  thread_local std::vector<ir::Value> mapped;
  p.op_begins.push_back(p.graph.size());
  append(p.graph, std::span<const ir::Value>(inputs), mapped);
  p.op_ends.push_back(p.graph.size());
  for (auto [value, v] : written) {
    ir::Value node = mapped[v.id];
    value->lost.reset();
    value->pending_node = node.id;
    value->dtype = p.graph.type(node).dtype;
    value->in_pending_graph = true;
    if (value->written_slot < 0) {
      value->written_slot = static_cast<int>(p.written.size());
      p.written.push_back(value);
    }
  }
  p.ops.push_back(interned(op));
  if (!results.empty()) {
    std::vector<ir::Value> wanted;
    for (ir::Value r : results) wanted.push_back(mapped[r.id]);
    return p.run(device, t_cut_reason, wanted);
  }
  if (p.ops.size() >= max_ops()) p.run(device, Cut::SizeLimit, {});
  return {};
}
}  // namespace

std::vector<BufferRef> defer(int device, const char* op, ir::Graph&& graph,
                             std::span<const ProgramArgument> arguments,
                             std::span<const std::pair<StorageValue*, ir::Value>> written,
                             std::span<const ir::Value> results) {
  return append_op(device, op, arguments, written, results,
                   [&](ir::Graph& pending, std::span<const ir::Value> inputs, std::vector<ir::Value>& mapped) {
                     pending.append(std::move(graph), inputs, mapped);
                   });
}

void defer_copy(int device, const char* op, const ir::Graph& graph, uint64_t stamp,
                std::span<const ProgramArgument> arguments,
                std::span<const std::pair<StorageValue*, ir::Value>> written) {
  if (arguments.size() != graph.num_parameters()) throw std::logic_error("defer_copy: one argument per parameter");
  append_op(device, op, arguments, written, {},
            [&](ir::Graph& pending, std::span<const ir::Value> inputs, std::vector<ir::Value>& mapped) {
              pending.append_remembered(graph, stamp, inputs, mapped);
            });
}

void flush(int device, Cut reason) {
  PendingGraph& p = pending_for(device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  if (!p.ops.empty()) p.run(device, reason, {});
}

void flush_all(Cut reason) {
  for (int device = 0; device < kMaxDevices; ++device) flush(device, reason);
}

void materialize(StorageValue* value) {
  PendingGraph& p = pending_for(value->device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  if (value->pending_node >= 0) p.run(value->device, t_cut_reason, {});
  value->check_not_lost();
}

bool has_content(StorageValue* value, ir::DType* dtype) {
  PendingGraph& p = pending_for(value->device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  value->check_not_lost();
  *dtype = value->dtype;
  return value->pending_node >= 0 || value->buffer != nullptr;
}

void content_dtypes(std::span<StorageValue* const> values, std::span<int64_t> dtypes) {
  if (values.empty()) return;
  PendingGraph& p = pending_for(values[0]->device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  for (size_t i = 0; i < values.size(); ++i) {
    StorageValue* value = values[i];
    if (value->device != values[0]->device) throw std::logic_error("content_dtypes: storages of two devices");
    value->check_not_lost();
    dtypes[i] = value->pending_node >= 0 || value->buffer != nullptr ? static_cast<int64_t>(value->dtype) : -1;
  }
}

void set_buffer(StorageValue* value, BufferRef buffer, const ir::Type& type) {
  PendingGraph& p = pending_for(value->device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  if (value->in_pending_graph) p.drop_pending(value);
  value->hold(std::move(buffer), type);
}

void reshape_buffer(StorageValue* value, const ir::Shape& shape) {
  ir::Graph g;
  ir::Value old = g.parameter(value->buffer_type());
  g.add_output(ir::reshape(g, old, shape));
  auto result = Runtime::get().execute(g, {value->buffer}, value->device);
  value->hold(std::move(result.at(0)), g.type(ir::Value{g.outputs()[0]}));
}

void copy_bytes(StorageValue& from, StorageValue& to) {
  materialize(&from);
  if (!from.buffer) return;  // nothing written yet: the fresh storage reads as zeros too
  ir::Graph g;
  ir::Value old = flat_storage_value(g, g.parameter(from.buffer_type()));
  ir::Value bytes = ir::reinterpret(g, old, ir::DType::U8);
  int64_t have = g.type(bytes).shape[0], want = static_cast<int64_t>(to.nbytes);
  g.add_output(want >= have ? ir::pad(g, bytes, ir::constant(g, ir::DType::U8, 0), {0}, {want - have})
                            : ir::slice(g, bytes, {0}, {want}));
  std::vector<BufferRef> result;
  try {
    result = Runtime::get().execute(g, {from.buffer}, from.device);
  } catch (const pjrt::Error& e) {
    throw std::runtime_error(std::string("torch_tpu: resizing a storage failed: ") + e.what());
  }
  set_buffer(&to, std::move(result.at(0)), ir::Type{ir::DType::U8, {want}});
}

void forget_pending(StorageValue* value) {
  if (!value->in_pending_graph) return;  // the common case: no lock needed
  PendingGraph& p = pending_for(value->device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  p.drop_pending(value);
}

uint64_t begin_capture(int device) {
  PendingGraph& p = pending_for(device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  if (!p.ops.empty()) p.run(device, Cut::Sync, {});
  return p.runs;
}

void abandon_capture(int device) {
  PendingGraph& p = pending_for(device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  p.reset();
}

std::shared_ptr<CapturedProgram> CapturedProgram::seal(int device, uint64_t token,
                                                       std::span<StorageValue* const> inputs,
                                                       std::span<StorageValue* const> outputs) {
  PendingGraph& p = pending_for(device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  if (p.runs != token) return nullptr;  // cut by a data read or a CPU fallback: nothing to seal
  auto program = std::make_shared<CapturedProgram>();
  program->device_ = device;
  program->num_ops_ = p.ops.size();
  std::unordered_map<StorageValue*, int> input_of;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k] != nullptr) input_of.emplace(inputs[k], static_cast<int>(k));
  auto& parameters = program->parameters_;
  for (size_t position = 0; position < p.arguments.size(); ++position)
    parameters.push_back({-1, p.arguments[position], {}});
  auto bind_input_or_constant = [&](StorageValue* v) {
    if (v->buffer == nullptr) throw std::runtime_error("torch_tpu: a compiled graph returned a tensor that was never written");
    int position = static_cast<int>(p.arguments.size());
    ir::Type type = v->buffer_type();
    ir::Value param = p.bind(v->buffer, type);
    parameters.push_back({-1, v->buffer, type});
    p.add_bound(v, param, position);
  };
  for (StorageValue* v : p.bound)
    if (v != nullptr) parameters[v->bound_position].type = p.graph.type(ir::Value{v->bound_node});
  // Parameters with no storage (scalars, uploads) keep their buffer: constants of the program.
  std::unordered_map<StorageValue*, int> storage_index;
  std::vector<StorageValue*> output_values;
  auto result_for = [&](StorageValue* v) {
    auto it = storage_index.find(v);
    if (it != storage_index.end()) return it->second;
    if (v->pending_node < 0 && v->bound_slot < 0) bind_input_or_constant(v);
    // A storage the graph only reads returns its buffer as it is.
    ir::Value node = v->pending_node >= 0 ? p.written_result(v) : ir::Value{v->bound_node};
    int result = static_cast<int>(p.graph.num_outputs());
    p.graph.add_output(node);
    int index = static_cast<int>(program->output_storages_.size());
    program->output_storages_.push_back({result, v->nbytes});
    output_values.push_back(v);
    storage_index.emplace(v, index);
    return index;
  };
  for (StorageValue* v : outputs) program->output_storage_of_.push_back(v == nullptr ? -1 : result_for(v));
  for (auto [v, k] : input_of)
    if (v->pending_node >= 0)
      program->mutated_inputs_.emplace_back(k, program->output_storages_[result_for(v)].result);
  for (StorageValue* v : p.bound)
    if (auto it = v != nullptr ? input_of.find(v) : input_of.end(); it != input_of.end()) {
      parameters[v->bound_position].input = it->second;
      parameters[v->bound_position].constant = nullptr;  // not kept alive by the program
    }
  program->graph_ = std::move(p.graph);
  p.reset();  // the captured storages get their values from the first run below
  program->plain_graph_ = program->graph_;
  // A mutated input's old buffer goes to its new value: optimizer state is never held twice.
  // Not a 1-element input's: it saves nothing, and a scalar's buffer may be shared
  // (see scalar_to_device), which would keep the whole program from donating.
  for (auto [k, result] : program->mutated_inputs_)
    for (size_t position = 0; position < parameters.size(); ++position)
      if (parameters[position].input == k && ir::numel(parameters[position].type.shape) > 1 &&
          parameters[position].type == program->graph_.type(ir::Value{program->graph_.outputs()[result]}))
        program->graph_.alias_output(static_cast<int>(position), result);
  program->executable_ = Runtime::get().prepare(program->graph_, device);
  std::vector<BufferRef> buffers = program->launch(inputs);
  for (size_t i = 0; i < output_values.size(); ++i)
    output_values[i]->hold(buffers[program->output_storages_[i].result],
                           program->result_type(program->output_storages_[i].result));
  return program;
}

std::vector<BufferRef> CapturedProgram::execute(std::span<StorageValue* const> inputs) const {
  std::vector<BufferRef> args;
  args.reserve(parameters_.size());
  for (const Parameter& parameter : parameters_) {
    if (parameter.input < 0) {
      args.push_back(parameter.constant);
      continue;
    }
    if (static_cast<size_t>(parameter.input) >= inputs.size())
      throw std::runtime_error("torch_tpu: compiled graph called with " + std::to_string(inputs.size()) +
                                  " inputs");
    StorageValue* v = inputs[parameter.input];
    if (v == nullptr)
      throw std::runtime_error("torch_tpu: input " + std::to_string(parameter.input) +
                                  " of a compiled graph is not a tpu tensor");
    if (v->in_pending_graph) flush(v->device, Cut::DataRead);  // the pending graph may hold its buffer
    materialize(v);
    if (!(v->buffer && v->dtype == parameter.type.dtype && v->numel() == ir::numel(parameter.type.shape)))
      throw std::runtime_error("torch_tpu: input " + std::to_string(parameter.input) +
                                  " of a compiled graph has another storage than at capture");
    // The same value in a buffer of another shape than at capture (flat from an
    // upload, shaped from a program): reshaped once, the storage keeps the new buffer.
    if (v->buffer_shape != parameter.type.shape) reshape_buffer(v, parameter.type.shape);
    args.push_back(v->buffer);
  }
  // Donate only buffers that nothing but their storage (and `args`) holds.
  bool donate = true;
  for (auto [parameter, result] : graph_.aliases()) donate = donate && args[parameter].use_count() == 2;
  trace::ScopedName trace_name("compiled graph");
  try {
    if (donate) return Runtime::get().launch(*executable_, graph_, args, device_);
    if (!plain_executable_) plain_executable_ = Runtime::get().prepare(plain_graph_, device_);
    return Runtime::get().launch(*plain_executable_, plain_graph_, args, device_);
  } catch (const pjrt::Error& e) {
    throw std::runtime_error("torch_tpu: a compiled graph of " + std::to_string(num_ops_) + " ops failed on tpu:" +
                             std::to_string(device_) + ": " + e.what());
  }
}

std::vector<BufferRef> CapturedProgram::launch(std::span<StorageValue* const> inputs) const {
  std::vector<BufferRef> buffers = execute(inputs);
  for (auto [k, result] : mutated_inputs_) set_buffer(inputs[k], buffers[result], result_type(result));
  return buffers;
}

CutReasonScope::CutReasonScope(Cut reason) : previous_(t_cut_reason) { t_cut_reason = reason; }
CutReasonScope::~CutReasonScope() { t_cut_reason = previous_; }

}  // namespace tpu::engine
