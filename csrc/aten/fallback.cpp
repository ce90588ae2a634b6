#include "aten/fallback.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>

#include "aten/fusion.h"
#include "engine/metrics.h"

namespace tpu::aten {
namespace {

bool fallback_is_error() {
  const char* mode = std::getenv("TORCH_TPU_FALLBACK");
  return mode != nullptr && std::strcmp(mode, "error") == 0;
}

// `missing`: what the op lacks on tpu, for the TORCH_TPU_FALLBACK=error message.
void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* missing) {
  const auto& name = op.schema().operator_name();
  std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), "torch_tpu: operator '", full, "' has no tpu lowering", missing,
                              " and TORCH_TPU_FALLBACK=error forbids running it on the CPU");
  engine::metrics().add_fallback(full);
  CutReasonScope reason(Cut::Fallback);  // in fused mode, reading the operands cuts the pending graph
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { run_on_cpu(op, stack, ""); }

void cpu_fallback_for_complex(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_cpu(op, stack, " for complex inputs");
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace tpu::aten
