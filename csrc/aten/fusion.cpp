#include "aten/fusion.h"

#include <c10/util/Exception.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/metrics.h"
#include "engine/runtime.h"
#include "ir/ops.h"
#include "lowering/view.h"

namespace tpu::aten {
namespace {

constexpr int kMaxDevices = 64;

// Ops appended before a cut is forced: bounds compile time and host memory.
size_t max_ops() {
  static const size_t limit = [] {
    const char* v = std::getenv("TORCH_TPU_FUSED_MAX_OPS");
    long n = v != nullptr ? std::strtol(v, nullptr, 10) : 0;
    return n > 0 ? static_cast<size_t>(n) : size_t(4096);
  }();
  return limit;
}

thread_local Cut t_cut_reason = Cut::DataRead;

struct PendingGraph {
  // Recursive: a storage may die (forget_pending) on this thread while a cut
  // runs, e.g. when a warning handler lets Python collect garbage.
  std::recursive_mutex mutex;
  ir::Graph graph;
  std::vector<engine::BufferRef> arguments;  // by parameter position
  // Storages whose buffer is a parameter: (parameter value, position).
  std::unordered_map<StorageValue*, std::pair<ir::Value, int>> bound;
  // Storages with a pending value, in first-write order (= output order);
  // nullptr once the storage died or got a buffer from elsewhere.
  std::vector<StorageValue*> written;
  std::unordered_map<StorageValue*, size_t> written_slot;
  std::vector<const char*> ops;

  ir::Value bind(const engine::BufferRef& buffer, const ir::Type& type) {
    arguments.push_back(buffer);
    return graph.parameter(type);
  }

  void drop_pending(StorageValue* value) {
    auto slot = written_slot.find(value);
    if (slot != written_slot.end()) {
      written[slot->second] = nullptr;
      written_slot.erase(slot);
    }
    bound.erase(value);
    value->pending_node = -1;
    value->in_pending_graph = false;
  }

  void reset() {
    for (StorageValue* value : written)
      if (value != nullptr) value->pending_node = -1, value->in_pending_graph = false;
    for (auto& entry : bound) entry.first->in_pending_graph = false;
    graph = ir::Graph();
    arguments.clear();
    bound.clear();
    written.clear();
    written_slot.clear();
    ops.clear();
  }

  std::string describe() const {
    std::string s = std::to_string(ops.size()) + " ops (";
    size_t first = ops.size() > 8 ? ops.size() - 8 : 0;
    if (first > 0) s += "..., ";
    for (size_t i = first; i < ops.size(); ++i) s += std::string(i > first ? ", " : "") + ops[i];
    return s + ")";
  }

