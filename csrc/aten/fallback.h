// The CPU fallback: an op runs on the CPU, its tpu operands copied out and its
// results (and in-place updates) copied back, counted per op in
// torch_tpu.metrics(); TORCH_TPU_FALLBACK=error makes it an error instead.
#pragma once

#include <ATen/core/stack.h>

namespace c10 {
class OperatorHandle;
}

namespace tpu::aten {

// For every op without a tpu kernel (registered as the PrivateUse1 fallback).
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// For ops whose tpu kernels cover real dtypes only, called on complex inputs.
void cpu_fallback_for_complex(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// For sparse (COO and compressed) tpu operands: moves them with their layout.
void cpu_fallback_for_sparse(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace tpu::aten
