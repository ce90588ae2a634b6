#include "aten/program.h"

#include <ATen/Context.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>

#include "engine/config.h"
#include "engine/diagnostics.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "engine/trace.h"
#include "ir/ops.h"
#include "lowering/elementwise.h"
#include "lowering/reduce.h"
#include "lowering/types.h"
#include "lowering/view.h"
#include "runtime/device.h"
#include "runtime/memory_history.h"

namespace tpu::aten {
namespace {

// Device buffers of recently used scalars: most scalars (1, 0, a learning
// rate) repeat, and an upload costs more than a lookup.
class ScalarBufferCache {
 public:
  // `as_storage`: shaped [1], as a tensor's storage is, not 0-dim as a program's
  // scalar parameter is (plugins that check shapes tell the two apart).
  engine::BufferRef get(int device, ir::DType dtype, const void* bytes, bool as_storage = false) {
    uint64_t bits[2] = {0, 0};  // complex128 scalars take 16 bytes
    std::memcpy(bits, bytes, ir::byte_width(dtype));
    Key key{device, dtype, as_storage, bits[0], bits[1]};
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second;
    if (map_.size() >= 4096) map_.clear();
    auto buffer = engine::Runtime::get().upload(bytes, dtype, as_storage ? ir::Shape{1} : ir::Shape{}, device);
    map_.emplace(key, buffer);
    return buffer;
  }

 private:
  struct Key {
    int device;
    ir::DType dtype;
    bool as_storage;
    uint64_t bits, high_bits;
    bool operator==(const Key& o) const {
      return device == o.device && dtype == o.dtype && as_storage == o.as_storage && bits == o.bits &&
             high_bits == o.high_bits;
    }
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.bits) ^ (std::hash<uint64_t>()(k.high_bits) * 31) ^ (static_cast<size_t>(k.dtype) << 48) ^ (size_t(k.device) << 56) ^ (size_t(k.as_storage) << 47);
    }
  };
  std::mutex mutex_;
  std::unordered_map<Key, engine::BufferRef, Hash> map_;
};

ScalarBufferCache& scalar_cache() {
  static auto* cache = new ScalarBufferCache();
  return *cache;
}

// Host bytes of `s` as `dtype`.
void scalar_bytes(const c10::Scalar& s, ir::DType dtype, void* out) {
  switch (dtype) {
    case ir::DType::Pred: { bool v = s.toBool(); std::memcpy(out, &v, 1); break; }
    case ir::DType::S8: { int8_t v = s.toChar(); std::memcpy(out, &v, 1); break; }
    case ir::DType::U8: { uint8_t v = s.toByte(); std::memcpy(out, &v, 1); break; }
    case ir::DType::S16: { int16_t v = s.toShort(); std::memcpy(out, &v, 2); break; }
    case ir::DType::S32: { int32_t v = s.toInt(); std::memcpy(out, &v, 4); break; }
    case ir::DType::S64: { int64_t v = s.toLong(); std::memcpy(out, &v, 8); break; }
    case ir::DType::U16: { uint16_t v = s.toUInt16(); std::memcpy(out, &v, 2); break; }
    case ir::DType::U32: { uint32_t v = s.toUInt32(); std::memcpy(out, &v, 4); break; }
    case ir::DType::U64: { uint64_t v = s.toUInt64(); std::memcpy(out, &v, 8); break; }
    case ir::DType::F16: { c10::Half v = s.toHalf(); std::memcpy(out, &v, 2); break; }
    case ir::DType::BF16: { c10::BFloat16 v = s.toBFloat16(); std::memcpy(out, &v, 2); break; }
    case ir::DType::F32: { float v = s.toFloat(); std::memcpy(out, &v, 4); break; }
    case ir::DType::F64: { double v = s.toDouble(); std::memcpy(out, &v, 8); break; }
    case ir::DType::C64: { c10::complex<float> v = s.toComplexFloat(); std::memcpy(out, &v, 8); break; }
    case ir::DType::C128: { c10::complex<double> v = s.toComplexDouble(); std::memcpy(out, &v, 16); break; }
  }
}

std::string shape_string(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

std::string where_in_user_code() {
  std::string location = engine::user_location();
  return location.empty() ? std::string() : " at " + location;
}

// torch.set_float32_matmul_precision (allow_tf32 = True sets "high") as XLA's precision.
ir::DotPrecision dot_precision() {
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::MEDIUM: return ir::DotPrecision::Default;
    case at::Float32MatmulPrecision::HIGH: return ir::DotPrecision::High;
    default: return ir::DotPrecision::Highest;
  }
}

// How every graph of an op is built: the plugin's reduction policy, and the
// matmul precision as a source (read only by ops with dots: torch's lookup is not free).
ir::GraphOptions graph_options() { return ir::GraphOptions{engine::Runtime::reduction_split(), &dot_precision}; }