  std::vector<engine::BufferRef> run(int device, Cut reason, const std::vector<ir::Value>& results);
};

std::array<PendingGraph, kMaxDevices> g_pending;

PendingGraph& pending_for(int device) {
  TORCH_INTERNAL_ASSERT(device >= 0 && device < kMaxDevices, "tpu device index out of range: ", device);
  return g_pending[device];
}

std::vector<engine::BufferRef> PendingGraph::run(int device, Cut reason, const std::vector<ir::Value>& results) {
  std::vector<size_t> slots;
  for (size_t slot = 0; slot < written.size(); ++slot) {
    StorageValue* value = written[slot];
    if (value == nullptr || value->pending_node < 0) continue;
    int output = static_cast<int>(graph.num_outputs());
    ir::Value node{value->pending_node};
    graph.add_output(node);
    slots.push_back(slot);
    // Donate the old buffer when only this graph and the storage hold it.
    auto it = bound.find(value);
    if (it != bound.end()) {
      auto [parameter, position] = it->second;
      const engine::BufferRef& old = arguments[position];
      if (old.use_count() == 2 && value->buffer == old && graph.type(parameter) == graph.type(node))
        graph.alias_output(position, output);
    }
  }
  for (ir::Value v : results) graph.add_output(v);
  size_t num_ops = ops.size();
  if (graph.num_outputs() == 0) {
    reset();
    return {};
  }
  std::vector<engine::BufferRef> outputs;
  try {
    outputs = engine::Runtime::get().execute(graph, arguments, device);
  } catch (const pjrt::Error& e) {
    std::string what = describe();
    reset();  // storages keep the buffers they had before the failed graph
    TORCH_CHECK(false, "torch_tpu: a fused graph of ", what, " failed on tpu:", device, ": ", e.what(),
                "\nRun with TORCH_TPU_EAGER_MODE=debug to find the op at fault.");
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    StorageValue* value = written[slots[i]];
    if (value == nullptr) continue;  // died while the graph was launched
    value->buffer = std::move(outputs[i]);
    value->pending_node = -1;
  }
  std::vector<engine::BufferRef> extra(outputs.begin() + slots.size(), outputs.end());
  reset();
  auto& m = engine::metrics();
  m.add("fused_graphs");
  m.add("fused_graph_ops", static_cast<double>(num_ops));
  m.record_max("fused_graph_ops_max", static_cast<double>(num_ops));
  m.add(std::string("fused_cut_") + cut_name(reason));
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
  }
  return "?";
}

bool fused_mode() { return engine::eager_mode() == engine::EagerMode::Fused; }

std::vector<engine::BufferRef> defer(int device, const char* op, const ir::Graph& graph,
                                     const std::vector<ProgramArgument>& arguments,
                                     const std::vector<std::pair<StorageValue*, ir::Value>>& written,
                                     const std::vector<ir::Value>& results) {
  PendingGraph& p = pending_for(device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  std::vector<ir::Value> inputs;
  inputs.reserve(arguments.size());
  for (const ProgramArgument& a : arguments) {
    StorageValue* value = a.storage;
    ir::Value v;
    if (value == nullptr) {
      v = p.bind(a.buffer, a.type);
    } else if (value->pending_node >= 0) {
      v = ir::Value{value->pending_node};
    } else if (auto it = p.bound.find(value); it != p.bound.end()) {
      v = it->second.first;
    } else if (value->buffer) {
      int position = static_cast<int>(p.arguments.size());
      v = p.bind(value->buffer, ir::Type{value->dtype, {value->numel()}});
      p.bound.emplace(value, std::make_pair(v, position));
      value->in_pending_graph = true;
    } else {  // emptied by another thread since the op was built: zeros, as for a fresh storage
      v = ir::full(p.graph, a.type.dtype, 0, a.type.shape);
    }
    // Another thread may have rewritten the storage in another dtype meanwhile.
    if (p.graph.type(v).dtype != a.type.dtype) v = lowering::reinterpret(p.graph, v, a.type.dtype);
    inputs.push_back(v);
  }
  std::vector<ir::Value> mapped = p.graph.append(graph, inputs);
  for (auto [value, v] : written) {
    ir::Value node = mapped[v.id];
    value->pending_node = node.id;
    value->dtype = p.graph.type(node).dtype;
    value->in_pending_graph = true;
    if (p.written_slot.emplace(value, p.written.size()).second) p.written.push_back(value);
  }
  p.ops.push_back(op);
  if (!results.empty()) {
    std::vector<ir::Value> wanted;
    for (ir::Value r : results) wanted.push_back(mapped[r.id]);
    return p.run(device, t_cut_reason, wanted);
  }
  if (p.ops.size() >= max_ops()) p.run(device, Cut::SizeLimit, {});
  return {};
}

void flush(int device, Cut reason) {
  PendingGraph& p = pending_for(device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  if (!p.ops.empty()) p.run(device, reason, {});
}

void flush_all(Cut reason) {
  for (int device = 0; device < kMaxDevices; ++device) {
    PendingGraph& p = g_pending[device];
    std::lock_guard<std::recursive_mutex> lock(p.mutex);
    if (!p.ops.empty()) p.run(device, reason, {});
  }
}

void materialize(StorageValue* value) {
  PendingGraph& p = pending_for(value->device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  if (value->pending_node >= 0) p.run(value->device, t_cut_reason, {});
}

bool has_content(StorageValue* value, ir::DType* dtype) {
  PendingGraph& p = pending_for(value->device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  *dtype = value->dtype;
  return value->pending_node >= 0 || value->buffer != nullptr;
}

void set_buffer(StorageValue* value, engine::BufferRef buffer, ir::DType dtype) {
  PendingGraph& p = pending_for(value->device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  if (value->in_pending_graph) p.drop_pending(value);
  value->buffer = std::move(buffer);
  value->dtype = dtype;
}

void forget_pending(StorageValue* value) {
  if (!value->in_pending_graph) return;  // the common case: no lock needed
  PendingGraph& p = pending_for(value->device);
  std::lock_guard<std::recursive_mutex> lock(p.mutex);
  p.drop_pending(value);
}

CutReasonScope::CutReasonScope(Cut reason) : previous_(t_cut_reason) { t_cut_reason = reason; }
CutReasonScope::~CutReasonScope() { t_cut_reason = previous_; }

}  // namespace tpu::aten
