// The history of tpu storage allocations, for torch.tpu.memory._record_memory_history
// and _snapshot() in the shape of CUDA's (PyTorch's memory visualiser reads it).
//
// A block is one storage (its fake address and byte size from the tpu allocator);
// each is its own segment, since torch_tpu keeps no cache of freed memory. While
// recording, every allocation and free is kept (up to a bound, oldest dropped) with
// the context the gatherer returns (the Python stack, set by the python layer), and
// the blocks allocated since recording began are known until freed. Storages made
// before are not listed: knowing every storage would cost each allocation a locked
// insert, recording or not. Off, a hook costs one atomic load.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tpu::runtime {

using ContextGatherer = std::function<std::shared_ptr<c10::GatheredContext>()>;

// Starts or stops recording; `gatherer` (may be empty) gives each allocation its
// context, `max_entries` bounds the trace (0: live blocks only). Stopping forgets the
// trace and the live blocks, as CUDA's does.
void record_memory_history(bool enabled, ContextGatherer gatherer, size_t max_entries);
bool memory_history_enabled();

// The allocator's hooks (cheap when not recording).
void note_allocation(const void* key, uintptr_t address, size_t nbytes, int device);
void note_free(const void* key);

struct MemoryEvent {
  enum class Action : uint8_t { Alloc, Free };
  Action action;
  uintptr_t address;
  size_t nbytes;
  int device;
  int64_t time_us;
  std::shared_ptr<c10::GatheredContext> context;  // may be null
};

struct LiveBlock {
  uintptr_t address;
  size_t nbytes;
  int device;
  std::shared_ptr<c10::GatheredContext> context;  // may be null
};

struct MemorySnapshot {
  std::vector<LiveBlock> blocks;    // by address
  std::vector<MemoryEvent> events;  // oldest first
};
// The recorded storages alive now and the recorded trace.
MemorySnapshot memory_snapshot();

// The `n` largest recorded storages alive on `device`, each as "<bytes> bytes from
// <file>:<line> in <function>" (its innermost frame outside torch's own files), largest first.
std::vector<std::string> largest_live_storages(int device, size_t n);

}  // namespace tpu::runtime
