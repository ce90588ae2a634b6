// torch._assert_async on tpu, asynchronous as CUDA's: the check is recorded,
// not waited for, and a failed one is raised at the next read of tpu data to the
// host (.item(), .cpu(), printing) or torch.tpu.synchronize(), as CUDA's
// "device-side assert triggered" is. Debug mode checks at the op, as the CPU does.
#pragma once

namespace tpu::aten {

// Reads the recorded checks' values and raises RuntimeError with the first
// failed check's message; every recorded check is consumed either way.
void check_pending_asserts();

}  // namespace tpu::aten
