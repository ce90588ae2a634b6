#include "runtime/device.h"

#include <c10/util/Exception.h>

#include "engine/runtime.h"

namespace tpu::runtime {
namespace {
thread_local int t_current_device = 0;
}

int device_count() noexcept {
  try {
    return engine::Runtime::get().device_count();
  } catch (...) {
    return 0;
  }
}

void check_device(int index) {
  int count = 0;
  try {
    count = engine::Runtime::get().device_count();
  } catch (const engine::Error& e) {
    TORCH_CHECK(false, e.what());
  }
  TORCH_CHECK_INDEX(index >= 0 && index < count, "tpu device index ", index,
                    " is out of range: there are ", count, " tpu devices");
}

int current_device() { return t_current_device; }

void set_device(int index) {
  check_device(index);
  t_current_device = index;
}

std::string platform_name() {
  try {
    return engine::Runtime::get().client().platform_name();
  } catch (const engine::Error& e) {
    TORCH_CHECK(false, e.what());
  }
}

}  // namespace tpu::runtime
