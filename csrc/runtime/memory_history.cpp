#include "runtime/memory_history.h"

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace tpu::runtime {
namespace {

struct History {
  std::mutex mutex;
  ContextGatherer gatherer;
  size_t max_entries = 0;
  std::deque<MemoryEvent> events;
  std::unordered_map<const void*, LiveBlock> live;  // by the storage's allocator context
};

std::atomic<bool> g_enabled{false};

// Never destroyed: storages may die during static destruction at exit.
History& history() {
  static History* h = new History();
  return *h;
}

int64_t now_us() { return c10::getTime() / 1000; }

void append(History& h, MemoryEvent&& event) {
  if (h.max_entries == 0) return;  // live blocks only ("state")
  h.events.push_back(std::move(event));
  while (h.events.size() > h.max_entries) h.events.pop_front();
}

}  // namespace

void record_memory_history(bool enabled, ContextGatherer gatherer, size_t max_entries) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.gatherer = enabled ? std::move(gatherer) : nullptr;
  h.max_entries = max_entries;
  if (!enabled) {
    h.events.clear();
    h.live.clear();
  }
  g_enabled.store(enabled, std::memory_order_release);
}

bool memory_history_enabled() { return g_enabled.load(std::memory_order_acquire); }

void note_allocation(const void* key, uintptr_t address, size_t nbytes, int device) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  History& h = history();
  ContextGatherer gatherer;
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    gatherer = h.gatherer;
  }
  // Gathered outside the lock: the gatherer may take the GIL.
  std::shared_ptr<c10::GatheredContext> context = gatherer ? gatherer() : nullptr;
  std::lock_guard<std::mutex> lock(h.mutex);
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  h.live[key] = LiveBlock{address, nbytes, device, context};
  append(h, MemoryEvent{MemoryEvent::Action::Alloc, address, nbytes, device, now_us(), std::move(context)});
}

void note_free(const void* key) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  auto it = h.live.find(key);
  if (it == h.live.end()) return;  // made before recording began
  LiveBlock block = std::move(it->second);
  h.live.erase(it);
  // No stack for a free: gathering one here would run at every tensor's death, often
  // inside the interpreter's own teardown of a frame.
  append(h, MemoryEvent{MemoryEvent::Action::Free, block.address, block.nbytes, block.device, now_us(), nullptr});
}

MemorySnapshot memory_snapshot() {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  MemorySnapshot out;
  out.blocks.reserve(h.live.size());
  for (const auto& [key, block] : h.live) out.blocks.push_back(block);
  std::sort(out.blocks.begin(), out.blocks.end(),
            [](const LiveBlock& a, const LiveBlock& b) { return a.address < b.address; });
  out.events.assign(h.events.begin(), h.events.end());
  return out;
}

std::vector<std::string> largest_live_storages(int device, size_t n) {
  std::vector<LiveBlock> blocks;
  {
    History& h = history();
    std::lock_guard<std::mutex> lock(h.mutex);
    for (const auto& [key, block] : h.live)
      if (block.device == device) blocks.push_back(block);
  }
  std::sort(blocks.begin(), blocks.end(), [](const LiveBlock& a, const LiveBlock& b) { return a.nbytes > b.nbytes; });
  if (blocks.size() > n) blocks.resize(n);
  std::vector<torch::CapturedTraceback*> contexts;
  for (const LiveBlock& b : blocks)
    if (b.context) contexts.push_back(static_cast<torch::CapturedTraceback*>(b.context.get()));
  torch::SymbolizedTracebacks symbolized = torch::symbolize(contexts);
  std::vector<std::string> out;
  size_t next = 0;
  for (const LiveBlock& b : blocks) {
    std::string where = "an unknown place";
    if (b.context) {
      for (uint64_t frame : symbolized.tracebacks[next]) {
        const auto& f = symbolized.all_frames[frame];
        bool user = !f.filename.empty() && f.filename.find("/torch/") == std::string::npos;
        if (user) {
          where = f.filename + ":" + std::to_string(f.lineno) + " in " + f.funcname;
          break;
        }
      }
      ++next;
    }
    out.push_back(std::to_string(b.nbytes) + " bytes from " + where);
  }
  return out;
}

}  // namespace tpu::runtime
