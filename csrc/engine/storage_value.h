// The device value a tpu storage holds: its buffer, or its pending node in
// fused mode. The c10 side of a storage (allocator, fake address) is
// runtime/device_allocator.h.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "engine/runtime.h"
#include "ir/graph.h"

namespace tpu::engine {

// What a tpu storage holds; owned by the storage's DataPtr context.
struct StorageValue {
  BufferRef buffer;                  // null until first written
  ir::DType dtype = ir::DType::U8;    // element type of the value (buffer or pending)
  // The dims of `buffer`. A program's result keeps the shape its value was
  // computed in ([512, 64], not the storage's flat [32768]), and programs read
  // it in that shape and reshape it to flat, which XLA makes free: a flat
  // result would make XLA compute some fusions twice (once shaped for their
  // consumers, once flat for the output) and, on TPU, relayout the value.
  ir::Shape buffer_shape;
  ir::DType buffer_dtype = ir::DType::U8;  // `dtype` may be a pending value's
  size_t nbytes = 0;
  int device = 0;
  // Fused mode: the node of the device's pending graph holding the newest
  // value (which `buffer` does not have yet); -1 when `buffer` is current.
  // Guarded by the pending graph's lock.
  int pending_node = -1;
  // Whether the pending graph refers to this storage (bound or written). Set
  // only by a thread holding the storage, so its deleter may read it without
  // the pending graph's lock; cleared by whichever thread cuts the graph, last,
  // after giving the storage its buffer, which the clearing publishes.
  class PendingFlag {
   public:
    PendingFlag() = default;
    PendingFlag(const PendingFlag& other) : set_(static_cast<bool>(other)) {}
    PendingFlag& operator=(const PendingFlag& other) { return *this = static_cast<bool>(other); }
    PendingFlag& operator=(bool set) {
      set_.store(set, std::memory_order_release);
      return *this;
    }
    explicit operator bool() const { return set_.load(std::memory_order_acquire); }

   private:
    std::atomic<bool> set_{false};
  };
  PendingFlag in_pending_graph;
  // Fused mode, guarded by the pending graph's lock: where the pending graph
  // holds this storage (-1: nowhere). Kept here, not in maps of the graph,
  // since every recorded op looks its operands up.
  int bound_node = -1;      // the parameter holding `buffer` (of buffer_type())
  int bound_flat = -1;      // that parameter reshaped to the storage's flat shape
  int bound_position = -1;  // that parameter's position
  int bound_slot = -1;      // index in the graph's list of bound storages
  int written_slot = -1;    // index in the graph's list of written storages
  // Why the storage has no value (the fused graph that was to compute it
  // failed), or null. Reading it raises this instead of returning the value
  // from before the graph or zeros; a whole new value clears it.
  std::shared_ptr<const std::string> lost;
  // Raises the loss, if any, as a runtime error naming what failed.
  void check_not_lost() const {
    if (lost) throw_lost();
  }
  int64_t numel() const { return static_cast<int64_t>(nbytes) / ir::byte_width(dtype); }
  ir::Type buffer_type() const { return ir::Type{buffer_dtype, buffer_shape}; }
  [[noreturn]] void throw_lost() const;
  // Gives the storage `b`, a buffer of type `type` (its whole new value).
  void hold(BufferRef b, const ir::Type& type) {
    lost.reset();
    buffer = std::move(b);
    dtype = buffer_dtype = type.dtype;
    buffer_shape = type.shape;
  }
};

// What a program returns as the new buffer of a storage whose value it has as
// `flat` (the storage's flat shape): the shaped value that `flat` reshapes, if
// any (see StorageValue::buffer_shape), or, when `keep` is given (the shape of
// the old buffer the result may be donated to), the value in that shape if it
// has as many elements (else flat).
ir::Value storage_result(ir::Graph& graph, ir::Value flat, const ir::Shape* keep);
// A storage buffer of type `type` bound as `parameter`, as the storage's flat value.
ir::Value flat_storage_value(ir::Graph& graph, ir::Value parameter);

}  // namespace tpu::engine
