#include "pjrt/pjrt.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cstddef>
#include <map>
#include <mutex>

#include "pjrt_c_api.h"

namespace tpu::pjrt {
namespace {

// Converts a PJRT_Error into an exception; destroys the error either way.
void check(const PJRT_Api* api, PJRT_Error* error, const char* what) {
  if (error == nullptr) return;
  PJRT_Error_Message_Args msg{};
  msg.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  msg.error = error;
  api->PJRT_Error_Message(&msg);
  std::string text(msg.message, msg.message_size);
  PJRT_Error_GetCode_Args code_args{};
  code_args.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  code_args.error = error;
  int code = PJRT_Error_Code_UNKNOWN;
  if (api->PJRT_Error_GetCode(&code_args) == nullptr) code = code_args.code;
  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->PJRT_Error_Destroy(&destroy);
  throw Error(std::string(what) + ": " + text, code);
}

// Runs `use` on the PJRT_Executable behind `loaded` (it returns its call's
// error) and releases that executable before raising the error, if any.
template <typename Use>
void with_executable(const PJRT_Api* api, PJRT_LoadedExecutable* loaded, const char* what, Use use) {
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = loaded;
  check(api, api->PJRT_LoadedExecutable_GetExecutable(&get), "PJRT_LoadedExecutable_GetExecutable");
  PJRT_Error* error = use(get.executable);
  PJRT_Executable_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  destroy.executable = get.executable;
  api->PJRT_Executable_Destroy(&destroy);
  check(api, error, what);
}

// CompileOptionsProto{executable_build_options{num_replicas: 1, num_partitions: 1},
// compile_portable_executable: true}, hand-encoded so that we need no protobuf
// dependency. Portable executables run on whichever device execute() names.
const std::string& default_compile_options() {
  static const std::string bytes("\x1a\x04\x20\x01\x28\x01\x20\x01", 8);
  return bytes;
}

// Protocol buffer wire format, the little of it compile options need.
void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7f) | 0x80);
  out += static_cast<char>(v);
}
void put_varint_field(std::string& out, int field, uint64_t v) {
  put_varint(out, static_cast<uint64_t>(field) << 3);
  put_varint(out, v);
}
void put_message_field(std::string& out, int field, const std::string& message) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, message.size());
  out += message;
}

// CompileOptionsProto{executable_build_options{num_replicas: N, num_partitions: 1,
// device_assignment{replica_count: N, computation_count: 1,
// computation_devices{replica_device_ids: ids}}}}: not portable, since a
// replicated program is bound to its devices.
std::string replicated_compile_options(const std::vector<int>& ids) {
  std::string devices, assignment, build, options;
  for (int id : ids) put_varint_field(devices, 1, static_cast<uint64_t>(id));
  put_varint_field(assignment, 1, ids.size());
  put_varint_field(assignment, 2, 1);
  put_message_field(assignment, 3, devices);
  put_varint_field(build, 4, ids.size());
  put_varint_field(build, 5, 1);
  put_message_field(build, 9, assignment);
  put_message_field(options, 3, build);
  return options;
}

}  // namespace

// ---------------------------------------------------------------- Plugin

std::shared_ptr<Plugin> Plugin::load(const std::string& requested_path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<Plugin>> loaded;
  // One Plugin per file, however its path is spelled.
  char resolved[PATH_MAX];
  const std::string path = realpath(requested_path.c_str(), resolved) ? std::string(resolved) : requested_path;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(path);
  if (it != loaded.end()) return it->second;

  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error("cannot load PJRT plugin '" + path + "': " + (why ? why : "unknown error"),
                PJRT_Error_Code_NOT_FOUND);
  }
  using GetApi = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApi>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    throw Error("'" + path + "' is not a PJRT plugin (no GetPjrtApi symbol)",
                PJRT_Error_Code_INVALID_ARGUMENT);
  }
  auto plugin = std::shared_ptr<Plugin>(new Plugin());
  plugin->api_ = get_api();
  plugin->path_ = path;
  const PJRT_Api* api = plugin->api_;
  if (api == nullptr || api->pjrt_api_version.major_version != PJRT_API_MAJOR) {
    throw Error("PJRT plugin '" + path + "' speaks API major version " +
                    std::to_string(api ? api->pjrt_api_version.major_version : -1) +
                    ", this build expects " + std::to_string(PJRT_API_MAJOR),
                PJRT_Error_Code_FAILED_PRECONDITION);
  }
  if (api->PJRT_Plugin_Initialize != nullptr) {
    PJRT_Plugin_Initialize_Args args{};
    args.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
    check(api, api->PJRT_Plugin_Initialize(&args), "PJRT_Plugin_Initialize");
  }
  loaded[path] = plugin;
  return plugin;
}

