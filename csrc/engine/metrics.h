// Process-wide counters behind torch_tpu.metrics(). Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tpu::engine {

// The counters every launch bumps, kept as atomics: no lock and no string on
// the path of each op. They read as the other counters do, by name.
enum class Counter : uint8_t {
  CacheHits, Executions, ExecuteSeconds, DonatedBuffers,
  OpMemoHits, OpMemoRecipes,  // ops built from a remembered graph; graphs remembered (aten/op_memo.h)
  FusedGraphsKept,            // pending graphs rebuilt unchanged in a kept graph: nothing built or hashed
  Count
};

class Metrics {
 public:
  void add(const std::string& name, double amount = 1.0);
  void add(Counter counter, double amount = 1.0) {
    launch_counters_[static_cast<size_t>(counter)].fetch_add(amount, std::memory_order_relaxed);
  }
  void record_max(const std::string& name, double value);
  void add_fallback(const std::string& op);
  std::map<std::string, double> counters() const;
  std::map<std::string, int64_t> fallbacks() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::map<std::string, double> counters_;
  std::map<std::string, int64_t> fallbacks_;
  std::array<std::atomic<double>, static_cast<size_t>(Counter::Count)> launch_counters_{};
};

Metrics& metrics();

}  // namespace tpu::engine
