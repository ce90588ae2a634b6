// Debug mode's check of index values. Strict and fused mode do not read indices
// back (that would cost a host sync per op): on the device, reads clamp an
// out-of-range index and writes drop it (see index.cpp). Debug mode, which waits
// for every op anyway, reads each index tensor's extremes first and raises at
// the op, with the exception type and message CPU PyTorch gives, before
// anything is written.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace at {
class Tensor;
}

namespace tpu::aten {

struct IndexBounds {
  int64_t size;                    // valid values: [0, size), or [-size, size) with negatives
  bool negatives = false;          // counted from the end
  std::optional<int64_t> ignored;  // a value exempt from the check (nll_loss's ignore_index)
};

// Python's exception type for an index out of range: CPU raises IndexError for
// some ops and RuntimeError for others.
enum class IndexError { Index, Runtime };

// In debug mode, raises when `index` holds a value outside `bounds`;
// `message(value)` is CPU's message for the offending value.
void check_index_values(const char* op, const at::Tensor& index, const IndexBounds& bounds, IndexError type,
                        const std::function<std::string(int64_t)>& message);

// CPU's usual message: "index 5 is out of bounds for dimension 0 with size 3".
std::function<std::string(int64_t)> out_of_bounds(int64_t dim, int64_t size, std::string prefix = "");

}  // namespace tpu::aten