int Plugin::api_major() const { return api_->pjrt_api_version.major_version; }
int Plugin::api_minor() const { return api_->pjrt_api_version.minor_version; }
bool Plugin::has_entry(size_t field_offset) const {
  return api_->struct_size > field_offset;
}

// ---------------------------------------------------------------- Event

void release(const PJRT_Api* api, PJRT_Event* event) {
  if (event == nullptr) return;
  PJRT_Event_Destroy_Args args{};
  args.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  args.event = event;
  api->PJRT_Event_Destroy(&args);  // cannot throw from a destructor
}

bool Event::is_ready() const {
  if (handle_ == nullptr) return true;  // nothing was pending
  PJRT_Event_IsReady_Args args{};
  args.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
  args.event = handle_;
  check(plugin_->api(), plugin_->api()->PJRT_Event_IsReady(&args), "PJRT_Event_IsReady");
  return args.is_ready;
}

void Event::await() const {
  if (handle_ == nullptr) return;
  PJRT_Event_Await_Args args{};
  args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  args.event = handle_;
  check(plugin_->api(), plugin_->api()->PJRT_Event_Await(&args), "device execution failed");
}

void Event::on_ready(std::function<void()> callback) const {
  if (handle_ == nullptr) {
    callback();
    return;
  }
  struct Waiting {
    const PJRT_Api* api;
    std::function<void()> callback;
  };
  auto* waiting = new Waiting{plugin_->api(), std::move(callback)};
  PJRT_Event_OnReady_Args args{};
  args.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
  args.event = handle_;
  args.user_arg = waiting;
  args.callback = [](PJRT_Error* error, void* arg) {
    std::unique_ptr<Waiting> w(static_cast<Waiting*>(arg));
    if (error != nullptr) {  // the execution's failure surfaces where its outputs are read
      PJRT_Error_Destroy_Args destroy{};
      destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
      destroy.error = error;
      w->api->PJRT_Error_Destroy(&destroy);
    }
    w->callback();
  };
  if (PJRT_Error* error = plugin_->api()->PJRT_Event_OnReady(&args)) {
    delete waiting;
    check(plugin_->api(), error, "PJRT_Event_OnReady");
  }
}

// ---------------------------------------------------------------- Buffer

void release(const PJRT_Api* api, PJRT_Buffer* buffer) {
  PJRT_Buffer_Destroy_Args args{};
  args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  args.buffer = buffer;
  PJRT_Error* error = api->PJRT_Buffer_Destroy(&args);
  if (error != nullptr) {
    try {
      check(api, error, "PJRT_Buffer_Destroy");
    } catch (const Error&) {
      // Nothing sensible to do while destroying; the message is dropped.
    }
  }
}

ElementType Buffer::element_type() const {
  PJRT_Buffer_ElementType_Args args{};
  args.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  args.buffer = handle_;
  check(plugin_->api(), plugin_->api()->PJRT_Buffer_ElementType(&args), "PJRT_Buffer_ElementType");
  return static_cast<ElementType>(args.type);
}

