#pragma once

#include <c10/core/Storage.h>

namespace tpu::aten {

// Gives a tpu storage a new size in bytes, keeping its content (as far as it fits).
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

}  // namespace tpu::aten