// A program that reduces `type` to one bool: every element finite.
bool all_finite(const engine::BufferRef& buffer, const ir::Type& type, int device) {
  ir::Graph g;
  g.set_options(graph_options());
  g.add_output(lowering::all_finite(g, g.parameter(type)));
  auto result = engine::Runtime::get().execute(g, {buffer}, device);
  bool ok = false;
  engine::Runtime::get().download(*result[0], &ok, 1);
  return ok;
}

}  // namespace

bool log_ops_enabled() {
  static const bool enabled = engine::config::flag(engine::config::Knob::LogOps);
  return enabled;
}

void Program::check_outputs(const std::vector<engine::BufferRef>& outputs) const {
  // Debug mode: wait here, so a device error surfaces at the op that caused it.
  for (const auto& buffer : outputs) {
    try {
      engine::await_ready(buffer);
    } catch (const engine::Error& e) {
      raise_device_error("torch_tpu: " + std::string(op_name_) + "(" + operands() + ") on the device" +
                             where_in_user_code(),
                         e, device_);
    }
  }
  if (!engine::config::flag(engine::config::Knob::CheckNan)) return;
  const auto& order = graph_.outputs();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ir::Type& type = graph_.type(ir::Value{order[i]});
    if (!ir::is_floating(type.dtype) || ir::numel(type.shape) == 0) continue;
    TORCH_CHECK(all_finite(outputs[i], type, device_), "torch_tpu: ", op_name_, "(", operands(),
                ") produced NaN or Inf", where_in_user_code(), " (TORCH_TPU_CHECK_NAN=1)");
  }
}

void Program::log_launch(const engine::LaunchInfo& info) const {
  const char* how = info.compiled ? "compiled" : info.from_disk ? "disk-cache hit" : "cache hit";
  std::fprintf(stderr, "[torch_tpu] %s(%s) %s, %.1f us\n", op_name_, operands().c_str(), how, info.seconds * 1e6);
}

bool covers_whole_storage(const at::Tensor& t) { return t.is_contiguous() && fills_whole_storage(t); }

ir::Type tensor_type(const at::Tensor& t) {
  return ir::Type{lowering::to_ir(t.scalar_type()), ir::Shape(t.sizes().begin(), t.sizes().end())};
}

namespace {
// The storage of `t` when `t` is all of it, as is (no lazy bits).
engine::StorageValue* whole_storage(const at::Tensor& t) {
  if (!covers_whole_storage(t) || t.is_conj() || t.is_neg() || t.numel() == 0) return nullptr;
  return runtime::checked_storage_value(t.storage());
}
}  // namespace

engine::BufferRef value_buffer(const at::Tensor& t, const char* op_name) {
  const ir::Type type = tensor_type(t);
  if (engine::StorageValue* value = whole_storage(t)) {
    engine::materialize(value);
    if (value->buffer && value->buffer_type() == type) return value->buffer;
  }
  Program read(op_name, t.device().index());
  return read.run_for_result(read.read(t));
}

void assign_buffer(const at::Tensor& t, engine::BufferRef buffer, const ir::Type& type, const char* op_name) {
  if (engine::StorageValue* value = whole_storage(t); value && type == tensor_type(t)) {
    engine::set_buffer(value, std::move(buffer), type);
    return;
  }
  Program write(op_name, t.device().index());
  write.write(t, write.bind(buffer, type));
  write.run();
}

bool fills_whole_storage(const at::Tensor& t) {
  return t.storage_offset() == 0 && t.is_non_overlapping_and_dense() &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
}

int device_of(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors)
    if (t->defined() && t->device().type() == c10::DeviceType::PrivateUse1) return t->device().index();
  TORCH_INTERNAL_ASSERT(false, "torch_tpu: op without a tpu operand dispatched to tpu");
}

void Program::note_operand(Operand&& operand) {
  if (num_operands_++ < kShownOperands) operands_.push_back(std::move(operand));
}

std::string Program::operands() const {
  std::string s;
  for (const Operand& o : operands_) {
    if (!s.empty()) s += ", ";
    if (o.scalar) {
      s += "scalar " + lowering::python_dtype_name(o.dtype);
      continue;
    }
    s += shape_string(o.sizes) + " " + lowering::python_dtype_name(o.dtype);
    if (o.device.type() != c10::DeviceType::PrivateUse1) s += " on " + o.device.str();
  }
  if (num_operands_ > operands_.size()) s += ", ... (" + std::to_string(num_operands_) + " operands)";
  return s;
}

