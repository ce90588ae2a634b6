// Fused (DeferAndFuse) eager mode: each device has one pending graph that ops
// append to instead of running. A cut runs it as one program whose outputs are
// only the storages still alive, so dead intermediates never get a buffer.
#pragma once

#include <utility>
#include <vector>

#include "aten/storage.h"
#include "ir/graph.h"

namespace tpu::aten {

// Why a pending graph was run.
enum class Cut : uint8_t { DataRead, Fallback, Sync, SizeLimit, ModeSwitch };
const char* cut_name(Cut reason);

bool fused_mode();

// One argument of an op's program: a buffer, or a storage whose value (its
// buffer or its pending node) is looked up when the op is appended.
struct ProgramArgument {
  engine::BufferRef buffer;
  StorageValue* storage = nullptr;
  ir::Type type;
};

// Appends an op's graph to the pending graph of `device`. `written` pairs each
// storage the op writes with its new value in `graph`. When `results` is not
// empty the pending graph is run at once and their buffers returned.
std::vector<engine::BufferRef> defer(int device, const char* op, const ir::Graph& graph,
                                     const std::vector<ProgramArgument>& arguments,
                                     const std::vector<std::pair<StorageValue*, ir::Value>>& written,
                                     const std::vector<ir::Value>& results);

// Runs the pending graph of `device` (or of every device), if any.
void flush(int device, Cut reason);
void flush_all(Cut reason);
// Gives `value` its current buffer, running its device's pending graph if needed.
void materialize(StorageValue* value);
// Whether `value` has content (a buffer or a pending node); sets *dtype to its element type.
bool has_content(StorageValue* value, ir::DType* dtype);
// `value`'s content is replaced by `buffer` outside any program (an upload).
void set_buffer(StorageValue* value, engine::BufferRef buffer, ir::DType dtype);
// A storage died: its pending value stops being an output.
void forget_pending(StorageValue* value);

// While alive, cuts caused on this thread are counted as `reason` (e.g. a CPU fallback
// reading its operands).
class CutReasonScope {
 public:
  explicit CutReasonScope(Cut reason);
  ~CutReasonScope();
  CutReasonScope(const CutReasonScope&) = delete;
  CutReasonScope& operator=(const CutReasonScope&) = delete;

 private:
  Cut previous_;
};

}  // namespace tpu::aten
