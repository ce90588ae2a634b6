// torch._assert_async on tpu, asynchronous as CUDA's: the check is recorded,
// not waited for, and a failed one is raised at the next read of tpu data to the
// host (.item(), .cpu(), printing) or torch.tpu.synchronize(), as CUDA's
// "device-side assert triggered" is. Debug mode checks at the op, as the CPU does.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>

#include <string>
#include <vector>

namespace tpu::aten {

// Reads the recorded checks' values and raises RuntimeError with the first
// failed check's message; every recorded check is consumed either way.
void check_pending_asserts();

// A recorded check: a bool copy of the asserted value, and the message it raises.
struct PendingAssert {
  at::Tensor holds;
  std::string message;
};
// Takes the recorded checks `taken` picks out of the others (a compiled graph's: its
// program returns their values, and each call records them anew).
std::vector<PendingAssert> take_pending_asserts(c10::function_ref<bool(const at::Tensor&)> taken);
void record_pending_assert(PendingAssert check);

}  // namespace tpu::aten