at::Tensor scalar_to_device(const at::Tensor& scalar, int device) {
  TORCH_CHECK(scalar.device().is_cpu() && scalar.dim() == 0, "torch_tpu: scalar_to_device takes a 0-dim CPU tensor, got ",
              scalar.device(), " tensor of shape ", scalar.sizes());
  // A tpu tensor with no buffer yet; creating it checks the dtype against the platform.
  at::Tensor t = at::empty({}, at::TensorOptions().dtype(scalar.scalar_type()).device(
                                   c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  engine::set_buffer(runtime::storage_value(t.storage()), scalar_storage_buffer(scalar, device),
                     ir::Type{lowering::to_ir(scalar.scalar_type()), {1}});
  return t;
}

engine::BufferRef scalar_storage_buffer(const at::Tensor& scalar, int device) {
  ir::DType dtype = lowering::to_ir(scalar.scalar_type());
  if (!scalar.is_conj() && !scalar.is_neg())  // a 0-dim tensor's one element: no copy needed
    return scalar_cache().get(device, dtype, scalar.const_data_ptr(), /*as_storage=*/true);
  at::Tensor resolved = scalar.resolve_conj().resolve_neg().contiguous();
  return scalar_cache().get(device, dtype, resolved.const_data_ptr(), /*as_storage=*/true);
}

Program::Program(const char* op_name, int device)
    : op_name_(op_name), device_(device),
      reference_device_(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)) {
  graph_.set_options(graph_options());
}

Program::Program(const char* op_name, c10::Device device)
    : Program(op_name, device.is_privateuseone() ? device.index() : -1) {
  reference_device_ = device;
}

void Program::check_device(const at::Tensor& t) const {
  bool same = device_ >= 0 && t.device().type() == c10::DeviceType::PrivateUse1 && t.device().index() == device_;
  if (same) return;
  // A reference operand off the tpu, read first: the op's tpu operand is not at
  // hand, and the op runs on the current tpu device.
  c10::Device other = t.is_privateuseone() || reference_device_.is_privateuseone()
                          ? t.device()
                          : c10::Device(c10::DeviceType::PrivateUse1,
                                        static_cast<c10::DeviceIndex>(runtime::current_device()));
  raise_device_mismatch(reference_device_, other, op_name_);
}

void raise_device_mismatch(c10::Device first, c10::Device second, const std::string& op) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", first, " and ",
              second, "! (while checking arguments for ", op, ")");
}

void raise_device_error(const std::string& what, const engine::Error& error, int device) {
  constexpr int kResourceExhausted = 8;  // PJRT_Error_Code_RESOURCE_EXHAUSTED
  bool out_of_memory = error.code() == kResourceExhausted || std::strstr(error.what(), "Out of memory") != nullptr;
  if (!out_of_memory) TORCH_CHECK(false, what, " failed: ", error.what());
  std::string report = "\ntpu:" + std::to_string(device) + " holds " +
                       std::to_string(engine::Runtime::memory_in_use(device) >> 20) + " MiB in live buffers (peak " +
                       std::to_string(engine::Runtime::memory_peak(device) >> 20) + " MiB).";
  if (runtime::memory_history_enabled()) {
    std::vector<std::string> largest = runtime::largest_live_storages(device, 5);
    if (!largest.empty()) report += " Largest live storages:";
    for (const std::string& line : largest) report += "\n  " + line;
  } else {
    report += " torch.tpu.memory._record_memory_history() records where each storage was made, for this "
              "message and torch.tpu.memory._snapshot().";
  }
  TORCH_CHECK_WITH(OutOfMemoryError, false, what, " failed: ", error.what(), report);
}

ir::Value Program::bind(const engine::BufferRef& buffer, const ir::Type& type) {
  alone_ = nullptr;
  if (recording_ != nullptr) recording_failed_ = true;  // a buffer the recipe would not have
  arguments_.push_back(engine::ProgramArgument{buffer, nullptr, type});
  return graph_.parameter(type);
}

ir::Value Program::scalar(const c10::Scalar& s, ir::DType dtype) {
  if (recording_ != nullptr) {  // a value the recipe would not know
    recording_failed_ = true;
    return graph_.parameter(ir::Type{dtype, {}});
  }
  return bind(scalar_buffer(s, dtype), ir::Type{dtype, {}});
}

engine::BufferRef Program::value_parameter_buffer(uint8_t source, ir::DType dtype, const at::Tensor& t) const {
  if (source == Recipe::CpuScalar) return scalar_buffer(cpu_scalar_value(t), dtype);
  return scalar_buffer(c10::Scalar(static_cast<int64_t>(t.storage_offset())), ir::DType::S64);
}

engine::BufferRef Program::scalar_buffer(const c10::Scalar& s, ir::DType dtype) const {
  unsigned char bytes[16] = {0};
  scalar_bytes(s, dtype, bytes);
  return scalar_cache().get(device_, dtype, bytes);
}

ir::Value Program::flat_scalar(const c10::Scalar& s, ir::DType dtype, int64_t n) {
  return ir::broadcast_in_dim(graph(), scalar(s, dtype), {n}, {});
}

