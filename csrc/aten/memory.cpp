// Creation, resizing, copies between devices and the metadata-only view ops.
#include <ATen/MemoryOverlap.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/view_as_complex.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <c10/core/DeviceGuard.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <torch/library.h>

#include "aten/assert_async.h"
#include "aten/op_helpers.h"
#include "aten/program.h"
#include "engine/runtime.h"
#include "ir/ops.h"
#include "lowering/elementwise.h"
#include "lowering/types.h"
#include "lowering/view.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"

namespace tpu::aten {
namespace {

constexpr c10::DispatchKeySet kTpuKeys(c10::DispatchKey::PrivateUse1);

// complex32 has no XLA element type: a chalf tensor's storage holds its
// (real, imag) float16 pairs, which copies reach through view_as_real and
// convert through complex64. Other ops on chalf say it is unsupported (to_ir).
bool is_chalf(const at::Tensor& t) { return t.scalar_type() == c10::kComplexHalf; }
// The float16 pairs a chalf tensor's storage holds, its lazy conjugation set aside.
at::Tensor raw_pairs(const at::Tensor& t) { return at::view_as_real(t.is_conj() ? t.conj() : t); }

void check_dtype(c10::ScalarType dtype) {
  if (dtype == c10::kComplexHalf) return;
  // Asked once per supported dtype (the platform is fixed for the process): every new tensor checks.
  static std::array<std::atomic<bool>, static_cast<size_t>(c10::ScalarType::NumOptions)> supported{};
  auto& known = supported.at(static_cast<size_t>(dtype));
  if (known.load(std::memory_order_relaxed)) return;
  std::string why = lowering::unsupported_dtype_reason(runtime::platform_name(), dtype);
  TORCH_CHECK_TYPE(why.empty(), "torch_tpu: ", why);
  known.store(true, std::memory_order_relaxed);
}

c10::Device target_device(std::optional<c10::Device> device) {
  int index = device && device->has_index() ? device->index() : runtime::current_device();
  runtime::check_device(index);
  return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  c10::ScalarType type = dtype.value_or(c10::get_default_dtype_as_scalartype());
  c10::DeviceGuard guard(target_device(device));
  check_dtype(type);
  return at::detail::empty_generic(size, runtime::tpu_allocator(), kTpuKeys, type, memory_format);
}

// A tensor of zeros that holds no memory (autograd's zero gradients, e.g.
// sgn's for real inputs): the ZeroTensor dispatch key hands every op zeros in
// its place, as on CPU and CUDA.
at::Tensor efficient_zero_tensor(c10::SymIntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  c10::Device where = target_device(device);
  static std::mutex mutex;
  static auto* allocators = new std::map<int, std::unique_ptr<at::native::ZeroTensorAllocator>>();
  at::Allocator* allocator;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = (*allocators)[where.index()];
    if (!slot) slot = std::make_unique<at::native::ZeroTensorAllocator>(where);
    allocator = slot.get();
  }
  c10::ScalarType type = dtype.value_or(c10::get_default_dtype_as_scalartype());
  check_dtype(type);
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), allocator,
                                   kTpuKeys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor), type, std::nullopt);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  c10::ScalarType type = dtype.value_or(c10::get_default_dtype_as_scalartype());
  c10::DeviceGuard guard(target_device(device));
  check_dtype(type);
  return at::detail::empty_strided_generic(size, stride, runtime::tpu_allocator(), kTpuKeys, type);
}

// A contiguous CPU copy of a tpu tensor's elements (shape and dtype of `src`).
at::Tensor to_cpu(const at::Tensor& src) {
  // Raw values: a lazily conjugated chalf is read without its bit (the caller applies it).
  if (is_chalf(src)) return at::view_as_complex(to_cpu(raw_pairs(src)));
  at::Tensor host = at::empty(src.sizes(), src.options().device(c10::kCPU));
  if (src.numel() == 0) return host;
  engine::StorageValue* value = runtime::checked_storage_value(src.storage());
  // The read runs what is pending (fused mode), which may be refused for memory before it launches.
  try {
    engine::materialize(value);
    engine::BufferRef buffer;
    bool whole = value->buffer && value->dtype == lowering::to_ir(src.scalar_type()) && fills_whole_storage(src);
    if (whole && !src.is_contiguous()) {
      // Its whole storage in another dimension order (a transposed input's elementwise
      // result): downloaded as it lies and reordered on the host, without a program.
      at::Tensor raw = at::empty_strided(src.sizes(), src.strides(), src.options().device(c10::kCPU));
      engine::Runtime::get().download(*value->buffer, raw.data_ptr(), raw.nbytes());
      host.copy_(raw);
      check_pending_asserts();
      return host;
    }
    if (whole && src.is_contiguous()) {
      buffer = value->buffer;
    } else {
      Program p("to_cpu", src.device());
      ir::Value v = p.read(src);
      buffer = p.run_for_result(v);
    }
    engine::Runtime::get().download(*buffer, host.data_ptr(), host.nbytes());
  } catch (const engine::Error& e) {
    raise_device_error(c10::str("torch_tpu: reading a tpu tensor of shape ", src.sizes(), " (", src.scalar_type(), ")"),
                       e, src.device().index());
  }
  check_pending_asserts();
  return host;
}

