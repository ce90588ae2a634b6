// Process-wide counters behind torch_tpu.metrics(). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tpu::engine {

class Metrics {
 public:
  void add(const std::string& name, double amount = 1.0);
  void record_max(const std::string& name, double value);
  void add_fallback(const std::string& op);
  std::map<std::string, double> counters() const;
  std::map<std::string, int64_t> fallbacks() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::map<std::string, double> counters_;
  std::map<std::string, int64_t> fallbacks_;
};

Metrics& metrics();

}  // namespace tpu::engine
