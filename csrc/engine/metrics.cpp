#include "engine/metrics.h"

namespace tpu::engine {

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
  return counters_;
}

std::map<std::string, int64_t> Metrics::fallbacks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fallbacks_;
}

void Metrics::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.clear();
  fallbacks_.clear();
}

Metrics& metrics() {
  static Metrics* instance = new Metrics();  // never destroyed: used at exit
  return *instance;
}

}  // namespace tpu::engine
