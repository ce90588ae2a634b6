// The c10 device allocator of tpu storages: each storage gets a stable fake
// address (never dereferenced) and an engine::StorageValue as its context.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <cstdint>

#include "engine/storage_value.h"

namespace tpu::runtime {

// Each device owns a 2^40-byte slice of a private address range, so the
// device of a data pointer can be recovered and storages never alias.
constexpr uintptr_t kAddressBase = uintptr_t(0x5a) << 40;
constexpr int kDeviceShift = 40;

// nullptr for a zero-byte storage (or one not made by the tpu allocator).
engine::StorageValue* storage_value(const c10::Storage& storage);
// The value of a tpu storage that holds bytes; a storage the tpu allocator did
// not make (at::from_blob over a tpu tensor's data pointer, which torch's legacy
// serialization does) raises: tpu memory has no host address to wrap.
engine::StorageValue* checked_storage_value(const c10::Storage& storage);
c10::Allocator* tpu_allocator();

// Gives a tpu storage a new size in bytes, keeping its content (as far as it fits).
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

// Bytes of device buffers alive (see engine::Runtime::memory_in_use).
int64_t memory_allocated(int device);
int64_t max_memory_allocated(int device);
void reset_peak_memory(int device);

}  // namespace tpu::runtime
