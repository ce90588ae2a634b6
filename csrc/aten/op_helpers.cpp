#include "aten/op_helpers.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/native/LinearAlgebraUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ScalarOps.h>
#include <c10/core/DeviceGuard.h>

#include <optional>
#include <string>
#include <unordered_set>

#include "aten/op_memo.h"
#include "ir/ops.h"
#include "lowering/reduce.h"
#include "lowering/types.h"

namespace tpu::aten {

ir::Shape to_shape(c10::IntArrayRef sizes) { return ir::Shape(sizes.begin(), sizes.end()); }

std::string variant(const char* op, const at::Tensor* out, bool inplace) {
  return std::string(op) + (inplace ? "_" : out != nullptr ? ".out" : "");
}

at::Tensor prepare_output(const char* name, const at::Tensor* out, c10::IntArrayRef shape,
                          c10::ScalarType dtype, c10::Device device, bool inplace, at::MemoryFormat format) {
  if ((format == at::MemoryFormat::ChannelsLast && shape.size() != 4) ||
      (format == at::MemoryFormat::ChannelsLast3d && shape.size() != 5))
    format = at::MemoryFormat::Contiguous;
  if (out == nullptr) {
    if (format == at::MemoryFormat::Contiguous) return new_tensor(shape, dtype, device);
    return at::empty(shape, at::TensorOptions().dtype(dtype).device(device).memory_format(format));
  }
  TORCH_CHECK(c10::canCast(dtype, out->scalar_type()), "result type ", dtype,
              " can't be cast to the desired output type ", out->scalar_type());
  if (inplace) {
    TORCH_CHECK(out->sizes().equals(shape), "output with shape ", out->sizes(),
                " doesn't match the broadcast shape ", shape);
  } else if (at::native::resize_output(*out, shape) && format != at::MemoryFormat::Contiguous) {
    out->unsafeGetTensorImpl()->empty_tensor_restride(format);
  }
  return *out;
}

at::Tensor prepare_matrix_output(const char* name, const at::Tensor* out, c10::IntArrayRef shape,
                                 c10::ScalarType dtype, c10::Device device) {
  if (shape.size() < 2) return prepare_output(name, out, shape, dtype, device, false);
  c10::DimVector strides = at::native::batched_matrix_contiguous_strides(shape, /*f_contig=*/true);
  if (out == nullptr) return at::empty_strided(shape, strides, at::TensorOptions().dtype(dtype).device(device));
  bool resized = !out->sizes().equals(shape);  // resize_output leaves an out of the right shape as it is
  prepare_output(name, out, shape, dtype, device, false);
  if (resized) out->as_strided_(shape, strides);
  return *out;
}

at::Tensor new_elementwise_output(const TensorRefs& inputs, c10::IntArrayRef shape, c10::ScalarType dtype,
                                  c10::Device device) {
  bool contiguous = true;
  for (const at::Tensor& t : inputs) contiguous = contiguous && (t.dim() == 0 || t.is_contiguous());
  if (contiguous || shape.size() < 2) return new_tensor(shape, dtype, device);
  at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(false).check_all_same_dtype(false);
  config.add_owned_output(at::Tensor());
  at::TensorOptions meta = at::TensorOptions().dtype(at::kFloat).device(c10::kMeta);
  for (const at::Tensor& t : inputs) config.add_owned_const_input(at::empty_strided(t.sizes(), t.strides(), meta));
  at::TensorIterator iter = config.build();
  return at::empty_strided(shape, iter.output(0).strides(), options);
}


at::Tensor elementwise(const char* name, const TensorRefs& inputs, c10::ScalarType compute,
                       c10::ScalarType result, const Build& build, const at::Tensor* out, bool inplace,
                       std::optional<uint64_t> captures) {
  c10::DimVector shape;
  for (const at::Tensor& t : inputs) shape = at::infer_size_dimvector(shape, t.sizes());
  int device = -1;
  for (const at::Tensor& t : inputs)
    if (t.is_privateuseone()) { device = t.device().index(); break; }
  if (device < 0 && out != nullptr) device = out->device().index();
  c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  c10::DeviceGuard guard(where);
  at::Tensor output = out == nullptr ? new_elementwise_output(inputs, shape, result, where)
                                     : prepare_output(name, out, shape, result, where, inplace);
  if (out != nullptr)  // as TensorIterator: an input may be the output, not part of it
    for (const at::Tensor& t : inputs) at::assert_no_partial_overlap(output, t);
  ProgramBatch* batch = ProgramBatch::active();
  std::optional<Program> own;
  if (batch == nullptr) own.emplace(name, device);
  Program& p = batch != nullptr ? batch->program() : *own;
  auto build_into = [&](Program& q) {
    ir::Graph& g = q.graph();
    ir::Shape target = to_shape(shape);
    for (const at::Tensor& t : inputs) check_complex_support(name, t.scalar_type());
    check_complex_support(name, compute);
    check_complex_support(name, result);
    std::vector<ir::Value> values;
    values.reserve(inputs.size());
    for (const at::Tensor& t : inputs) {
      ir::Value v = read_operand(q, t, compute);
      values.push_back(ir::broadcast_to(g, v, target));
    }
    q.write(output, build(g, values));
  };
  if (captures) {
    c10::SmallVector<const at::Tensor*, 5> tensors;
    for (const at::Tensor& t : inputs) tensors.push_back(&t);
    tensors.push_back(&output);
    // The op's build (its lambda's type) and what it captured.
    const int64_t words[] = {static_cast<int64_t>(*captures), static_cast<int64_t>(compute) |
                                                                  static_cast<int64_t>(result) << 8 |
                                                                  static_cast<int64_t>(inplace) << 16};
    build_or_apply(p, name, tensors, build.target_type(), words, build_into);
  } else {
    build_into(p);
  }
  if (batch == nullptr) p.run();
  return output;
}

void build_or_apply(Program& p, const char* name, std::span<const at::Tensor* const> tensors,
                    const std::type_info& site, std::span<const int64_t> captures,
                    c10::function_ref<void(Program&)> build) {
  if (op_memo::enabled()) {
    op_memo::Key key;
    key.add(reinterpret_cast<intptr_t>(&site));
    for (int64_t word : captures) key.add(word);
    auto record = [&](Program::Recipe& recipe) {
      Program recording(name, p.device());
      recording.record_into(&recipe, tensors);
      build(recording);
      return recording.finish_recording();
    };
    if (const Program::Recipe* recipe = op_memo::find_or_record(key, name, p.device(), tensors, record)) {
      // A batch's program holds its other ops too; a program of its own holds just this op.
      ProgramBatch* batch = ProgramBatch::active();
      bool alone = batch == nullptr || &batch->program() != &p;
      if (alone ? p.apply_alone(*recipe, tensors) : p.apply(*recipe, tensors)) return;
    }
  }
  build(p);
}

namespace {
thread_local ProgramBatch* current_batch = nullptr;
}

ProgramBatch::ProgramBatch(const char* name, int device, size_t ops, const c10::Scalar* shared)
    : program_(name, device), shared_(shared), previous_(current_batch) {
  program_.reserve(3 * ops);  // most elementwise ops read two or three operands
  if (shared != nullptr) {
    shared_operand_ = at::native::wrapped_scalar_tensor(*shared);
    scalars_ = std::span<const c10::Scalar* const>(&shared_, 1);
    wrapped_ = std::span<const at::Tensor>(&shared_operand_, 1);
  }
  current_batch = this;
}
ProgramBatch::ProgramBatch(const char* name, int device, size_t ops, std::span<const c10::Scalar* const> scalars,
                           std::span<const at::Tensor> wrapped)
    : program_(name, device), scalars_(scalars), wrapped_(wrapped), previous_(current_batch) {
  program_.reserve(3 * ops);
  current_batch = this;
}
ProgramBatch::~ProgramBatch() { end(); }
void ProgramBatch::end() {
  if (ended_) return;
  ended_ = true;
  current_batch = previous_;
}
void ProgramBatch::run() {
  end();
  program_.run();
}
ProgramBatch* ProgramBatch::active() { return current_batch; }

int common_device(std::initializer_list<at::TensorList> lists) {
  int device = -1;
  for (at::TensorList list : lists)
    for (const at::Tensor& t : list) {
      if (!t.defined() || !t.is_privateuseone()) return -1;
      int d = t.device().index();
      if (device < 0) device = d;
      else if (d != device) return -1;
    }
  return device;
}

c10::ScalarType float_type_for(c10::ScalarType t) {
  return c10::isFloatingType(t) || c10::isComplexType(t) ? t : c10::typeMetaToScalarType(c10::get_default_dtype());
}

ir::Value scalar_value(Program& p, const c10::Scalar& s, ir::DType dtype) {
  if (!ir::is_complex(dtype)) return p.scalar(s, dtype);
  // Scalars travel as real parameters: the two parts, joined on the device.
  ir::DType part = ir::complex_part(dtype);
  c10::complex<double> z = s.toComplexDouble();
  return ir::complex(p.graph(), p.scalar(z.real(), part), p.scalar(z.imag(), part));
}

ir::Value read_operand(Program& p, const at::Tensor& t, c10::ScalarType dtype) {
  ir::DType target = lowering::to_ir(dtype);
  if (!ir::is_complex(target) && !t.is_complex()) return p.read_as(t, dtype);
  if (t.device().is_cpu() && t.dim() == 0) return scalar_value(p, cpu_scalar_value(t), target);
  return ir::convert(p.graph(), p.read(t), target);
}

void check_complex_support(const char* name, c10::ScalarType dtype) {
  if (!c10::isComplexType(dtype)) return;
  // Ops whose lowering is right for complex operands (others would drop the
  // imaginary part or fail inside XLA).
  static const std::unordered_set<std::string> supported{
      "add", "sub", "mul", "div", "rsub", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sin", "cos",
      "log1p", "expm1", "log2", "log10", "reciprocal", "where", "eq", "ne", "sgn", "abs",
      "conj_physical", "_conj_physical", "complex", "polar", "masked_fill", "tanh_backward", "angle"};
  std::string base(name);
  base = base.substr(0, base.find('.'));
  if (base.size() > 1 && base.back() == '_' && !supported.count(base)) base.pop_back();
  TORCH_CHECK_NOT_IMPLEMENTED(supported.count(base), "\"", base, "\" not implemented for '", c10::toString(dtype),
                              "' on tpu");
}

at::Tensor scalar_operand(const c10::Scalar& s) {
  if (ProgramBatch* batch = ProgramBatch::active())
    if (const at::Tensor* shared = batch->shared_operand(s)) return *shared;
  return at::native::wrapped_scalar_tensor(s);  // made directly, no dispatch
}

ir::DType accumulate_type(c10::ScalarType t) { return lowering::accumulate_dtype(lowering::to_ir(t)); }

bool scalar_is(const c10::Scalar& s, double value) {
  return s.isIntegral(true) ? static_cast<double>(s.toLong()) == value : s.toDouble() == value;
}

bool prepare_steps_out(const char* op, int64_t steps, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  TORCH_CHECK(!c10::isComplexType(out.scalar_type()), op, ": complex dtypes are not supported on tpu");
  if (out.numel() != steps) out.resize_({steps});
  return steps > 0;
}

}  // namespace tpu::aten
