#include "aten/compiled_program.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

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
