// ATen dtypes <-> IR element types, and what a platform can hold.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

#include "ir/graph.h"

namespace tpu::lowering {

bool has_ir_dtype(c10::ScalarType type);
ir::DType to_ir(c10::ScalarType type);  // throws c10::Error for unsupported dtypes
c10::ScalarType to_aten(ir::DType type);
// "float32", "int64", ... as Python spells dtypes.
std::string python_dtype_name(c10::ScalarType type);
// Empty when `platform` (the PJRT platform name) can hold `type`, else why not.
std::string unsupported_dtype_reason(const std::string& platform, c10::ScalarType type);

}  // namespace tpu::lowering
