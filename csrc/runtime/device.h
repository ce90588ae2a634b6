// Device selection: the current tpu device (per thread, as on CUDA) and the
// device count. Light header, no torch includes.
#pragma once

#include <cstdint>
#include <string>

namespace tpu::runtime {

int device_count() noexcept;      // 0 when no plugin can be started
int current_device();
void set_device(int index);
void check_device(int index);     // throws c10::Error when out of range
std::string platform_name();      // PJRT platform of the running plugin

}  // namespace tpu::runtime
