// Hooks through which the engine reports to the user without knowing Python:
// warnings (routed to warnings.warn) and "where in the user's program are we"
// (the Python source line, for debug-mode errors).
#pragma once

#include <functional>
#include <string>

namespace tpu::engine {

void set_warning_handler(std::function<void(const std::string&)> handler);
void warn(const std::string& message);

void set_location_provider(std::function<std::string()> provider);
// "file.py:12 in f" of the innermost user frame, or "" when unknown.
std::string user_location();

}  // namespace tpu::engine
