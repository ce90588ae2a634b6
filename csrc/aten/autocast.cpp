// Automatic mixed precision: torch.autocast("tpu", dtype=...) casts as on CUDA.
// The op lists and cast policies are PyTorch's own (ATen/autocast_mode.h keeps
// them for every backend): matmuls and convolutions run in the autocast dtype,
// reductions, norms, losses and precision-sensitive math in float32, mixed
// inputs of the "promote" ops in their widest type. Ops on no list pass
// through untouched. The casts are ordinary tpu ops, so they fuse with their
// consumers in fused mode.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace tpu::aten {
// PyTorch's op-list macros spell their signatures as ATen's own sources do, with
// ATen's names unqualified (which names depends on the release: torch 2.11's name
// DimnameList, which 2.13 no longer has).
using namespace at;  // NOLINT(google-build-using-namespace)

namespace {

// As on CUDA: binary_cross_entropy of low-precision probabilities loses the
// accuracy the loss needs, so autocast refuses it and names the safe op.
at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                        int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast on tpu: "
              "use torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, which "
              "combine the sigmoid and the loss and are safe under autocast, or run this loss in float32 "
              "(outside the autocast region, or with its inputs cast by .float())");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPU_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_AUTOCAST_FP32_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TPU_AUTOCAST_LOWER)
  AT_FORALL_FP32(TPU_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_AUTOCAST_FP32_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TPU_AUTOCAST_PROMOTE)
#undef TPU_AUTOCAST_LOWER
#undef TPU_AUTOCAST_FP32
#undef TPU_AUTOCAST_FP32_DTYPE
#undef TPU_AUTOCAST_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_refused));
}

}  // namespace tpu::aten