ir::Value Program::read_cpu_scalar(const at::Tensor& t, ir::DType dtype) {
  for (const ReadScalar& r : read_scalars_)
    if (r.tensor.get() == t.unsafeGetTensorImpl() && r.dtype == dtype) return r.value;
  ir::Value v = recording_ != nullptr
                    ? recorded_parameter(Recipe::CpuScalar, recorded_tensor_of(t), ir::Type{dtype, {}})
                    : scalar(cpu_scalar_value(t), dtype);
  // Bounded: a list of per-element scalars stays linear.
  constexpr size_t kRemembered = 16;
  if (read_scalars_.size() < kRemembered) read_scalars_.push_back(ReadScalar{t.getIntrusivePtr(), dtype, v});
  return v;
}

namespace {
// A batch's lists hold hundreds of entries, and malloc serves blocks that large
// (1 KiB up) only after merging its fast bins: a thread reuses its last batch's.
Program::SpareLists& spare_lists() {
  thread_local Program::SpareLists spare;
  return spare;
}
}  // namespace

void Program::reserve(size_t operands) {
  SpareLists& spare = spare_lists();
  if (arguments_.empty() && spare.arguments.capacity() >= operands) arguments_ = std::move(spare.arguments);
  if (storages_.empty() && spare.storages.capacity() >= operands) storages_ = std::move(spare.storages);
  if (storage_index_.empty()) storage_index_ = std::move(spare.storage_index);
  arguments_.reserve(operands);
  storages_.reserve(operands);
}

Program::~Program() {
  SpareLists& spare = spare_lists();
  // Only lists larger than those kept: a plain op's inline lists are never kept.
  if (arguments_.capacity() > spare.arguments.capacity()) {
    arguments_.clear();
    spare.arguments = std::move(arguments_);
  }
  if (storages_.capacity() > spare.storages.capacity()) {
    storages_.clear();
    spare.storages = std::move(storages_);
  }
  if (storage_index_.capacity() > spare.storage_index.capacity()) {
    storage_index_.clear();
    spare.storage_index = std::move(storage_index_);
  }
}

c10::Scalar cpu_scalar_value(const at::Tensor& t) {
  if (!t.is_conj() && !t.is_neg() && !t._is_zerotensor()) {  // those go through item()
    const void* p = t.const_data_ptr();
    switch (t.scalar_type()) {
      case at::kDouble: return *static_cast<const double*>(p);
      case at::kFloat: return *static_cast<const float*>(p);
      case at::kLong: return *static_cast<const int64_t*>(p);
      case at::kInt: return *static_cast<const int32_t*>(p);
      case at::kBool: return *static_cast<const bool*>(p);
      case at::kComplexDouble: return *static_cast<const c10::complex<double>*>(p);
      default: break;
    }
  }
  return t.item();
}

namespace {
size_t index_slot(const engine::StorageValue* value, size_t mask) {
  return (reinterpret_cast<uintptr_t>(value) >> 4) * 0x9e3779b97f4a7c15ull >> 20 & mask;
}
}  // namespace

void Program::index_storage(engine::StorageValue* value, uint32_t position) {
  size_t mask = storage_index_.size() - 1;
  size_t i = index_slot(value, mask);
  while (storage_index_[i].first != nullptr) i = (i + 1) & mask;
  storage_index_[i] = {value, position};
}

Program::StorageState* Program::find_storage(engine::StorageValue* value) {
  constexpr size_t kScanned = 16;
  if (storages_.size() <= kScanned) {
    for (StorageState& s : storages_)
      if (s.value == value) return &s;
    return nullptr;
  }
  // Half full at most: rebuilt at twice the size when storages_ outgrows that.
  if (storage_index_.size() < 2 * storages_.size()) {
    size_t size = 64;
    while (size < 4 * storages_.size()) size *= 2;
    storage_index_.assign(size, {nullptr, 0});
    for (size_t i = 0; i < storages_.size(); ++i) index_storage(storages_[i].value, static_cast<uint32_t>(i));
  }
  size_t mask = storage_index_.size() - 1;
  for (size_t i = index_slot(value, mask);; i = (i + 1) & mask) {
    if (storage_index_[i].first == value) return &storages_[storage_index_[i].second];
    if (storage_index_[i].first == nullptr) return nullptr;
  }
}

Program::StorageState& Program::add_storage(StorageState&& state) {
  if (!storage_index_.empty()) {  // built: kept at most half full, else rebuilt by find_storage
    if (storage_index_.size() >= 2 * (storages_.size() + 1))
      index_storage(state.value, static_cast<uint32_t>(storages_.size()));
    else
      storage_index_.clear();
  }
  storages_.push_back(std::move(state));
  return storages_.back();
}

