#include "engine/diagnostics.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tpu::engine {
namespace {
std::mutex g_mutex;
std::function<void(const std::string&)> g_warning_handler;
std::function<std::string()> g_location_provider;
}  // namespace

void set_warning_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_warning_handler = std::move(handler);
}

void warn(const std::string& message) {
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    handler = g_warning_handler;
  }
  if (handler)
    handler(message);
  else
    std::fprintf(stderr, "torch_tpu warning: %s\n", message.c_str());
}

void set_location_provider(std::function<std::string()> provider) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_location_provider = std::move(provider);
}

std::string user_location() {
  std::function<std::string()> provider;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    provider = g_location_provider;
  }
  return provider ? provider() : std::string();
}

}  // namespace tpu::engine