// Writes CPU data into a tpu tensor (broadcasting and converting as copy_ does).
void from_cpu(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor host = src.to(dst.scalar_type()).expand(dst.sizes());
  // dst's storage holds its raw values: undo dst's lazy conjugation/negation.
  if (dst.is_conj()) host = host.conj();
  if (dst.is_neg()) host = host._neg_view();
  host = host.resolve_conj().resolve_neg().contiguous();
  if (is_chalf(dst)) return from_cpu(at::view_as_real(host), raw_pairs(dst));  // as float16 pairs
  if (dst.numel() == 0) return;
  int device = dst.device().index();
  ir::DType dtype = lowering::to_ir(dst.scalar_type());
  // Complex data travels as pairs of its part type (the runtime uploads real
  // element types); a program joins the pairs.
  bool complex = ir::is_complex(dtype);
  ir::DType wire = ir::complex_part(dtype);
  int64_t count = complex ? 2 * host.numel() : host.numel();
  engine::StorageValue* value = runtime::checked_storage_value(dst.storage());
  // A whole storage is uploaded in the tensor's shape (see engine::StorageValue::buffer_shape).
  bool whole = !complex && covers_whole_storage(dst);
  ir::Shape shape = whole && dst.dim() >= 2 ? ir::Shape(dst.sizes().begin(), dst.sizes().end()) : ir::Shape{count};
  engine::BufferRef buffer;
  try {
    buffer = engine::Runtime::get().upload(host.data_ptr(), wire, shape, device);
  } catch (const engine::Error& e) {
    raise_device_error(c10::str("torch_tpu: copying a tensor of shape ", dst.sizes(), " (", dst.scalar_type(),
                                ") to tpu"),
                       e, device);
  }
  if (whole) {  // the upload is the new storage value: no program needed
    engine::set_buffer(value, std::move(buffer), ir::Type{dtype, shape});
    return;
  }
  Program p("copy_", device);
  ir::Value v = p.bind(buffer, ir::Type{wire, {count}});
  if (complex) v = ir::reinterpret(p.graph(), v, dtype);
  p.write(dst, ir::reshape(p.graph(), v, ir::Shape(dst.sizes().begin(), dst.sizes().end())));
  p.run();
}

// The host copy of a tpu tensor's logical values: its raw values with its
// lazy conjugation/negation bits (the CPU copy_ resolves them).
at::Tensor to_cpu_logical(const at::Tensor& src) {
  at::Tensor host = to_cpu(src);
  if (src.is_conj()) host = host.conj();
  if (src.is_neg()) host = host._neg_view();
  return host;
}