bool Program::content_type(engine::StorageValue* value, ir::Type* flat, ir::Type* bound) const {
  if (engine::fused_mode()) {
    // Fused mode resolves the storage's value (a buffer or a pending node, flat) when appending.
    ir::DType dtype;
    if (!engine::has_content(value, &dtype)) return false;
    *flat = ir::Type{dtype, {static_cast<int64_t>(value->nbytes) / ir::byte_width(dtype)}};
    *bound = *flat;
    return true;
  }
  // Otherwise the program reads the buffer in its own shape.
  if (value->buffer == nullptr) return false;
  *bound = value->buffer_type();
  *flat = ir::Type{bound->dtype, {ir::numel(bound->shape)}};
  return true;
}

Program::StorageState& Program::bind_storage(const at::Tensor& t, engine::StorageValue* value, const ir::Type& flat,
                                              const ir::Type& bound) {
  StorageState state{t.storage(), value, {}, false};
  if (recording_ != nullptr) {
    state.current = recorded_parameter(Recipe::Storage, recorded_tensor_of_storage(value), flat);
    return add_storage(std::move(state));
  }
  state.parameter = static_cast<int>(arguments_.size());
  arguments_.push_back(engine::ProgramArgument{engine::fused_mode() ? nullptr : value->buffer, value, bound});
  state.current = engine::flat_storage_value(graph_, graph_.parameter(bound));
  return add_storage(std::move(state));
}

Program::StorageState& Program::state_for(const at::Tensor& t) {
  engine::StorageValue* value = runtime::checked_storage_value(t.storage());
  if (StorageState* known = find_storage(value)) return *known;
  value->check_not_lost();
  ir::Type flat, bound;
  if (content_type(value, &flat, &bound)) return bind_storage(t, value, flat, bound);
  // Never written: any content is valid, zeros are deterministic.
  StorageState state{t.storage(), value, {}, false};
  ir::DType dtype = lowering::to_ir(t.scalar_type());
  if (value->nbytes % ir::byte_width(dtype) != 0) dtype = ir::DType::U8;
  if (recording_ != nullptr) {
    recording_failed_ = true;  // the zeros' dtype is chosen here, below: not repeatable
  } else {
    value->dtype = dtype;
  }
  state.current = ir::full(graph_, dtype, 0, {static_cast<int64_t>(value->nbytes) / ir::byte_width(dtype)});
  return add_storage(std::move(state));
}

std::optional<ir::Value> Program::dynamic_offset(const at::Tensor& t) {
  if (t.storage_offset() == 0) return std::nullopt;
  if (recording_ != nullptr) return recorded_parameter(Recipe::Offset, recorded_tensor_of(t), ir::Type{ir::DType::S64, {}});
  return scalar(c10::Scalar(static_cast<int64_t>(t.storage_offset())), ir::DType::S64);
}

void Program::record_into(Recipe* recipe, std::span<const at::Tensor* const> tensors) {
  recording_ = recipe;
  recorded_tensors_ = tensors;
  recording_failed_ = false;
}

ir::Value Program::recorded_parameter(uint8_t source, int tensor, const ir::Type& type) {
  if (tensor < 0) recording_failed_ = true;
  ir::Value v = graph_.parameter(type);
  recording_->parameters.push_back(
      Recipe::Parameter{static_cast<Recipe::Source>(source), type.dtype, static_cast<uint32_t>(tensor), v.id});
  return v;
}

int Program::recorded_tensor_of_storage(engine::StorageValue* value) const {
  for (size_t i = 0; i < recorded_tensors_.size(); ++i) {
    const at::Tensor& t = *recorded_tensors_[i];
    if (t.defined() && t.is_privateuseone() && runtime::storage_value(t.storage()) == value)
      return static_cast<int>(i);
  }
  return -1;
}

