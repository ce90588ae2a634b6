// Every program the runtime compiles (or loads from the disk cache), with why:
// what differs from the nearest program compiled before at the same Python
// line. torch_tpu.explain_compiles() reads it; TORCH_TPU_EXPLAIN_COMPILES=1
// prints each as it happens; a line that keeps compiling is warned about once.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tpu::engine {

struct CompileRecord {
  std::string mode;      // "strict", "debug", "fused", "background" (a fused graph compiled off-thread)
  std::string location;  // the user's Python line, "" when unknown (backward, background)
  std::string ops;       // the program's first ops, as a name for it
  size_t nodes = 0, parameters = 0;
  double seconds = 0;      // compile (or disk load) time
  bool from_disk = false;  // loaded from the disk cache instead of compiled
  std::string reason;      // what differs from the nearest earlier program at this line
};

// Called by the runtime after each compile or disk load of `graph`; records it
// while recording is on (TORCH_TPU_EXPLAIN_COMPILES=1, or set_compile_recording).
void record_compile(const ir::Graph& graph, double seconds, bool from_disk);
// Recording keeps each line's last programs for the comparison: off unless asked.
void set_compile_recording(bool on);
bool compile_recording();

// Marks the calling thread as the background compiler while it lives.
struct BackgroundCompileScope {
  BackgroundCompileScope();
  ~BackgroundCompileScope();
};

std::vector<CompileRecord> compile_records();
// Clears the records; later compiles are still compared with the programs before.
void clear_compile_records();

}  // namespace tpu::engine
