// Fused (DeferAndFuse) eager mode: each device has one pending graph that ops
// append to instead of running. A cut runs it as one program whose outputs are
// only the storages still alive, so dead intermediates never get a buffer.
// Capture (torch.compile) seals the ops appended between two points into a
// program replayed on new inputs. Knows storages' device values, not tensors.
#pragma once

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/storage_value.h"
#include "ir/graph.h"

namespace tpu::engine {

// Why a pending graph was run.
enum class Cut : uint8_t {
  DataRead, Fallback, Sync, SizeLimit, ModeSwitch, OptimizerStep,
  ThreadSwitch,  // an op recorded by another thread than the pending ones (e.g. backward)
};
const char* cut_name(Cut reason);

bool fused_mode();

// One argument of an op's program: a buffer, or a storage whose value (its
// buffer or its pending node) is looked up when the op is appended.
struct ProgramArgument {
  BufferRef buffer;
  StorageValue* storage = nullptr;
  ir::Type type;
};

// Appends an op's graph (consumed) to the pending graph of `device`. `written` pairs each
// storage the op writes with its new value in `graph`. When `results` is not
// empty the pending graph is run at once and their buffers returned.
std::vector<BufferRef> defer(int device, const char* op, ir::Graph&& graph,
                             std::span<const ProgramArgument> arguments,
                             std::span<const std::pair<StorageValue*, ir::Value>> written,
                             std::span<const ir::Value> results);

// defer() for a graph kept to be appended again (an op's remembered graph,
// aten/op_memo.h): its nodes are copied, `graph` stays as it is. `stamp` names
// `graph` (which never changes) for the process's life: see ir::Graph::append_remembered.
void defer_copy(int device, const char* op, const ir::Graph& graph, uint64_t stamp,
                std::span<const ProgramArgument> arguments,
                std::span<const std::pair<StorageValue*, ir::Value>> written);

// Runs the pending graph of `device` (or of every device), if any.
void flush(int device, Cut reason);
void flush_all(Cut reason);
// Gives `value` its current buffer, running its device's pending graph if needed.
void materialize(StorageValue* value);
// Whether `value` has content (a buffer or a pending node); sets *dtype to its element type.
bool has_content(StorageValue* value, ir::DType* dtype);
// has_content() of each of `values` (all on one device), under one lock: the
// element type of its content, or -1 where it has none.
void content_dtypes(std::span<StorageValue* const> values, std::span<int64_t> dtypes);
// `value`'s content is replaced by `buffer`, of type `type`, outside any program (an upload).
void set_buffer(StorageValue* value, BufferRef buffer, const ir::Type& type);
// Gives `value` (which has a buffer and nothing pending) its content in a buffer of `shape`.
void reshape_buffer(StorageValue* value, const ir::Shape& shape);
// `to` (a fresh storage) gets `from`'s bytes, cut or zero-padded to its size.
void copy_bytes(StorageValue& from, StorageValue& to);
// A storage died: its pending value stops being an output.
void forget_pending(StorageValue* value);

// The ops run between begin_capture() and CapturedProgram::seal() as one
// program, replayed on new inputs without per-op dispatch.
class CapturedProgram {
 public:
  // Seals the ops appended since begin_capture() returned `token` into a
  // program whose inputs are the storages `inputs` (nullptr: not a device
  // input) and whose results are those of `outputs` (nullptr: no storage);
  // runs it once so the outputs (and mutated inputs) get their values.
  // Returns nullptr, leaving the pending work alone, when the capture was cut
  // (a data read or a CPU fallback inside the captured code).
  static std::shared_ptr<CapturedProgram> seal(int device, uint64_t token, std::span<StorageValue* const> inputs,
                                               std::span<StorageValue* const> outputs);

  // Runs the program on the storages `inputs` (same types as at capture) and
  // returns the buffers of its results; mutated inputs get their new buffers.
  std::vector<BufferRef> launch(std::span<StorageValue* const> inputs) const;

  int device() const { return device_; }
  size_t num_ops() const { return num_ops_; }
  // Per output of seal(): its index into output_storages(), or -1.
  const std::vector<int>& output_storage_of() const { return output_storage_of_; }
  struct OutputStorage {
    int result;     // index into launch()'s buffers
    size_t nbytes;
  };
  const std::vector<OutputStorage>& output_storages() const { return output_storages_; }
  const ir::Type& result_type(int result) const { return graph_.type(ir::Value{graph_.outputs()[result]}); }
  // (input index, result index) of each input the program writes.
  const std::vector<std::pair<int, int>>& mutated_inputs() const { return mutated_inputs_; }

 private:
  std::vector<BufferRef> execute(std::span<StorageValue* const> inputs) const;
  struct Parameter {
    int input = -1;            // index into the inputs, or -1: a constant
    BufferRef constant;
    ir::Type type;
  };
  int device_ = 0;
  ir::Graph graph_;                       // mutated inputs' buffers donated to their results
  std::shared_ptr<pjrt::Executable> executable_;
  ir::Graph plain_graph_;                 // the same without donation, for shared input buffers
  mutable std::shared_ptr<pjrt::Executable> plain_executable_;
  std::vector<Parameter> parameters_;
  std::vector<OutputStorage> output_storages_;
  std::vector<int> output_storage_of_;
  std::vector<std::pair<int, int>> mutated_inputs_;
  size_t num_ops_ = 0;
};

// Runs what is pending on `device` and opens a capture; returns its token.
uint64_t begin_capture(int device);
// Drops what a failed capture left pending.
void abandon_capture(int device);

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

}  // namespace tpu::engine