// Between two tpu devices, never through the host: self's logical values as a
// buffer on its device, copied by the plugin to dst's device, written into dst
// there (dtype converted, dst's lazy bits applied, broadcast to dst's shape).
void copy_between_devices(const at::Tensor& self, const at::Tensor& dst) {
  const ir::Type type = tensor_type(self);
  engine::BufferRef here;
  if (self.is_conj() || self.is_neg()) {
    Program read("copy_", self.device());
    here = read.run_for_result(read.read_logical(self));
  } else {
    here = value_buffer(self, "copy_");
  }
  const int device = dst.device().index();
  engine::BufferRef there;
  try {
    there = engine::Runtime::get().copy_to_device(here, type, device);
  } catch (const engine::Error& e) {
    raise_device_error(c10::str("torch_tpu: copying a tensor of shape ", self.sizes(), " from ", self.device(),
                                " to ", dst.device()),
                       e, device);
  }
  if (!dst.is_conj() && !dst.is_neg() && self.sizes() == dst.sizes()) {
    assign_buffer(dst, std::move(there), type, "copy_");
    return;
  }
  Program write("copy_", dst.device());
  ir::Value v = write.apply_lazy_bits(dst, write.bind(there, type));  // logical to dst's raw values
  write.write(dst, ir::broadcast_to(write.graph(), v, ir::Shape(dst.sizes().begin(), dst.sizes().end())));
  write.run();
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  bool src_tpu = self.is_privateuseone(), dst_tpu = dst.is_privateuseone();
  if (self.sizes() != dst.sizes()) {  // CPU's broadcast rules and messages
    at::DimVector shape = at::infer_size_dimvector(dst.sizes(), self.sizes());
    TORCH_CHECK(c10::IntArrayRef(shape) == dst.sizes(), "output with shape ", dst.sizes(),
                " doesn't match the broadcast shape ", c10::IntArrayRef(shape));
  }
  if (self.is_complex() && !dst.is_complex()) {
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
  }
  if (src_tpu && dst_tpu && self.device() == dst.device() && (is_chalf(self) || is_chalf(dst))) {
    at::Tensor values = self;
    if (is_chalf(self)) {  // widened from its raw pairs, its lazy conjugation kept
      values = at::view_as_complex(raw_pairs(self).to(c10::kFloat));
      if (self.is_conj()) values = values.conj();
    }
    if (is_chalf(dst)) {  // dst's storage holds raw values
      at::Tensor wide = values.to(c10::kComplexFloat);
      if (dst.is_conj()) wide = wide.conj();
      raw_pairs(dst).copy_(at::view_as_real(wide.resolve_conj()));
    } else {
      dst.copy_(values);
    }
  } else if (src_tpu && dst_tpu && self.device() == dst.device()) {
    at::assert_no_partial_overlap(dst, self);  // CPU's TensorIterator check
    Program p("copy_", dst.device());
    const at::Tensor* tensors[] = {&self, &dst};
    build_or_apply(p, "copy_", tensors, {}, [&](Program& q) {
      ir::Value v = q.read(self);
      ir::Graph& g = q.graph();
      // Raw values in, raw values out: apply the lazy bits that differ.
      if (self.is_conj() != dst.is_conj()) v = lowering::conj(g, v);
      if (self.is_neg() != dst.is_neg()) v = ir::unary(g, ir::Op::Negate, v);
      q.write(dst, ir::broadcast_to(g, v, ir::Shape(dst.sizes().begin(), dst.sizes().end())));
    });
    p.run();
  } else if (src_tpu && dst_tpu && !is_chalf(self) && !is_chalf(dst)) {
    copy_between_devices(self, dst);
  } else if (src_tpu) {
    at::Tensor host = to_cpu_logical(self);
    if (dst_tpu)
      from_cpu(host, dst);  // between two tpu devices (complex32), staged through the host
    else
      dst.copy_(host);
  } else {
    from_cpu(self, dst);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  return to_cpu_logical(self).resolve_conj().resolve_neg().item();
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size_sym,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto size = C10_AS_INTARRAYREF_SLOW(size_sym);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (memory_format) impl->empty_tensor_restride(*memory_format);
  size_t needed = at::detail::computeStorageNbytes(size, impl->strides(), self.element_size(),
                                                   impl->storage_offset());
  if (needed > self.storage().nbytes()) runtime::resize_storage_bytes(self.storage(), needed);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1,
              "set_: expected a tpu storage, got one on ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  std::vector<int64_t> strides = stride.vec();
  if (stride.data() == nullptr) {
    auto contiguous = c10::contiguous_strides(size);
    strides.assign(contiguous.begin(), contiguous.end());
  }
  impl->set_sizes_and_strides(size, strides);
  size_t needed = at::detail::computeStorageNbytes(size, strides, self.element_size(), offset);
  if (needed > self.storage().nbytes()) runtime::resize_storage_bytes(self.storage(), needed);
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                                      c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return set_storage(self, std::move(source), offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                     C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t elements = static_cast<int64_t>(source.nbytes()) / static_cast<int64_t>(self.element_size());
  return set_storage(self, std::move(source), 0, {elements}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, runtime::tpu_allocator(), true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

// Whether `param.data = from` may swap `from`'s storage into `self` in place.
// Module.to() asks this before moving each parameter: c10 answers yes only for
// its own list of dense backends, which lacks PrivateUse1, and on a no
// Module.to() makes a new Parameter per module, which unties tied weights (a
// language model's embedding and output head). Dense CPU and tpu tensors swap
// as CPU and CUDA ones do.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && !t.is_nested() && (t.is_cpu() || t.is_privateuseone());
  };
  return dense(self) && dense(from);
}

}  // namespace

at::Tensor new_tensor(c10::IntArrayRef shape, c10::ScalarType dtype, c10::Device device) {
  check_dtype(dtype);
  c10::OptionalDeviceGuard guard;  // the allocator allocates on the current device
  if (device.index() != runtime::current_device()) guard.reset_device(target_device(device));
  return at::detail::empty_generic(shape, runtime::tpu_allocator(), kTpuKeys, dtype, std::nullopt);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_efficientzerotensor", efficient_zero_tensor);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  // Views share the storage; only metadata changes (the CPU implementations).
  m.impl("view", at::native::view);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  // Complex <-> (real, imag) pairs over the same storage; reads reinterpret it.
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
}

}  // namespace tpu::aten

// _copy_from sees lazily conjugated/negated tensors as they are and applies
// the bits itself (copy_from above): ATen's conjugate/negate fallbacks would
// resolve them with clone(), which copies through _copy_from again, forever.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
