// Pinned host memory. Each allocation is page-aligned, registered for the
// device's DMA where the plugin implements PJRT_Client_DmaMap (TPU), and
// kept in a registry so that is_pinned() recognises it and its views. XLA:CPU
// copies from any host memory: there the memory transfers like any other, and
// metrics() says so (pinned_host_dma_mapped_bytes stays 0).
#include "runtime/pinned_memory.h"

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "engine/metrics.h"
#include "engine/runtime.h"

namespace tpu::runtime {
namespace {

struct Block {
  size_t size;
  bool dma_mapped;
};

std::mutex g_mutex;
std::map<uintptr_t, Block>& blocks() {
  static auto* map = new std::map<uintptr_t, Block>();  // outlives static destructors: deleters run late
  return *map;
}

void release(void* data) {
  if (data == nullptr) return;
  Block block{};
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = blocks().find(reinterpret_cast<uintptr_t>(data));
    if (it != blocks().end()) {
      block = it->second;
      blocks().erase(it);
    }
  }
  if (block.dma_mapped && engine::Runtime::initialized()) engine::Runtime::get().client().dma_unmap(data);
  std::free(data);
}

class PinnedHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (nbytes == 0) return {nullptr, nullptr, &release, cpu};
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t size = (nbytes + page - 1) / page * page;
    void* data = std::aligned_alloc(page, size);
    TORCH_CHECK_WITH(OutOfMemoryError, data != nullptr, "torch_tpu: could not allocate ", nbytes,
                     " bytes of pinned host memory");
    const bool mapped = engine::Runtime::get().client().dma_map(data, size);
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      blocks()[reinterpret_cast<uintptr_t>(data)] = Block{size, mapped};
    }
    engine::metrics().add("pinned_host_allocations");
    return {data, data, &release, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

}  // namespace

c10::Allocator* pinned_host_allocator() {
  static PinnedHostAllocator allocator;
  return &allocator;
}

bool is_pinned_host_pointer(const void* data) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = blocks().upper_bound(address);
  if (it == blocks().begin()) return false;
  --it;
  return address < it->first + it->second.size;
}

PinnedHostMemory pinned_host_memory() {
  PinnedHostMemory total;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [address, block] : blocks()) {
    total.bytes += static_cast<int64_t>(block.size);
    if (block.dma_mapped) total.dma_mapped_bytes += static_cast<int64_t>(block.size);
  }
  return total;
}

}  // namespace tpu::runtime
