#include "engine/metrics.h"

#include <iterator>

namespace tpu::engine {

const char* counter_name(Counter counter) {
  static constexpr const char* kNames[] = {
      "cache_hits", "compiles", "compile_seconds", "disk_cache_hits", "disk_load_seconds", "executions",
      "execute_seconds", "donated_buffers", "host_to_device_transfers", "host_to_device_bytes",
      "device_to_host_transfers", "device_to_host_bytes", "pinned_host_allocations", "collectives",
      "collective_host_bytes",
  };
  static_assert(std::size(kNames) == static_cast<size_t>(Counter::kCount), "one name per counter");
  return kNames[static_cast<size_t>(counter)];
}

void Metrics::record_max(const std::string& name, double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  double& current = counters_[name];
  if (value > current) current = value;
}

void Metrics::add(const std::string& name, double amount) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_[name] += amount;
}

void Metrics::add_fallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++fallbacks_[op];
  counters_["fallbacks"] += 1;
}

std::map<std::string, double> Metrics::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, double> all = counters_;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].counted.load(std::memory_order_relaxed))
      all[counter_name(static_cast<Counter>(i))] += slots_[i].value.load(std::memory_order_relaxed);
  return all;
}

std::map<std::string, int64_t> Metrics::fallbacks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fallbacks_;
}

void Metrics::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.clear();
  fallbacks_.clear();
  for (Slot& slot : slots_) {
    slot.value.store(0.0, std::memory_order_relaxed);
    slot.counted.store(false, std::memory_order_relaxed);
  }
}

Metrics& metrics() {
  static Metrics* instance = new Metrics();  // never destroyed: used at exit
  return *instance;
}

}  // namespace tpu::engine
