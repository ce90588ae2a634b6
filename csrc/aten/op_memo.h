// Remembered op graphs. Building an op's graph (reading its operands through
// their views, converting, broadcasting, lowering, writing back) costs more host
// time than anything else an op does, and a training step calls the same ops on
// alike operands every time. An op that opts in keys each call by everything
// its build depends on (the op and what its build captured, its tensors'
// dtypes, shapes, strides, offsets, aliasing and storages' contents' types, the
// eager mode, the graph options); the first call with a key records what it
// builds as a Program::Recipe, later calls apply the recipe instead of building.
// Per thread, bounded; TORCH_TPU_OP_MEMO=0 turns it off.
#pragma once

#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <span>

#include "aten/program.h"

namespace tpu::aten::op_memo {

bool enabled();

// What a call's build depends on besides its tensors (given by the op), then
// the tensors and the context (added by find_or_record).
class Key {
 public:
  void add(int64_t word) { words_.push_back(word); }
  void add_text(const char* text);
  // False when a tensor is one the memo does not reason about (its build is left to the op).
  bool add_tensors(std::span<const at::Tensor* const> tensors);
  uint64_t hash() const;
  std::span<const int64_t> words() const { return words_; }

 private:
  c10::SmallVector<int64_t, 64> words_;
};

// The recipe for an op called with `tensors` (every tensor its build may read
// or write), recorded when its key comes a second time by `record` (which
// builds the op into a program recording into the recipe it is given and says
// whether the recording is usable); nullptr when the call cannot use one
// (build it as usual). An exception from `record` propagates: it is the op's own error.
const Program::Recipe* find_or_record(Key& key, const char* name, int device,
                                      std::span<const at::Tensor* const> tensors,
                                      c10::function_ref<bool(Program::Recipe&)> record);

}  // namespace tpu::aten::op_memo
