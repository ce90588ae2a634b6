// c10 glue: the DeviceGuard implementation and the PrivateUse1 hooks through
// which torch.accelerator, generators and storages reach the tpu device.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "engine/runtime.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/generator.h"
#include "runtime/pinned_memory.h"

namespace tpu::runtime {
namespace {

constexpr auto kType = c10::DeviceType::PrivateUse1;

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.has_index() && d.index() != old.index()) set_device(d.index());
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, static_cast<c10::DeviceIndex>(current_device())); }
  void setDevice(c10::Device d) const override {
    if (d.has_index()) set_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      setDevice(d);
    } catch (...) {
    }
  }
  // One in-order queue per device: every stream is the default stream.
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return static_cast<c10::DeviceIndex>(device_count()); }
  void synchronizeDevice(const c10::DeviceIndex) const override { engine::Runtime::get().synchronize(); }
  void synchronizeStream(const c10::Stream&) const override { engine::Runtime::get().synchronize(); }
  bool queryStream(const c10::Stream&) const override { return true; }

  // Events (what autograd records when gradients cross devices, and c10::Event):
  // an event marks the work launched when it was recorded. Blocking a stream on
  // it needs nothing: a program that reads another device's result reads a copy
  // of its buffer, and the plugin orders every use of a buffer after the work that
  // defines it.
  void record(void** event, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {
    auto marker = engine::Runtime::get().mark();
    if (*event == nullptr)
      *event = new std::shared_ptr<engine::Marker>(std::move(marker));
    else
      *static_cast<std::shared_ptr<engine::Marker>*>(*event) = std::move(marker);
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void* event) const override {
    return event == nullptr || (*static_cast<std::shared_ptr<engine::Marker>*>(event))->ready();
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) (*static_cast<std::shared_ptr<engine::Marker>*>(event))->wait();
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<std::shared_ptr<engine::Marker>*>(event);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override { engine::Runtime::get(); }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count()); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return static_cast<c10::DeviceIndex>(current_device()); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = getCurrentDevice();
    if (d >= 0 && d != old) set_device(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    if (d < 0 || d >= device_count()) return getCurrentDevice();
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override { return default_generator(d); }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override {
    return at::make_generator<TpuGenerator>(d < 0 ? static_cast<c10::DeviceIndex>(current_device()) : d);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    auto address = reinterpret_cast<uintptr_t>(data);
    TORCH_CHECK(address >= kAddressBase, "torch_tpu: ", data, " is not a tpu address");
    return at::Device(kType, static_cast<c10::DeviceIndex>((address - kAddressBase) >> kDeviceShift));
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned_host_pointer(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_host_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage, nbytes);
  }
};

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new TpuHooks()); }
} g_register_hooks;

}  // namespace
}  // namespace tpu::runtime
