#include "aten/op_helpers.h"

#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DeviceGuard.h>

#include "ir/ops.h"
#include "lowering/reduce.h"
#include "lowering/types.h"

namespace tpu::aten {

ir::Shape to_shape(c10::IntArrayRef sizes) { return ir::Shape(sizes.begin(), sizes.end()); }

at::Tensor prepare_output(const char* name, const at::Tensor* out, c10::IntArrayRef shape,
                          c10::ScalarType dtype, c10::Device device, bool inplace) {
  if (out == nullptr) return at::empty(shape, at::TensorOptions().dtype(dtype).device(device));
  TORCH_CHECK(c10::canCast(dtype, out->scalar_type()), "result type ", dtype,
              " can't be cast to the desired output type ", out->scalar_type());
  if (inplace) {
    TORCH_CHECK(out->sizes().equals(shape), "output with shape ", out->sizes(),
                " doesn't match the broadcast shape ", shape);
  } else {
    at::native::resize_output(*out, shape);
  }
  return *out;
}

at::Tensor elementwise(const char* name, const std::vector<at::Tensor>& inputs, c10::ScalarType compute,
                       c10::ScalarType result, const Build& build, const at::Tensor* out, bool inplace) {
  c10::DimVector shape;
  for (const at::Tensor& t : inputs) shape = at::infer_size_dimvector(shape, t.sizes());
  int device = -1;
  for (const at::Tensor& t : inputs)
    if (t.is_privateuseone()) { device = t.device().index(); break; }
  if (device < 0 && out != nullptr) device = out->device().index();
  c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  c10::DeviceGuard guard(where);
  at::Tensor output = prepare_output(name, out, shape, result, where, inplace);
  Program p(name, device);
  ir::Graph& g = p.graph();
  ir::Shape target = to_shape(shape);
  std::vector<ir::Value> values;
  values.reserve(inputs.size());
  for (const at::Tensor& t : inputs) {
    ir::Value v = p.read_as(t, compute);
    values.push_back(ir::broadcast_to(g, v, target));
  }
  p.write(output, build(g, values));
  p.run();
  return output;
}

c10::ScalarType float_type_for(c10::ScalarType t) {
  return c10::isFloatingType(t) ? t : c10::typeMetaToScalarType(c10::get_default_dtype());
}

at::Tensor scalar_operand(const c10::Scalar& s) {
  at::Tensor t = at::scalar_tensor(s, at::TensorOptions().dtype(s.type()));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

ir::DType accumulate_type(c10::ScalarType t) { return lowering::accumulate_dtype(lowering::to_ir(t)); }

bool scalar_is(const c10::Scalar& s, double value) {
  return s.isIntegral(true) ? static_cast<double>(s.toLong()) == value : s.toDouble() == value;
}

}  // namespace tpu::aten
