// Process-wide counters behind torch_tpu.metrics(). Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tpu::engine {

// The counters bumped on every launch or transfer: atomics, no lock, no string.
// Each is named in metrics() ("cache_hits", ...) once it has been counted.
enum class Counter : uint8_t {
  CacheHits, Compiles, CompileSeconds, DiskCacheHits, DiskLoadSeconds, Executions, ExecuteSeconds,
  DonatedBuffers, HostToDeviceTransfers, HostToDeviceBytes, DeviceToHostTransfers, DeviceToHostBytes,
  PinnedHostAllocations, Collectives, CollectiveHostBytes,
  kCount
};
const char* counter_name(Counter counter);

class Metrics {
 public:
  void add(Counter counter, double amount = 1.0) {
    Slot& slot = slots_[static_cast<size_t>(counter)];
    slot.value.fetch_add(amount, std::memory_order_relaxed);
    if (!slot.counted.load(std::memory_order_relaxed)) slot.counted.store(true, std::memory_order_relaxed);
  }
  // Counters named at run time (a cut's reason); these take a lock.
  void add(const std::string& name, double amount = 1.0);
  void record_max(const std::string& name, double value);
  void add_fallback(const std::string& op);
  std::map<std::string, double> counters() const;
  std::map<std::string, int64_t> fallbacks() const;
  void reset();

 private:
  struct Slot {
    std::atomic<double> value{0.0};
    std::atomic<bool> counted{false};
  };
  std::array<Slot, static_cast<size_t>(Counter::kCount)> slots_;
  mutable std::mutex mutex_;
  std::map<std::string, double> counters_;
  std::map<std::string, int64_t> fallbacks_;
};

Metrics& metrics();

}  // namespace tpu::engine
