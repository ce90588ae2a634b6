#include "aten/fallback.h"

#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/program.h"
#include "engine/config.h"
#include "engine/metrics.h"
#include "engine/pending_graph.h"

namespace tpu::aten {
namespace {

bool fallback_is_error() {
  return engine::config::equals(engine::config::Knob::Fallback, "error");
}

// `missing`: what the op lacks on tpu, for the TORCH_TPU_FALLBACK=error message.
// Returns the op's name once the fallback is allowed and counted.
std::string count_fallback(const c10::OperatorHandle& op, const char* missing) {
  const auto& name = op.schema().operator_name();
  std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), "torch_tpu: operator '", full, "' has no tpu lowering", missing,
                              " and TORCH_TPU_FALLBACK=error forbids running it on the CPU");
  engine::metrics().add_fallback(full);
  return full;
}

// CUDA's kernels reject operands on two devices; ATen's CPU fallback would run
// the op and leave its results wherever the first operand lives (a CPU input and
// a tpu weight: the result silently on the CPU). A 0-dim CPU tensor is a scalar,
// as on CUDA; index lists (Tensor?[]) may hold CPU indices, as CUDA's indexing allows.
void check_same_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  size_t count = op.schema().arguments().size();
  std::optional<c10::Device> tpu, other;
  auto note = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.is_privateuseone()) {
      if (!tpu) tpu = t.device();
      else if (*tpu != t.device() && !other) other = t.device();
    } else if (t.dim() > 0 && !other) {
      other = t.device();
    }
  };
  for (size_t i = stack.size() - count; i < stack.size(); ++i) {
    const c10::IValue& value = stack[i];
    if (value.isTensor()) {
      note(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) note(t);
    }
  }
  if (!tpu || !other) return;
  const auto& name = op.schema().operator_name();
  raise_device_mismatch(*tpu, *other, name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
}

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* missing) {
  check_same_device(op, *stack);
  count_fallback(op, missing);
  engine::CutReasonScope reason(engine::Cut::Fallback);  // in fused mode, reading the operands cuts the pending graph
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

// Replaces the tensors in `value` (a tensor or a list of them) by f(tensor).
template <typename F>
void map_tensors(c10::IValue& value, const F& f) {
  if (value.isTensor()) {
    value = f(value.toTensor());
  } else if (value.isTensorList()) {
    c10::List<at::Tensor> list = value.toTensorList().copy();
    for (size_t k = 0; k < list.size(); ++k) list[k] = f(static_cast<at::Tensor>(list[k]));
    value = list;
  } else if (value.isList()) {  // Tensor?[] (index lists)
    c10::List<c10::IValue> list = value.toList().copy();
    for (size_t k = 0; k < list.size(); ++k) {
      c10::IValue element = list.get(k);
      if (element.isTensor()) list.set(k, f(element.toTensor()));
    }
    value = list;
  }
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { run_on_cpu(op, stack, ""); }

void cpu_fallback_for_complex(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_cpu(op, stack, " for complex inputs");
}

// ATen's CPU fallback moves operands with _to_cpu, which does not keep sparse
// layouts; here every tpu tensor travels with .to(), which does. Operands the
// op writes (out=, in-place) get the CPU results copied back.
void cpu_fallback_for_sparse(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string name = count_fallback(op, " for sparse tensors");
  engine::CutReasonScope reason(engine::Cut::Fallback);
  const auto& schema = op.schema();
  std::optional<c10::Device> device;
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (tpu operand, its CPU stand-in)
  size_t first = stack->size() - schema.arguments().size();
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    const auto* alias = schema.arguments()[i].alias_info();
    bool writes = alias != nullptr && alias->isWrite();
    auto to_cpu = [&](const at::Tensor& t) {
      if (!t.defined() || !t.is_privateuseone()) return t;
      device = t.device();
      at::Tensor host = t.to(c10::kCPU);
      // Some kernels look at it (sparse.mm with a reduction keeps what backward needs).
      if (t.requires_grad()) host.requires_grad_(true);
      if (writes) written.emplace_back(t, host);
      return host;
    };
    if (value.isDevice() && value.toDevice().is_privateuseone()) {  // a factory's device= argument
      device = value.toDevice();
      value = c10::IValue(c10::Device(c10::kCPU));
    }
    map_tensors(value, to_cpu);
  }
  // Nothing to move would send the op straight back here.
  TORCH_CHECK(device.has_value(), "torch_tpu: '", name, "' has no tpu kernel for sparse tensors and no tpu operand "
              "to run it on the CPU with");
  op.callBoxed(stack);
  for (auto& [tpu, host] : written) {
    TORCH_CHECK(tpu.layout() == host.layout(), "torch_tpu: the CPU fallback of '", name, "' turned a ", tpu.layout(),
                " operand into a ", host.layout(), " one, which a tpu tensor cannot follow");
    if (tpu.layout() == c10::kStrided) at::native::resize_output(tpu, host.sizes());
    tpu.copy_(host);
  }
  // A result that is a written operand is that operand; others move back.
  auto to_device = [&](const at::Tensor& t) {
    for (auto& [tpu, host] : written)
      if (host.is_same(t)) return tpu;
    return t.defined() ? t.to(*device) : t;
  };
  for (size_t i = stack->size() - schema.returns().size(); i < stack->size(); ++i) map_tensors((*stack)[i], to_device);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace tpu::aten
