#include "aten/compiled_program.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>

#include <algorithm>

#include "aten/program.h"
#include "runtime/device_allocator.h"

namespace tpu::aten {
namespace {

// The storage values of `tensors` (nullptr for one that is not a tpu tensor).
std::vector<engine::StorageValue*> storage_values(const std::vector<at::Tensor>& tensors) {
  std::vector<engine::StorageValue*> values;
  values.reserve(tensors.size());
  for (const at::Tensor& t : tensors)
    values.push_back(t.defined() && t.is_privateuseone() ? runtime::storage_value(t.storage()) : nullptr);
  return values;
}

}  // namespace

std::shared_ptr<CompiledProgram> CompiledProgram::seal(int device, uint64_t token,
                                                       const std::vector<at::Tensor>& inputs,
                                                       const std::vector<at::Tensor>& outputs) {
  auto program = engine::CapturedProgram::seal(device, token, storage_values(inputs), storage_values(outputs));
  if (program == nullptr) return nullptr;
  auto compiled = std::make_shared<CompiledProgram>();
  compiled->program_ = std::move(program);
  for (const at::Tensor& t : outputs)
    compiled->outputs_.push_back({t.scalar_type(), t.sizes().vec(), t.strides().vec(), t.storage_offset()});
  return compiled;
}

std::vector<int> CompiledProgram::mutated_inputs() const {
  std::vector<int> indices;
  for (auto [input, result] : program_->mutated_inputs()) indices.push_back(input);
  return indices;
}

std::vector<at::Tensor> CompiledProgram::call(std::span<const at::Tensor* const> args) const {
  const int device = program_->device();
  std::vector<at::Tensor> inputs;
  inputs.reserve(args.size());
  c10::SmallVector<size_t, 8> uploaded;  // positions of the CPU scalars among the inputs
  for (const at::Tensor* t : args) {
    if (t->is_privateuseone()) {
      inputs.push_back(*t);
      continue;
    }
    TORCH_CHECK(t->device().is_cpu() && t->dim() == 0, "torch_tpu: a compiled graph's argument is a ", t->device(),
                " tensor of shape ", t->sizes(), " (only tpu tensors and 0-dim CPU tensors are replayed)");
    uploaded.push_back(inputs.size());
    // Equal scalars share one cached buffer; complex32 has no scalar buffer form.
    inputs.push_back(t->scalar_type() == at::kComplexHalf
                         ? t->to(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)))
                         : scalar_to_device(*t, device));
  }
  std::vector<at::Tensor> outputs = run(inputs);
  if (!uploaded.empty())
    for (auto [input, result] : program_->mutated_inputs())
      if (std::find(uploaded.begin(), uploaded.end(), static_cast<size_t>(input)) != uploaded.end())
        args[input]->copy_(inputs[input]);  // the outputs of one program: one wait in all
  return outputs;
}

std::vector<at::Tensor> CompiledProgram::run(const std::vector<at::Tensor>& inputs) const {
  std::vector<engine::BufferRef> buffers = program_->launch(storage_values(inputs));
  c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(program_->device()));
  c10::DeviceGuard guard(where);
  c10::Allocator* allocator = runtime::tpu_allocator();
  std::vector<c10::Storage> storages;
  for (const auto& s : program_->output_storages()) {
    c10::Storage storage(c10::Storage::use_byte_size_t(), s.nbytes, allocator->allocate(s.nbytes), allocator,
                         /*resizable=*/true);
    if (engine::StorageValue* v = runtime::storage_value(storage))
      v->hold(buffers[s.result], program_->result_type(s.result));
    storages.push_back(std::move(storage));
  }
  std::vector<at::Tensor> results;
  results.reserve(outputs_.size());
  const std::vector<int>& storage_of = program_->output_storage_of();
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Layout& o = outputs_[i];
    if (storage_of[i] < 0) {
      results.push_back(at::empty(o.sizes, at::TensorOptions().dtype(o.dtype).device(where)));
      continue;
    }
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(storages[storage_of[i]]), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        c10::scalarTypeToTypeMeta(o.dtype));
    t.unsafeGetTensorImpl()->set_sizes_and_strides(o.sizes, o.strides, o.offset);
    results.push_back(std::move(t));
  }
  return results;
}

}  // namespace tpu::aten
