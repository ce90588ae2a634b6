#include "aten/debug_checks.h"

#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/any.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/stack.h>
#include <c10/util/Exception.h>

#include "engine/diagnostics.h"
#include "engine/runtime.h"

namespace tpu::aten {

namespace {

[[noreturn]] void raise(ErrorType type, const std::string& message, const char* op) {
  std::string location = engine::user_location();
  std::string text = message + " (torch_tpu debug mode: " + op + (location.empty() ? "" : " at " + location) + ")";
  if (type == ErrorType::Index) TORCH_CHECK_INDEX(false, text);
  TORCH_CHECK(false, text);
}

bool debug_mode() { return engine::eager_mode() == engine::EagerMode::Debug; }

}  // namespace

void check_index_values(const char* op, const at::Tensor& index, const IndexBounds& bounds, ErrorType type,
                        c10::function_ref<std::string(int64_t)> message) {
  if (!debug_mode() || !index.defined() || index.numel() == 0) return;
  at::Tensor values = index.to(at::kLong);
  if (bounds.ignored) values = values.masked_fill(values.eq(*bounds.ignored), 0);
  auto [low, high] = at::aminmax(values);
  at::Tensor extremes = at::stack({low, high}).cpu();  // one read back
  int64_t lowest = extremes[0].item<int64_t>(), highest = extremes[1].item<int64_t>();
  int64_t bad;
  if (highest >= bounds.size)
    bad = highest;
  else if (lowest < (bounds.negatives ? -bounds.size : 0))
    bad = lowest;
  else
    return;
  raise(type, message(bad), op);
}

void check_integer_divisor(const char* op, const at::Tensor& dividend, const at::Tensor& divisor,
                           c10::ScalarType common) {
  if (!debug_mode() || !c10::isIntegralType(common, /*includeBool=*/true) || divisor.numel() == 0) return;
  if (c10::multiply_integers(at::infer_size_dimvector(dividend.sizes(), divisor.sizes())) == 0) return;
  if (divisor.eq(0).any().item<bool>()) raise(ErrorType::Runtime, "ZeroDivisionError", op);
}

std::string OutOfBounds::operator()(int64_t value) const {
  return prefix + ("index " + std::to_string(value)) + " is out of bounds for dimension " + std::to_string(dim) +
         " with size " + std::to_string(size);
}

}  // namespace tpu::aten