int Program::recorded_tensor_of(const at::Tensor& t) const {
  for (size_t i = 0; i < recorded_tensors_.size(); ++i)
    if (recorded_tensors_[i]->unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return static_cast<int>(i);
  return -1;
}

bool Program::finish_recording() {
  Recipe& recipe = *recording_;
  recording_ = nullptr;
  if (recording_failed_ || !results_.empty()) return false;
  for (const StorageState& s : storages_) {
    if (!s.written) continue;
    int tensor = recorded_tensor_of_storage(s.value);
    if (tensor < 0) return false;
    recipe.writes.push_back(Recipe::Write{static_cast<uint32_t>(tensor), s.current.id});
  }
  recipe.operands = operands_;
  recipe.num_operands = num_operands_;
  recipe.graph = std::move(graph_);
  return true;
}

bool Program::apply(const Recipe& recipe, std::span<const at::Tensor* const> tensors) {
  alone_ = nullptr;
  // Every storage parameter checked before anything is added.
  c10::SmallVector<std::pair<ir::Type, ir::Type>, 4> new_storages;  // (flat, bound) of those not read yet
  for (const Recipe::Parameter& parameter : recipe.parameters) {
    if (parameter.source != Recipe::Storage) continue;
    engine::StorageValue* value = runtime::checked_storage_value(tensors[parameter.tensor]->storage());
    const ir::Type& wanted = recipe.graph.type(ir::Value{parameter.node});
    if (StorageState* known = find_storage(value)) {
      if (!(graph_.type(known->current) == wanted)) return false;
      continue;
    }
    value->check_not_lost();
    ir::Type flat, bound;
    if (!content_type(value, &flat, &bound) || !(flat == wanted)) return false;
    new_storages.emplace_back(std::move(flat), std::move(bound));
  }
  // Each parameter is bound when the copy reaches it, as the build bound it there: the same graph.
  size_t next_new = 0;
  auto argument = [&](size_t k) -> ir::Value {
    const Recipe::Parameter& parameter = recipe.parameters[k];
    const at::Tensor& t = *tensors[parameter.tensor];
    switch (parameter.source) {
      case Recipe::Storage: {
        engine::StorageValue* value = runtime::checked_storage_value(t.storage());
        if (StorageState* known = find_storage(value)) return known->current;
        const auto& [flat, bound] = new_storages[next_new++];
        return bind_storage(t, value, flat, bound).current;
      }
      case Recipe::CpuScalar:
        return read_cpu_scalar(t, parameter.dtype);
      case Recipe::Offset:
        break;
    }
    return dynamic_offset(t).value();  // not 0: the key has the offset
  };
  thread_local std::vector<ir::Value> mapped;
  graph_.append_copy(recipe.graph, argument, mapped);
  for (const Recipe::Write& write : recipe.writes) {
    const at::Tensor& t = *tensors[write.tensor];
    engine::StorageValue* value = runtime::checked_storage_value(t.storage());
    StorageState* known = find_storage(value);
    StorageState& state = known != nullptr ? *known : add_storage(StorageState{t.storage(), value, {}, false});
    state.current = mapped[write.node];
    state.written = true;
  }
  for (const Operand& operand : recipe.operands) note_operand(Operand(operand));
  num_operands_ += recipe.num_operands - recipe.operands.size();
  return true;
}

bool Program::apply_alone(const Recipe& recipe, std::span<const at::Tensor* const> tensors) {
  const bool fresh = graph_.size() == 0 && storages_.empty() && arguments_.empty() && results_.empty() &&
                     recording_ == nullptr;
  if (!fresh) return apply(recipe, tensors);
  if (!engine::fused_mode()) {
    if (engine::eager_mode() == engine::EagerMode::Strict && !log_ops_enabled() && launch_kept(recipe, tensors))
      return true;
    if (!apply(recipe, tensors)) return false;
    alone_ = &recipe;
    return true;
  }
  // The arguments run() would pass for the graph apply() would build: by parameter, in order.
  c10::SmallVector<engine::ProgramArgument, 4> arguments;
  arguments.reserve(recipe.parameters.size());
  for (const Recipe::Parameter& parameter : recipe.parameters) {
    const at::Tensor& t = *tensors[parameter.tensor];
    switch (parameter.source) {
      case Recipe::Storage:
        // Its content's type is the parameter's: the memo's key (fused mode: each storage's
        // content dtype and size, taken just now on this thread) vouches for it.
        arguments.push_back(engine::ProgramArgument{nullptr, runtime::checked_storage_value(t.storage()),
                                                    recipe.graph.type(ir::Value{parameter.node})});
        break;
      case Recipe::CpuScalar:
      case Recipe::Offset:
        arguments.push_back(engine::ProgramArgument{value_parameter_buffer(parameter.source, parameter.dtype, t), nullptr,
                                                    {parameter.dtype, {}}});
        break;
    }
  }
  c10::SmallVector<std::pair<engine::StorageValue*, ir::Value>, 4> written;
  written.reserve(recipe.writes.size());
  for (const Recipe::Write& write : recipe.writes)
    written.emplace_back(runtime::checked_storage_value(tensors[write.tensor]->storage()), ir::Value{write.node});
  engine::defer_copy(device_, op_name_, recipe.graph, recipe.stamp, arguments, written);
  return true;
}

ir::Value Program::read(const at::Tensor& t) {
  alone_ = nullptr;  // the program holds more than its recipe
  ir::DType dtype = lowering::to_ir(t.scalar_type());
  note_operand(Operand{{t.sizes().begin(), t.sizes().end()}, t.scalar_type(), t.device(), false});
  if (t.device().is_cpu() && t.dim() == 0) return read_cpu_scalar(t, dtype);
  check_device(t);
  ir::Shape sizes(t.sizes().begin(), t.sizes().end());
  if (t.numel() == 0) return ir::full(graph_, dtype, 0, sizes);
  StorageState& state = state_for(t);
  ir::Value storage = ir::reinterpret(graph_, state.current, dtype);
  if (t.is_contiguous())
    return lowering::read_contiguous(graph_, storage, sizes, t.storage_offset(), dynamic_offset(t));
  lowering::StridedView view{sizes, ir::Shape(t.strides().begin(), t.strides().end()),
                             t.storage_offset()};
  return lowering::read_strided(graph_, storage, view, dynamic_offset(t));
}

ir::Value Program::read_as(const at::Tensor& t, c10::ScalarType dtype) {
  ir::DType target = lowering::to_ir(dtype);
  if (t.device().is_cpu() && t.dim() == 0) {
    note_operand(Operand{{}, t.scalar_type(), t.device(), true});
    return read_cpu_scalar(t, target);
  }
  return ir::convert(graph_, read(t), target);
}

ir::Value Program::apply_lazy_bits(const at::Tensor& t, ir::Value v) {
  if (!t.is_privateuseone()) return v;  // a CPU scalar was read by value, bits applied
  if (t.is_conj()) v = lowering::conj(graph_, v);
  if (t.is_neg()) v = ir::unary(graph_, ir::Op::Negate, v);
  return v;
}

void Program::write(const at::Tensor& dst, ir::Value v) {
  alone_ = nullptr;
  check_device(dst);
  ir::DType dtype = lowering::to_ir(dst.scalar_type());
  ir::Shape sizes(dst.sizes().begin(), dst.sizes().end());
  TORCH_INTERNAL_ASSERT(graph_.type(v).shape == sizes, op_name_, ": result shape mismatch, expected ",
                        shape_string(dst.sizes()));
  if (dst.numel() == 0) return;
  TORCH_CHECK(at::has_internal_overlap(dst) != at::MemOverlap::Yes, op_name_,
              ": unsupported operation: more than one element of the written-to tensor refers to a single "
              "memory location. Please clone() the tensor before performing the operation.");
  v = ir::convert(graph_, v, dtype);
  if (!fills_whole_storage(dst)) {
    StorageState& state = state_for(dst);
    ir::Value storage = ir::reinterpret(graph_, state.current, dtype);
    lowering::StridedView view{sizes, ir::Shape(dst.strides().begin(), dst.strides().end()),
                               dst.storage_offset()};
    state.current = lowering::write_strided(graph_, storage, v, view, dynamic_offset(dst));
    state.written = true;
    return;
  }
  if (!dst.is_contiguous()) {  // its storage holds the value in the order of its strides
    ir::Dims order;
    for (int64_t d = 0; d < dst.dim(); ++d) order.push_back(d);
    // outermost (largest stride) first; size-1 dims, whose strides order nothing, last
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return std::make_pair(dst.size(a) == 1, -dst.stride(a)) < std::make_pair(dst.size(b) == 1, -dst.stride(b));
    });
    v = ir::transpose(graph_, v, order);
  }
  engine::StorageValue* value = runtime::checked_storage_value(dst.storage());
  StorageState* known = find_storage(value);
  // Old content not needed: no parameter.
  StorageState& state = known != nullptr ? *known : add_storage(StorageState{dst.storage(), value, {}, false});
  state.current = ir::reshape(graph_, v, {dst.numel()});
  state.written = true;
}

