// C++ ownership layer over the PJRT C API. Knows nothing of torch.
//
// Every PJRT object is owned by exactly one RAII handle; every PJRT_Error is
// turned into a pjrt::Error exception carrying the plugin's message.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

struct PJRT_Api;
struct PJRT_Client;
struct PJRT_Device;
struct PJRT_Buffer;
struct PJRT_Event;
struct PJRT_LoadedExecutable;

namespace tpu::pjrt {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int code)
      : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Element types, numbered exactly as PJRT_Buffer_Type.
enum class ElementType : int {
  Invalid = 0, Pred = 1, S8 = 2, S16 = 3, S32 = 4, S64 = 5,
  U8 = 6, U16 = 7, U32 = 8, U64 = 9, F16 = 10, F32 = 11, F64 = 12,
  BF16 = 13, C64 = 14, C128 = 15,
};

// A loaded plugin library (dlopen'ed once per path, never unloaded: plugins
// register global state that does not survive dlclose).
class Plugin {
 public:
  static std::shared_ptr<Plugin> load(const std::string& path);
  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int api_major() const;
  int api_minor() const;
  // Whether the plugin's function table reaches `offset` (a PJRT_Api field),
  // i.e. it was built against an API version that has that entry.
  bool has_entry(size_t field_offset) const;

 private:
  const PJRT_Api* api_ = nullptr;
  std::string path_;
};

// Each releases one kind of handle (defined in pjrt.cpp).
void release(const PJRT_Api* api, PJRT_Event* event);
void release(const PJRT_Api* api, PJRT_Buffer* buffer);
void release(const PJRT_Api* api, PJRT_LoadedExecutable* executable);
void release(const PJRT_Api* api, PJRT_Client* client);

// What each PJRT object below holds: its handle, which it owns (released
// here, also when the object's own constructor throws; not copyable), and
// the plugin that made it, kept loaded while the object lives.
template <typename Handle>
class PluginObject {
 public:
  PluginObject(std::shared_ptr<Plugin> plugin, Handle* handle) : plugin_(std::move(plugin)), handle_(handle) {}
  PluginObject(const PluginObject&) = delete;
  PluginObject& operator=(const PluginObject&) = delete;

 protected:
  ~PluginObject() { release(plugin_->api(), handle_); }
  std::shared_ptr<Plugin> plugin_;
  Handle* handle_;
};

class Event : public PluginObject<PJRT_Event> {
 public:
  using PluginObject::PluginObject;
  bool is_ready() const;
  void await() const;  // throws the event's error, if any
  // Calls `callback` once the event is ready (at once when it is), on whichever
  // thread the plugin signals it from; the event may be released before that.
  void on_ready(std::function<void()> callback) const;
};

class Buffer : public PluginObject<PJRT_Buffer> {
 public:
  using PluginObject::PluginObject;

  PJRT_Buffer* raw() const { return handle_; }
  ElementType element_type() const;
  std::vector<int64_t> dimensions() const;
  size_t on_device_size() const;
  // Starts a copy into `dst` (which must stay alive until the event is ready).
  std::unique_ptr<Event> to_host_async(void* dst, size_t size) const;
  void to_host(void* dst, size_t size) const { to_host_async(dst, size)->await(); }
  std::unique_ptr<Event> ready_event() const;
  // A copy on `device` (another device of the same client), made by the plugin
  // over its own path between devices; asynchronous, like a program's output.
  std::unique_ptr<Buffer> copy_to_device(PJRT_Device* device) const;
};

class Executable : public PluginObject<PJRT_LoadedExecutable> {
 public:
  Executable(std::shared_ptr<Plugin> plugin, PJRT_LoadedExecutable* exe);

  size_t num_outputs() const { return num_outputs_; }
  // The one device a program compiled for one device runs on; nullptr for a
  // portable program (any device) or a replicated one (several).
  PJRT_Device* own_device() const { return own_device_; }
  // Launches asynchronously on `device`; outputs become ready when the
  // computation finishes (their ready events carry any execution error).
  // On own_device() the launch takes the plugin's plain path; a portable
  // program's launch on a named device makes XLA's C API wrapper copy the
  // program's compile options (one layout per argument) on every call.
  std::vector<std::unique_ptr<Buffer>> execute(
      PJRT_Device* device, const std::vector<PJRT_Buffer*>& args) const;
  // Launches a replicated program (compiled with replica devices) once on each of
  // this process's devices in its assignment, in assignment order: one argument
  // list per device in, one output list per device out.
  std::vector<std::vector<std::unique_ptr<Buffer>>> execute_replicated(
      const std::vector<std::vector<PJRT_Buffer*>>& args_per_device) const;
  std::string serialize() const;

 private:
  const size_t num_outputs_;
  PJRT_Device* const own_device_;
};

struct DeviceInfo {
  PJRT_Device* device;
  int id;
  std::string kind;
};

// What a plugin reports of a device's memory (PJRT_Device_MemoryStats); the
// limit is optional in the API.
struct MemoryStats {
  int64_t bytes_in_use = 0;
  int64_t bytes_limit = -1;  // -1: not reported
};

// A PJRT_Client_Create option the plugin understands (an int64 value: the
// only kind torch_tpu passes, e.g. the XLA:CPU plugin's "cpu_device_count").
using CreateOption = std::pair<std::string, int64_t>;

class Client : public PluginObject<PJRT_Client> {
 public:
  static std::unique_ptr<Client> create(std::shared_ptr<Plugin> plugin,
                                        const std::vector<CreateOption>& options = {});

  const std::shared_ptr<Plugin>& plugin() const { return plugin_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  const std::vector<DeviceInfo>& devices() const { return devices_; }  // this process's
  // Devices of every process the client spans (more than devices() where the
  // plugin runs one program across processes: a TPU slice, multi-host XLA:GPU).
  int global_device_count() const { return global_device_count_; }
  int process_index() const { return process_index_; }

  // nullopt where the plugin does not implement the query (XLA:CPU).
  std::optional<MemoryStats> memory_stats(PJRT_Device* device) const;

  // Compiles a portable program (it runs on whichever device execute() names);
  // with `replica_device_ids` (device ids, one per replica), one bound to those
  // devices: a replicated one whose replicas run on them, as its collectives'
  // groups number them, or, with one id, a program for that device alone.
  std::unique_ptr<Executable> compile(const std::string& mlir_module,
                                      const std::vector<int>& replica_device_ids = {}) const;
  std::unique_ptr<Executable> deserialize(const std::string& bytes) const;
  // Registers host memory for the device's DMA (PJRT_Client_DmaMap). False
  // where the plugin does not implement it (XLA:CPU, which copies from any
  // host memory) or refuses this range; the memory is usable either way.
  bool dma_map(void* data, size_t size) const;
  void dma_unmap(void* data) const;
  // Copies `data` during the call; the buffer is usable (asynchronously) at once.
  std::unique_ptr<Buffer> buffer_from_host(
      const void* data, ElementType type, const std::vector<int64_t>& dims,
      PJRT_Device* device) const;

 private:
  Client(std::shared_ptr<Plugin> plugin, PJRT_Client* client);
  void describe();
  std::string platform_name_;
  std::string platform_version_;
  std::vector<DeviceInfo> devices_;
  int global_device_count_ = 0;
  int process_index_ = 0;
  mutable std::atomic<bool> dma_map_unimplemented_{false};  // asked once, then not again
};

}  // namespace tpu::pjrt
