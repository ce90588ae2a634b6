#include "lowering/types.h"

#include <c10/util/Exception.h>

namespace tpu::lowering {
std::string python_dtype_name(c10::ScalarType type) { return std::string(c10::getDtypeNames(type).first); }

namespace {
// "torch.complex64", as Python prints dtypes.
std::string python_name(c10::ScalarType type) { return "torch." + python_dtype_name(type); }
}  // namespace

bool has_ir_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::kBool: case c10::kByte: case c10::kChar: case c10::kShort: case c10::kInt:
    case c10::kLong: case c10::kHalf: case c10::kBFloat16: case c10::kFloat: case c10::kDouble:
    case c10::kUInt16: case c10::kUInt32: case c10::kUInt64: case c10::kComplexFloat: case c10::kComplexDouble:
      return true;
    default:
      return false;
  }
}

ir::DType to_ir(c10::ScalarType type) {
  switch (type) {
    case c10::kBool: return ir::DType::Pred;
    case c10::kByte: return ir::DType::U8;
    case c10::kChar: return ir::DType::S8;
    case c10::kShort: return ir::DType::S16;
    case c10::kInt: return ir::DType::S32;
    case c10::kLong: return ir::DType::S64;
    case c10::kHalf: return ir::DType::F16;
    case c10::kBFloat16: return ir::DType::BF16;
    case c10::kFloat: return ir::DType::F32;
    case c10::kDouble: return ir::DType::F64;
    case c10::kUInt16: return ir::DType::U16;
    case c10::kUInt32: return ir::DType::U32;
    case c10::kUInt64: return ir::DType::U64;
    case c10::kComplexFloat: return ir::DType::C64;
    case c10::kComplexDouble: return ir::DType::C128;
    case c10::kComplexHalf:
      TORCH_CHECK_TYPE(false, "torch_tpu: complex32 (chalf) tensors on tpu support only copies and dtype "
                       "conversions (XLA has no complex32 type); convert with .to(torch.complex64)");
    default:
      TORCH_CHECK_TYPE(false, "torch_tpu: dtype ", python_name(type), " is not supported on the tpu device");
  }
}

c10::ScalarType to_aten(ir::DType type) {
  switch (type) {
    case ir::DType::Pred: return c10::kBool;
    case ir::DType::U8: return c10::kByte;
    case ir::DType::S8: return c10::kChar;
    case ir::DType::S16: return c10::kShort;
    case ir::DType::S32: return c10::kInt;
    case ir::DType::S64: return c10::kLong;
    case ir::DType::F16: return c10::kHalf;
    case ir::DType::BF16: return c10::kBFloat16;
    case ir::DType::F32: return c10::kFloat;
    case ir::DType::F64: return c10::kDouble;
    case ir::DType::U16: return c10::kUInt16;
    case ir::DType::U32: return c10::kUInt32;
    case ir::DType::U64: return c10::kUInt64;
    case ir::DType::C64: return c10::kComplexFloat;
    case ir::DType::C128: return c10::kComplexDouble;
  }
  return c10::kFloat;
}

std::string unsupported_dtype_reason(const std::string& platform, c10::ScalarType type) {
  if (!has_ir_dtype(type))
    return "dtype " + python_name(type) + " is not supported on the tpu device";
  // TPUs have no 64-bit floating point; XLA would silently compute in f32.
  if (platform == "tpu" && type == c10::kDouble)
    return "float64 is not supported by TPU hardware (PJRT platform 'tpu'); use float32";
  if (platform == "tpu" && type == c10::kComplexDouble)
    return "complex128 is not supported by TPU hardware (PJRT platform 'tpu'); use complex64";
  return {};
}

}  // namespace tpu::lowering
