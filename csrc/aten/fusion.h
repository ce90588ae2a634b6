// Fused (DeferAndFuse) eager mode: each device has one pending graph that ops
// append to instead of running. A cut runs it as one program whose outputs are
// only the storages still alive, so dead intermediates never get a buffer.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "aten/storage.h"
#include "ir/graph.h"

namespace tpu::aten {

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
  engine::BufferRef buffer;
  StorageValue* storage = nullptr;
  ir::Type type;
};

// Appends an op's graph (consumed) to the pending graph of `device`. `written` pairs each
// storage the op writes with its new value in `graph`. When `results` is not
// empty the pending graph is run at once and their buffers returned.
std::vector<engine::BufferRef> defer(int device, const char* op, ir::Graph&& graph,
                                     std::span<const ProgramArgument> arguments,
                                     std::span<const std::pair<StorageValue*, ir::Value>> written,
                                     std::span<const ir::Value> results);

// Runs the pending graph of `device` (or of every device), if any.
void flush(int device, Cut reason);
void flush_all(Cut reason);
// Gives `value` its current buffer, running its device's pending graph if needed.
void materialize(StorageValue* value);
// Whether `value` has content (a buffer or a pending node); sets *dtype to its element type.
bool has_content(StorageValue* value, ir::DType* dtype);
// `value`'s content is replaced by `buffer`, of type `type`, outside any program (an upload).
void set_buffer(StorageValue* value, engine::BufferRef buffer, const ir::Type& type);
// Gives `value` (which has a buffer and nothing pending) its content in a buffer of `shape`.
void reshape_buffer(StorageValue* value, const ir::Shape& shape);
// A storage died: its pending value stops being an output.
void forget_pending(StorageValue* value);

// torch.compile: the ops run between begin_capture() and end_capture() are
// sealed into one program replayed on new inputs without per-op dispatch.
class CapturedProgram {
 public:
  // Runs the program on `inputs` (same shapes, dtypes and layouts as at
  // capture); returns fresh output tensors and updates mutated inputs.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;
  size_t num_ops() const { return num_ops_; }
  // Indices (into the inputs) of the inputs the program writes.
  std::vector<int> mutated_inputs() const {
    std::vector<int> indices;
    for (auto [input, result] : mutated_inputs_) indices.push_back(input);
    return indices;
  }

 private:
  friend std::shared_ptr<CapturedProgram> end_capture(int, uint64_t, const std::vector<at::Tensor>&,
                                                      const std::vector<at::Tensor>&);
  struct Parameter {
    int input = -1;            // index into the inputs, or -1: a constant
    engine::BufferRef constant;
    ir::Type type;
  };
  struct Output {
    int storage;               // index into output_storages_
    c10::ScalarType dtype;
    std::vector<int64_t> sizes, strides;
    int64_t offset;
  };
  struct OutputStorage {
    int result;                // graph output index
    size_t nbytes;
  };
  std::vector<engine::BufferRef> launch(const std::vector<at::Tensor>& inputs) const;
  const ir::Type& result_type(int result) const { return graph_.type(ir::Value{graph_.outputs()[result]}); }

  int device_ = 0;
  ir::Graph graph_;                       // mutated inputs' buffers donated to their results
  std::shared_ptr<pjrt::Executable> executable_;
  ir::Graph plain_graph_;                 // the same without donation, for shared input buffers
  mutable std::shared_ptr<pjrt::Executable> plain_executable_;
  std::vector<Parameter> parameters_;
  std::vector<OutputStorage> output_storages_;
  std::vector<Output> outputs_;
  std::vector<std::pair<int, int>> mutated_inputs_;  // (input index, graph output index)
  size_t num_ops_ = 0;
};

// Runs what is pending on `device` and opens a capture; returns its token.
uint64_t begin_capture(int device);
// Seals the ops appended since begin_capture() into a program whose inputs are
// the storages of `inputs` and whose results are `outputs`; runs it once so
// `outputs` (and mutated inputs) get their values. Returns nullptr, leaving the
// pending work alone, when the capture was cut (a data read or a CPU fallback
// inside the captured code).
std::shared_ptr<CapturedProgram> end_capture(int device, uint64_t token, const std::vector<at::Tensor>& inputs,
                                             const std::vector<at::Tensor>& outputs);
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

}  // namespace tpu::aten
