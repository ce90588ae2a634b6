#include "engine/metrics.h"

#include <iterator>

namespace tpu::engine {
namespace {
constexpr const char* kCounterNames[] = {"cache_hits", "executions", "execute_seconds", "donated_buffers",
                                       "op_memo_hits", "op_memo_recipes", "fused_graphs_kept"};
static_assert(std::size(kCounterNames) == static_cast<size_t>(Counter::Count));
}  // namespace

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
  std::map<std::string, double> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all = counters_;
  }
  for (size_t i = 0; i < launch_counters_.size(); ++i)
    if (double value = launch_counters_[i].load(std::memory_order_relaxed); value != 0) all[kCounterNames[i]] += value;
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
  for (auto& counter : launch_counters_) counter.store(0, std::memory_order_relaxed);
}

Metrics& metrics() {
  static Metrics* instance = new Metrics();  // never destroyed: used at exit
  return *instance;
}

}  // namespace tpu::engine
