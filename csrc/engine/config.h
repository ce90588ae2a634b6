// The TORCH_TPU_* environment variables the C++ core reads, read here and
// nowhere else. What each one means, its default and who else reads it are in
// torch_tpu/config.py, the catalogue of every knob (tests keep the two agreeing).
// Values are read when asked: a caller that wants one value per process keeps it.
#pragma once

#include <cstdint>
#include <span>

namespace tpu::engine::config {

enum class Knob : uint8_t {
  Fallback,            // TORCH_TPU_FALLBACK: "error" forbids the CPU fallback
  FusedMaxOps,         // TORCH_TPU_FUSED_MAX_OPS: ops in a pending graph before a cut
  FusedMergeBackward,  // TORCH_TPU_FUSED_MERGE_BACKWARD
  FusedBackgroundCompile,  // TORCH_TPU_FUSED_BACKGROUND_COMPILE: "0" compiles on the recording thread
  CheckNan,            // TORCH_TPU_CHECK_NAN
  LogOps,              // TORCH_TPU_LOG_OPS
  DumpPrograms,        // TORCH_TPU_DUMP_PROGRAMS: a directory
  DumpFailedPrograms,  // TORCH_TPU_DUMP_FAILED_PROGRAMS
  ExplainCompiles,     // TORCH_TPU_EXPLAIN_COMPILES: print each compile with its reason
  ProgramCacheSize,    // TORCH_TPU_PROGRAM_CACHE_SIZE: programs kept loaded in memory
  DistBlocking,        // TORCH_TPU_DIST_BLOCKING: tpu_dist collectives complete in their call
  OpMemo,              // TORCH_TPU_OP_MEMO: "0" builds every op's graph anew (aten/op_memo.h)
};

// "TORCH_TPU_FALLBACK" for Knob::Fallback.
const char* name(Knob knob);
// Every knob, in declaration order.
std::span<const Knob> knobs();

// The variable's value; nullptr when unset or empty.
const char* text(Knob knob);
// Set, non-empty and not "0".
bool flag(Knob knob);
// A positive integer; otherwise (unset, not a number, not positive) `otherwise`.
int64_t positive_integer(Knob knob, int64_t otherwise);
// The value equals `word`.
bool equals(Knob knob, const char* word);

}  // namespace tpu::engine::config