std::vector<engine::BufferRef> Program::run() {
  TORCH_INTERNAL_ASSERT(recording_ == nullptr, op_name_, ": a recording program is not run");
  if (!engine::fused_mode()) return run_now();
  c10::SmallVector<std::pair<engine::StorageValue*, ir::Value>, 4> written;
  for (auto& s : storages_)
    if (s.written) written.emplace_back(s.value, s.current);
  if (written.empty() && results_.empty()) return {};
  return engine::defer(device_, op_name_, std::move(graph_), arguments_, written, results_);
}

bool Program::launch_kept(const Recipe& recipe, std::span<const at::Tensor* const> tensors) {
  if (recipe.launches.empty() || recipe.donors.size() != recipe.writes.size()) return false;
  // The arguments apply() would bind, by parameter (the key vouches for their buffers' types).
  std::vector<engine::BufferRef> args;
  args.reserve(recipe.parameters.size());
  for (const Recipe::Parameter& parameter : recipe.parameters) {
    const at::Tensor& t = *tensors[parameter.tensor];
    switch (parameter.source) {
      case Recipe::Storage: {
        engine::StorageValue* value = runtime::checked_storage_value(t.storage());
        value->check_not_lost();
        if (value->buffer == nullptr) return false;
        args.push_back(value->buffer);
        break;
      }
      case Recipe::CpuScalar:
      case Recipe::Offset:
        args.push_back(value_parameter_buffer(parameter.source, parameter.dtype, t));
        break;
    }
  }
  // Donations as run_now() decides them: an old buffer only this program and its storage hold.
  c10::SmallVector<engine::StorageValue*, 4> written;
  c10::SmallVector<std::pair<int, int>, 4> aliases;
  for (size_t i = 0; i < recipe.writes.size(); ++i) {
    engine::StorageValue* value = runtime::checked_storage_value(tensors[recipe.writes[i].tensor]->storage());
    written.push_back(value);
    int donor = recipe.donors[i];
    if (donor >= 0 && args[donor].use_count() == 2 && value->buffer == args[donor])
      aliases.emplace_back(donor, static_cast<int>(i));
  }
  const Recipe::Launch* launch = nullptr;
  for (const Recipe::Launch& l : recipe.launches)
    if (l.device == device_ && std::equal(l.aliases.begin(), l.aliases.end(), aliases.begin(), aliases.end()))
      launch = &l;
  if (launch == nullptr) return false;
  std::vector<engine::BufferRef> outputs;
  engine::trace::ScopedName trace_name(op_name_);
  engine::metrics().add(engine::Counter::CacheHits);  // a program found, here in its recipe
  try {
    outputs = engine::Runtime::get().launch(*launch->executable, *launch->graph, args, device_);
  } catch (const engine::Error& e) {
    for (const Operand& operand : recipe.operands) note_operand(Operand(operand));
    raise_device_error("torch_tpu: " + std::string(op_name_) + "(" + operands() + ")", e, device_);
  }
  const std::vector<int>& order = launch->graph->outputs();
  for (size_t i = 0; i < written.size(); ++i)
    written[i]->hold(std::move(outputs[i]), launch->graph->type(ir::Value{order[i]}));
  return true;
}

