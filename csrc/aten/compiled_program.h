// torch.compile's replay on tensors: an engine::CapturedProgram plus the
// layout (dtype, sizes, strides, offset) of each tensor it returns.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/pending_graph.h"

namespace tpu::aten {

class CompiledProgram {
 public:
  // Seals the ops run since engine::begin_capture() returned `token` into a
  // program whose inputs are the storages of `inputs` and whose results are
  // `outputs`; runs it once so `outputs` (and mutated inputs) get their
  // values. nullptr when the capture was cut (see CapturedProgram::seal).
  static std::shared_ptr<CompiledProgram> seal(int device, uint64_t token, const std::vector<at::Tensor>& inputs,
                                               const std::vector<at::Tensor>& outputs);
  // Runs the program on `inputs` (same shapes, dtypes and layouts as at
  // capture); returns fresh output tensors and updates mutated inputs.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;
  // One call of a compiled graph: `args` are its tensor arguments in order,
  // tpu tensors and 0-dim CPU tensors (numbers the host computed, such as an
  // optimizer's bias corrections), which travel as uploads through the scalar
  // buffer cache and, where the program writes them, get their new values back.
  std::vector<at::Tensor> call(std::span<const at::Tensor* const> args) const;
  size_t num_ops() const { return program_->num_ops(); }
  // Indices (into the inputs) of the inputs the program writes.
  std::vector<int> mutated_inputs() const;

 private:
  struct Layout {
    c10::ScalarType dtype;
    std::vector<int64_t> sizes, strides;
    int64_t offset;
  };
  // Output tensors over the buffers of a launch.
  std::vector<at::Tensor> wrap_outputs(const std::vector<engine::BufferRef>& buffers) const;
  // A launch's results less the values of the graph's asserts, which are recorded as
  // pending checks (raised at the next read of tpu data, as eager ones).
  std::vector<at::Tensor> checked(std::vector<at::Tensor> results) const;
  std::shared_ptr<engine::CapturedProgram> program_;
  std::vector<Layout> outputs_;  // the graph's results, then its asserts' values
  std::vector<std::string> assert_messages_;
};

}  // namespace tpu::aten