std::vector<int64_t> Buffer::dimensions() const {
  PJRT_Buffer_Dimensions_Args args{};
  args.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  args.buffer = handle_;
  check(plugin_->api(), plugin_->api()->PJRT_Buffer_Dimensions(&args), "PJRT_Buffer_Dimensions");
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

size_t Buffer::on_device_size() const {
  PJRT_Buffer_OnDeviceSizeInBytes_Args args{};
  args.struct_size = PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE;
  args.buffer = handle_;
  check(plugin_->api(), plugin_->api()->PJRT_Buffer_OnDeviceSizeInBytes(&args),
        "PJRT_Buffer_OnDeviceSizeInBytes");
  return args.on_device_size_in_bytes;
}

std::unique_ptr<Event> Buffer::to_host_async(void* dst, size_t size) const {
  // A null destination makes PJRT answer a size query instead of copying.
  if (dst == nullptr) {
    if (size != 0) throw Error("PJRT_Buffer_ToHostBuffer: null destination for " + std::to_string(size) + " bytes", 3);
    return std::make_unique<Event>(plugin_, nullptr);
  }
  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = handle_;
  args.dst = dst;
  args.dst_size = size;
  check(plugin_->api(), plugin_->api()->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
  return std::make_unique<Event>(plugin_, args.event);
}

std::unique_ptr<Event> Buffer::ready_event() const {
  PJRT_Buffer_ReadyEvent_Args args{};
  args.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  args.buffer = handle_;
  check(plugin_->api(), plugin_->api()->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent");
  return std::make_unique<Event>(plugin_, args.event);
}

std::unique_ptr<Buffer> Buffer::copy_to_device(PJRT_Device* device) const {
  PJRT_Buffer_CopyToDevice_Args args{};
  args.struct_size = PJRT_Buffer_CopyToDevice_Args_STRUCT_SIZE;
  args.buffer = handle_;
  args.dst_device = device;
  check(plugin_->api(), plugin_->api()->PJRT_Buffer_CopyToDevice(&args), "PJRT_Buffer_CopyToDevice");
  return std::make_unique<Buffer>(plugin_, args.dst_buffer);
}

// ---------------------------------------------------------------- Executable

namespace {

size_t output_count(const PJRT_Api* api, PJRT_LoadedExecutable* loaded) {
  PJRT_Executable_NumOutputs_Args num{};
  num.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  with_executable(api, loaded, "PJRT_Executable_NumOutputs", [&](PJRT_Executable* executable) {
    num.executable = executable;
    return api->PJRT_Executable_NumOutputs(&num);
  });
  return num.num_outputs;
}

// The executable's device where it has exactly one (a program compiled for one
// device); nullptr for a portable program, which has none, or a replicated one.
PJRT_Device* only_device(const PJRT_Api* api, PJRT_LoadedExecutable* loaded) {
  PJRT_LoadedExecutable_AddressableDevices_Args args{};
  args.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  args.executable = loaded;
  check(api, api->PJRT_LoadedExecutable_AddressableDevices(&args), "PJRT_LoadedExecutable_AddressableDevices");
  return args.num_addressable_devices == 1 ? args.addressable_devices[0] : nullptr;
}

}  // namespace

Executable::Executable(std::shared_ptr<Plugin> plugin, PJRT_LoadedExecutable* exe)
    : PluginObject(std::move(plugin), exe),
      num_outputs_(output_count(plugin_->api(), exe)),
      own_device_(only_device(plugin_->api(), exe)) {}

void release(const PJRT_Api* api, PJRT_LoadedExecutable* executable) {
  PJRT_LoadedExecutable_Destroy_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  args.executable = executable;
  api->PJRT_LoadedExecutable_Destroy(&args);
}

std::vector<std::unique_ptr<Buffer>> Executable::execute(
    PJRT_Device* device, const std::vector<PJRT_Buffer*>& args) const {
  const PJRT_Api* api = plugin_->api();
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Buffer* const* arg_list = args.data();
  PJRT_Buffer** out_list = outputs.data();
  PJRT_LoadedExecutable_Execute_Args exec{};
  exec.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  exec.executable = handle_;
  exec.options = &options;
  exec.argument_lists = &arg_list;
  exec.num_devices = 1;
  exec.num_args = args.size();
  exec.output_lists = &out_list;
  exec.device_complete_events = nullptr;  // outputs' ready events carry completion
  exec.execute_device = device == own_device_ ? nullptr : device;
  check(api, api->PJRT_LoadedExecutable_Execute(&exec), "PJRT_LoadedExecutable_Execute");
  std::vector<std::unique_ptr<Buffer>> result;
  result.reserve(outputs.size());
  for (PJRT_Buffer* b : outputs) result.push_back(std::make_unique<Buffer>(plugin_, b));
  return result;
}

std::vector<std::vector<std::unique_ptr<Buffer>>> Executable::execute_replicated(
    const std::vector<std::vector<PJRT_Buffer*>>& args_per_device) const {
  const PJRT_Api* api = plugin_->api();
  const size_t devices = args_per_device.size();
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  std::vector<std::vector<PJRT_Buffer*>> outputs(devices, std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer* const*> arg_lists;
  std::vector<PJRT_Buffer**> out_lists;
  for (size_t d = 0; d < devices; ++d) {
    arg_lists.push_back(args_per_device[d].data());
    out_lists.push_back(outputs[d].data());
  }
  PJRT_LoadedExecutable_Execute_Args exec{};
  exec.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  exec.executable = handle_;
  exec.options = &options;
  exec.argument_lists = arg_lists.data();
  exec.num_devices = devices;
  exec.num_args = devices ? args_per_device[0].size() : 0;
  exec.output_lists = out_lists.data();
  exec.device_complete_events = nullptr;
  exec.execute_device = nullptr;  // the executable's own devices
  check(api, api->PJRT_LoadedExecutable_Execute(&exec), "PJRT_LoadedExecutable_Execute");
  std::vector<std::vector<std::unique_ptr<Buffer>>> result(devices);
  for (size_t d = 0; d < devices; ++d)
    for (PJRT_Buffer* b : outputs[d]) result[d].push_back(std::make_unique<Buffer>(plugin_, b));
  return result;
}

std::string Executable::serialize() const {
  const PJRT_Api* api = plugin_->api();
  std::string bytes;
  with_executable(api, handle_, "PJRT_Executable_Serialize", [&](PJRT_Executable* executable) {
    PJRT_Executable_Serialize_Args ser{};
    ser.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
    ser.executable = executable;
    PJRT_Error* error = api->PJRT_Executable_Serialize(&ser);
    if (error == nullptr) {
      bytes.assign(ser.serialized_bytes, ser.serialized_bytes_size);
      if (ser.serialized_executable_deleter) ser.serialized_executable_deleter(ser.serialized_executable);
    }
    return error;
  });
  return bytes;
}

// ---------------------------------------------------------------- Client

std::unique_ptr<Client> Client::create(std::shared_ptr<Plugin> plugin, const std::vector<CreateOption>& options) {
  const PJRT_Api* api = plugin->api();
  std::vector<PJRT_NamedValue> named(options.size());
  for (size_t i = 0; i < options.size(); ++i) {
    named[i].struct_size = PJRT_NamedValue_STRUCT_SIZE;
    named[i].name = options[i].first.c_str();
    named[i].name_size = options[i].first.size();
    named[i].type = PJRT_NamedValue_kInt64;
    named[i].int64_value = options[i].second;
    named[i].value_size = 1;
  }
  PJRT_Client_Create_Args args{};
  args.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  args.create_options = named.data();
  args.num_options = named.size();
  check(api, api->PJRT_Client_Create(&args), "PJRT_Client_Create");
  return std::unique_ptr<Client>(new Client(std::move(plugin), args.client));
}

Client::Client(std::shared_ptr<Plugin> plugin, PJRT_Client* client)
    : PluginObject(std::move(plugin), client) {
  describe();
}

void Client::describe() {
  const PJRT_Api* api = plugin_->api();
  PJRT_Client_PlatformName_Args name{};
  name.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  name.client = handle_;
  check(api, api->PJRT_Client_PlatformName(&name), "PJRT_Client_PlatformName");
  platform_name_.assign(name.platform_name, name.platform_name_size);
  PJRT_Client_PlatformVersion_Args version{};
  version.struct_size = PJRT_Client_PlatformVersion_Args_STRUCT_SIZE;
  version.client = handle_;
  check(api, api->PJRT_Client_PlatformVersion(&version), "PJRT_Client_PlatformVersion");
  platform_version_.assign(version.platform_version, version.platform_version_size);

  PJRT_Client_AddressableDevices_Args devs{};
  devs.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  devs.client = handle_;
  check(api, api->PJRT_Client_AddressableDevices(&devs), "PJRT_Client_AddressableDevices");
  for (size_t i = 0; i < devs.num_addressable_devices; ++i) {
    PJRT_Device* device = devs.addressable_devices[i];
    PJRT_Device_GetDescription_Args desc{};
    desc.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
    desc.device = device;
    check(api, api->PJRT_Device_GetDescription(&desc), "PJRT_Device_GetDescription");
    PJRT_DeviceDescription_Id_Args id{};
    id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
    id.device_description = desc.device_description;
    check(api, api->PJRT_DeviceDescription_Id(&id), "PJRT_DeviceDescription_Id");
    PJRT_DeviceDescription_Kind_Args kind{};
    kind.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
    kind.device_description = desc.device_description;
    check(api, api->PJRT_DeviceDescription_Kind(&kind), "PJRT_DeviceDescription_Kind");
    devices_.push_back(DeviceInfo{device, id.id, std::string(kind.device_kind, kind.device_kind_size)});
  }
  PJRT_Client_Devices_Args all{};
  all.struct_size = PJRT_Client_Devices_Args_STRUCT_SIZE;
  all.client = handle_;
  check(api, api->PJRT_Client_Devices(&all), "PJRT_Client_Devices");
  global_device_count_ = static_cast<int>(all.num_devices);
  PJRT_Client_ProcessIndex_Args process{};
  process.struct_size = PJRT_Client_ProcessIndex_Args_STRUCT_SIZE;
  process.client = handle_;
  check(api, api->PJRT_Client_ProcessIndex(&process), "PJRT_Client_ProcessIndex");
  process_index_ = process.process_index;
}

std::optional<MemoryStats> Client::memory_stats(PJRT_Device* device) const {
  const PJRT_Api* api = plugin_->api();
  if (api->struct_size <= offsetof(PJRT_Api, PJRT_Device_MemoryStats) || api->PJRT_Device_MemoryStats == nullptr)
    return std::nullopt;
  PJRT_Device_MemoryStats_Args args{};
  args.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  args.device = device;
  try {
    check(api, api->PJRT_Device_MemoryStats(&args), "PJRT_Device_MemoryStats");
  } catch (const Error&) {  // e.g. UNIMPLEMENTED
    return std::nullopt;
  }
  MemoryStats stats;
  stats.bytes_in_use = args.bytes_in_use;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  return stats;
}

bool Client::dma_map(void* data, size_t size) const {
  const PJRT_Api* api = plugin_->api();
  if (dma_map_unimplemented_.load(std::memory_order_relaxed) ||
      api->struct_size <= offsetof(PJRT_Api, PJRT_Client_DmaUnmap) || api->PJRT_Client_DmaMap == nullptr ||
      api->PJRT_Client_DmaUnmap == nullptr)
    return false;
  PJRT_Client_DmaMap_Args args{};
  args.struct_size = PJRT_Client_DmaMap_Args_STRUCT_SIZE;
  args.client = handle_;
  args.data = data;
  args.size = size;
  try {
    check(api, api->PJRT_Client_DmaMap(&args), "PJRT_Client_DmaMap");
  } catch (const Error& e) {
    if (e.code() == PJRT_Error_Code_UNIMPLEMENTED) dma_map_unimplemented_ = true;
    return false;
  }
  return true;
}

void Client::dma_unmap(void* data) const {
  const PJRT_Api* api = plugin_->api();
  PJRT_Client_DmaUnmap_Args args{};
  args.struct_size = PJRT_Client_DmaUnmap_Args_STRUCT_SIZE;
  args.client = handle_;
  args.data = data;
  try {
    check(api, api->PJRT_Client_DmaUnmap(&args), "PJRT_Client_DmaUnmap");
  } catch (const Error&) {  // called from a deleter: the memory is freed either way
  }
}

void release(const PJRT_Api* api, PJRT_Client* client) {
  PJRT_Client_Destroy_Args args{};
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = client;
  api->PJRT_Client_Destroy(&args);
}

std::unique_ptr<Executable> Client::compile(const std::string& mlir_module,
                                            const std::vector<int>& replica_device_ids) const {
  const PJRT_Api* api = plugin_->api();
  static const char kFormat[] = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = const_cast<char*>(mlir_module.data());
  program.code_size = mlir_module.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = handle_;
  args.program = &program;
  const std::string replicated =
      replica_device_ids.empty() ? std::string() : replicated_compile_options(replica_device_ids);
  const std::string& options = replica_device_ids.empty() ? default_compile_options() : replicated;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  check(api, api->PJRT_Client_Compile(&args), "XLA compilation failed");
  return std::make_unique<Executable>(plugin_, args.executable);
}

std::unique_ptr<Executable> Client::deserialize(const std::string& bytes) const {
  const PJRT_Api* api = plugin_->api();
  PJRT_Executable_DeserializeAndLoad_Args args{};
  args.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  args.client = handle_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  check(api, api->PJRT_Executable_DeserializeAndLoad(&args), "PJRT_Executable_DeserializeAndLoad");
  return std::make_unique<Executable>(plugin_, args.loaded_executable);
}

std::unique_ptr<Buffer> Client::buffer_from_host(
    const void* data, ElementType type, const std::vector<int64_t>& dims,
    PJRT_Device* device) const {
  const PJRT_Api* api = plugin_->api();
  PJRT_Client_BufferFromHostBuffer_Args args{};
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = handle_;
  args.data = data;
  args.type = static_cast<PJRT_Buffer_Type>(type);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  args.device = device;
  check(api, api->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer");
  // With kImmutableOnlyDuringCall the host data is no longer needed, but the
  // event still has to be released.
  if (args.done_with_host_buffer != nullptr) Event released(plugin_, args.done_with_host_buffer);
  return std::make_unique<Buffer>(plugin_, args.buffer);
}

}  // namespace tpu::pjrt