std::vector<engine::BufferRef> Program::launch_alone(const std::vector<engine::BufferRef>& args) {
  engine::Runtime& runtime = engine::Runtime::get();
  engine::ExecutableRef executable = runtime.prepare(graph_, device_);
  std::vector<engine::BufferRef> outputs = runtime.launch(*executable, graph_, args, device_);
  constexpr size_t kKept = 4;  // donation patterns: mostly one or two
  if (alone_->launches.size() < kKept)
    alone_->launches.push_back({graph_.aliases(), std::make_shared<const ir::Graph>(graph_), executable, device_});
  return outputs;
}

std::vector<engine::BufferRef> Program::run_now() {
  c10::SmallVector<StorageState*, 4> written;
  // A recipe's program notes which buffers its results may take (launch_kept() decides on those).
  const bool note_donors = alone_ != nullptr && alone_->donors.empty();
  for (auto& s : storages_) {
    if (!s.written) continue;
    int output = static_cast<int>(graph_.num_outputs());
    // An old buffer that was read keeps its shape, for donation.
    const ir::Shape* keep = s.parameter >= 0 ? &arguments_[s.parameter].type.shape : nullptr;
    ir::Value result = engine::storage_result(graph_, s.current, keep);
    graph_.add_output(result);
    written.push_back(&s);
    // An in-place update donates the old buffer when only this program and
    // the storage hold it, so updating a tensor does not double its memory.
    const bool donor = s.parameter >= 0 && arguments_[s.parameter].type == graph_.type(result);
    if (note_donors) alone_->donors.push_back(donor ? s.parameter : -1);
    if (donor) {
      const engine::ProgramArgument& old = arguments_[s.parameter];
      if (old.buffer.use_count() == 2 && s.value->buffer == old.buffer) graph_.alias_output(s.parameter, output);
    }
  }
  for (ir::Value v : results_) graph_.add_output(v);
  if (graph_.num_outputs() == 0) return {};
  std::vector<engine::BufferRef> args;
  args.reserve(arguments_.size());
  for (auto& a : arguments_) args.push_back(a.buffer);
  std::vector<engine::BufferRef> outputs;
  engine::LaunchInfo info;
  engine::trace::ScopedName trace_name(op_name_);
  try {
    if (alone_ != nullptr && engine::eager_mode() == engine::EagerMode::Strict && !log_ops_enabled())
      outputs = launch_alone(args);
    else
      outputs = engine::Runtime::get().execute(graph_, args, device_, &info);
  } catch (const engine::Error& e) {
    raise_device_error("torch_tpu: " + std::string(op_name_) + "(" + operands() + ")", e, device_);
  }
  if (engine::eager_mode() == engine::EagerMode::Debug) check_outputs(outputs);
  if (log_ops_enabled()) log_launch(info);
  for (size_t i = 0; i < written.size(); ++i)
    written[i]->value->hold(std::move(outputs[i]), graph_.type(ir::Value{graph_.outputs()[i]}));
  return std::vector<engine::BufferRef>(outputs.begin() + written.size(), outputs.end());
}

}  // namespace tpu::aten
