// Debug mode's checks of values, which the other modes leave to the device:
// they would cost a host read per op, and debug mode waits for every op anyway.
// Each raises at the op, before anything is written, the exception type and
// message CPU PyTorch gives, followed by the op and the user's source line.
//
// Index values: strict and fused mode clamp an out-of-range index on reads and
// drop it on writes (see index.cpp). Integer division by zero gives what the
// plugin's arithmetic gives (XLA:CPU: -1 for a quotient, the dividend for a
// remainder).
#pragma once

#include <c10/core/ScalarType.h>

#include <c10/util/FunctionRef.h>

#include <cstdint>
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

// The Python exception a check raises, as CPU does for the same op: IndexError
// or RuntimeError (an index out of range raises either, depending on the op).
enum class ErrorType { Index, Runtime };

// In debug mode, raises when `index` holds a value outside `bounds`;
// `message(value)` is CPU's message for the offending value.
// (A function_ref: the ops call this in every mode, and building the message
// costs nothing until an index is out of range.)
void check_index_values(const char* op, const at::Tensor& index, const IndexBounds& bounds, ErrorType type,
                        c10::function_ref<std::string(int64_t)> message);

// CPU's usual message: "index 5 is out of bounds for dimension 0 with size 3".
struct OutOfBounds {
  int64_t dim, size;
  const char* prefix = "";
  std::string operator()(int64_t value) const;
};

// In debug mode, raises CPU's RuntimeError "ZeroDivisionError" when a division in the
// integer dtype `common` (div with a rounding mode, floor_divide, remainder, fmod) has a
// zero in `divisor` and the result has elements (CPU divides nothing into an empty one).
void check_integer_divisor(const char* op, const at::Tensor& dividend, const at::Tensor& divisor,
                           c10::ScalarType common);

}  // namespace tpu::aten
