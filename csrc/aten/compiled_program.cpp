#include "aten/compiled_program.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>

#include <algorithm>

#include "aten/assert_async.h"
#include "aten/program.h"
#include "lowering/types.h"
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
  // The graph's torch._assert_async checks (recorded since the capture began: their
  // copies are pending on this device) become results of the program, checked after each call.
  std::vector<PendingAssert> asserts = take_pending_asserts([&](const at::Tensor& holds) {
    engine::StorageValue* v = holds.is_privateuseone() ? runtime::storage_value(holds.storage()) : nullptr;
    return v != nullptr && v->device == device && v->in_pending_graph;
  });
  std::vector<at::Tensor> results = outputs;
  for (const PendingAssert& check : asserts) results.push_back(check.holds);
  std::shared_ptr<engine::CapturedProgram> program;
  try {
    program = engine::CapturedProgram::seal(device, token, storage_values(inputs), storage_values(results));
  } catch (...) {
    for (PendingAssert& check : asserts) record_pending_assert(std::move(check));
    throw;
  }
  // Sealed, the first run gave the checks their values; cut, they stay pending eager work.
  for (const PendingAssert& check : asserts) record_pending_assert(check);
  if (program == nullptr) return nullptr;
  auto compiled = std::make_shared<CompiledProgram>();
  compiled->program_ = std::move(program);
  for (const at::Tensor& t : results)
    compiled->outputs_.push_back({t.scalar_type(), t.sizes().vec(), t.strides().vec(), t.storage_offset()});
  for (PendingAssert& check : asserts) compiled->assert_messages_.push_back(std::move(check.message));
  return compiled;
}

std::vector<at::Tensor> CompiledProgram::checked(std::vector<at::Tensor> results) const {
  size_t first = results.size() - assert_messages_.size();
  for (size_t i = 0; i < assert_messages_.size(); ++i)
    record_pending_assert({std::move(results[first + i]), assert_messages_[i]});
  results.resize(first);
  return results;
}

std::vector<int> CompiledProgram::mutated_inputs() const {
  std::vector<int> indices;
  for (auto [input, result] : program_->mutated_inputs()) indices.push_back(input);
  return indices;
}

std::vector<at::Tensor> CompiledProgram::call(std::span<const at::Tensor* const> args) const {
  const int device = program_->device();
  std::vector<engine::StorageValue*> values;
  values.reserve(args.size());
  // A CPU scalar's upload is a storage value of this call's alone, holding the
  // scalar buffer cache's buffer: no tensor is made for it. Lazily conjugated or
  // negated scalars and complex32 (no scalar buffer form) go through a tpu tensor.
  std::vector<engine::StorageValue> uploads;
  // Never regrown, as `values` points into it; sized to the CPU scalars (most calls
  // have none or a few: a block for every argument would be a large allocation).
  size_t scalars = 0;
  for (const at::Tensor* t : args) scalars += !t->is_privateuseone();
  uploads.reserve(scalars);
  std::vector<at::Tensor> held;
  std::vector<int> held_as(args.size(), -1);  // per argument: its index in `held`, or -1
  for (size_t k = 0; k < args.size(); ++k) {
    const at::Tensor* t = args[k];
    if (t->is_privateuseone()) {
      // An empty tensor has no storage value; it was none at capture either (no parameter reads it).
      values.push_back(t->storage().nbytes() == 0 ? nullptr : runtime::checked_storage_value(t->storage()));
      continue;
    }
    TORCH_CHECK(t->device().is_cpu() && t->dim() == 0, "torch_tpu: a compiled graph's argument is a ", t->device(),
                " tensor of shape ", t->sizes(), " (only tpu tensors and 0-dim CPU tensors are replayed)");
    if (t->scalar_type() == at::kComplexHalf || t->is_conj() || t->is_neg()) {
      held.push_back(t->scalar_type() == at::kComplexHalf
                         ? t->to(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)))
                         : scalar_to_device(*t, device));
      values.push_back(runtime::storage_value(held.back().storage()));
      held_as[k] = static_cast<int>(held.size()) - 1;
      continue;
    }
    engine::StorageValue& upload = uploads.emplace_back();
    upload.nbytes = t->element_size();
    upload.device = device;
    upload.hold(scalar_storage_buffer(*t, device), ir::Type{lowering::to_ir(t->scalar_type()), {1}});
    values.push_back(&upload);
  }
  std::vector<at::Tensor> outputs = checked(wrap_outputs(program_->launch(values)));
  // The program wrote these CPU scalars (an optimizer's step counts): their new
  // values come back, outputs of one program, so the first download waits for all.
  for (auto [input, result] : program_->mutated_inputs()) {
    const at::Tensor& cpu = *args[input];
    if (cpu.is_privateuseone()) continue;
    if (held_as[input] >= 0) {
      cpu.copy_(held[held_as[input]]);
      continue;
    }
    engine::StorageValue* v = values[input];
    TORCH_INTERNAL_ASSERT(v->buffer && v->buffer_dtype == lowering::to_ir(cpu.scalar_type()));
    engine::Runtime::get().download(*v->buffer, cpu.mutable_data_ptr(), cpu.element_size());
    cpu.unsafeGetTensorImpl()->bump_version();
  }
  return outputs;
}

std::vector<at::Tensor> CompiledProgram::run(const std::vector<at::Tensor>& inputs) const {
  return checked(wrap_outputs(program_->launch(storage_values(inputs))));
}

std::vector<at::Tensor> CompiledProgram::wrap_outputs(const std::vector<engine::BufferRef>& buffers) const {
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
