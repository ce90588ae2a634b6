// Pinned host memory: what tensor.pin_memory(), torch.empty(..., pin_memory=True)
// and DataLoader(pin_memory=True) allocate when tpu is the accelerator.
#pragma once

#include <cstdint>

namespace c10 {
struct Allocator;
}

namespace tpu::runtime {

c10::Allocator* pinned_host_allocator();
// True for any address inside a live pinned allocation (a view's data pointer too).
bool is_pinned_host_pointer(const void* data);

struct PinnedHostMemory {
  int64_t bytes = 0;             // live pinned allocations, rounded up to whole pages
  int64_t dma_mapped_bytes = 0;  // of which registered with the plugin for DMA
};
PinnedHostMemory pinned_host_memory();

}  // namespace tpu::runtime
