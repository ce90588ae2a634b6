#include "aten/assert_async.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_to_copy.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime.h"

namespace tpu::aten {
namespace {

// More recorded checks than this are read at the next assert, so that a loop
// that never reads its results does not keep tensors without bound.
constexpr size_t kMaxPending = 256;

std::mutex g_mutex;
std::vector<PendingAssert> g_pending;
std::atomic<bool> g_any{false};  // every read of tpu data asks: no lock when nothing is pending

constexpr const char* kZero = "Expected Tensor with single nonzero value, but got zero";

void check_shape(const at::Tensor& self) {
  TORCH_CHECK(self.numel() != 0, "Boolean value of Tensor with no values is ambiguous");
  TORCH_CHECK(self.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
}

void record(const at::Tensor& self, std::optional<c10::string_view> message) {
  check_shape(self);
  std::string text = message ? std::string(*message) : std::string(kZero);
  if (engine::eager_mode() == engine::EagerMode::Debug) {
    TORCH_CHECK(self.item().toBool(), text);
    return;
  }
  // A bool copy of the value when asserted: later writes to it do not count.
  record_pending_assert({at::_to_copy(self, at::kBool), std::move(text)});
}

void assert_async(const at::Tensor& self) { record(self, std::nullopt); }

void assert_async_msg(const at::Tensor& self, c10::string_view message) { record(self, message); }

}  // namespace

void record_pending_assert(PendingAssert check) {
  bool full;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_pending.push_back(std::move(check));
    g_any.store(true, std::memory_order_release);
    full = g_pending.size() > kMaxPending;
  }
  if (full) check_pending_asserts();
}

std::vector<PendingAssert> take_pending_asserts(c10::function_ref<bool(const at::Tensor&)> taken) {
  std::vector<PendingAssert> picked;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto kept = std::stable_partition(g_pending.begin(), g_pending.end(),
                                    [&](const PendingAssert& check) { return !taken(check.holds); });
  std::move(kept, g_pending.end(), std::back_inserter(picked));
  g_pending.erase(kept, g_pending.end());
  g_any.store(!g_pending.empty(), std::memory_order_release);
  return picked;
}

void check_pending_asserts() {
  if (!g_any.load(std::memory_order_acquire)) return;
  std::vector<PendingAssert> pending;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_any.store(false, std::memory_order_relaxed);
    pending.swap(g_pending);  // taken first: reading them below reads tpu data too
  }
  for (const PendingAssert& check : pending)
    TORCH_CHECK(check.holds.item().toBool(), check.message,
                " (torch._assert_async on tpu: raised at the first read of tpu data after it)");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_assert_async", assert_async);
  m.impl("_assert_async.msg", assert_async_msg);
}

}  // namespace tpu::aten
