#include "runtime/device_allocator.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>

#include "engine/pending_graph.h"
#include "engine/runtime.h"
#include "runtime/device.h"
#include "runtime/memory_history.h"

namespace tpu::runtime {
namespace {

using engine::kMaxDevices;
using engine::StorageValue;

struct DeviceCounters {
  std::atomic<uintptr_t> next_address{0};
  std::atomic<int64_t> allocations{0};
};
std::array<DeviceCounters, kMaxDevices> g_devices;

void on_free(void* ctx) {
  auto* value = static_cast<StorageValue*>(ctx);
  if (engine::Runtime::in_forked_child()) return;  // the parent's memory: left to the parent
  note_free(value);
  engine::forget_pending(value);
  delete value;
}

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    int device = current_device();
    c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &c10::detail::deleteNothing, where);
    check_device(device);
    auto& counters = g_devices[device];
    uintptr_t rounded = (nbytes + 511) & ~uintptr_t(511);
    uintptr_t address = kAddressBase + (uintptr_t(device) << kDeviceShift) +
                        counters.next_address.fetch_add(rounded + 512);
    ++counters.allocations;
    auto* value = new StorageValue();
    value->nbytes = nbytes;
    value->device = device;
    note_allocation(value, address, nbytes, device);
    return c10::DataPtr(reinterpret_cast<void*>(address), value, &on_free, where);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "torch_tpu: tpu memory cannot be copied byte-wise on the host; use Tensor.copy_");
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    auto& counters = g_devices.at(device);
    auto& bytes = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    bytes.current = memory_allocated(device);
    bytes.peak = max_memory_allocated(device);
    stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)] = bytes;
    stats.active_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)] = bytes;
    stats.allocation[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].allocated =
        counters.allocations;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak_memory(device); }
  // torch.accelerator.get_memory_info. No `override`: older torch releases
  // lack this virtual, and the extension builds against them too.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) {
    check_device(device);
    auto [free, total] = engine::Runtime::get().memory_info(device);
    return {static_cast<size_t>(free), static_cast<size_t>(total)};
  }
};

TpuAllocator g_allocator;

}  // namespace

StorageValue* storage_value(const c10::Storage& storage) {
  const c10::DataPtr& ptr = storage.data_ptr();
  if (ptr.get_deleter() != &on_free) return nullptr;
  return static_cast<StorageValue*>(ptr.get_context());
}

engine::StorageValue* checked_storage_value(const c10::Storage& storage) {
  StorageValue* value = storage_value(storage);
  TORCH_CHECK(value != nullptr, "torch_tpu: a tpu tensor whose storage torch_tpu did not allocate (made with from_blob "
              "over a tpu data pointer?): tpu memory is not addressable from the host; copy the tensor with .cpu() "
              "or .to() instead");
  return value;
}

c10::Allocator* tpu_allocator() { return &g_allocator; }

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  StorageValue* old_value = storage_value(storage);
  c10::DeviceGuard guard(storage.device());
  c10::DataPtr fresh = tpu_allocator()->allocate(nbytes);
  if (old_value != nullptr)
    if (auto* value = static_cast<StorageValue*>(fresh.get_context())) engine::copy_bytes(*old_value, *value);
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

int64_t memory_allocated(int device) { return engine::Runtime::memory_in_use(device); }
int64_t max_memory_allocated(int device) { return engine::Runtime::memory_peak(device); }
void reset_peak_memory(int device) { engine::Runtime::reset_memory_peak(device); }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace tpu::runtime
