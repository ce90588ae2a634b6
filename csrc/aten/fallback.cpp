// Ops without a lowering run on the CPU: inputs are copied out, the CPU kernel
// runs, results (and in-place updates) are copied back. Counted per op in
// torch_tpu.metrics(); TORCH_TPU_FALLBACK=error makes it an error instead.
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

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().operator_name();
  std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), "torch_tpu: operator '", full,
                              "' has no tpu lowering and TORCH_TPU_FALLBACK=error forbids running it on the CPU");
  engine::metrics().add_fallback(full);
  CutReasonScope reason(Cut::Fallback);  // in fused mode, reading the operands cuts the pending graph
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace tpu::aten
