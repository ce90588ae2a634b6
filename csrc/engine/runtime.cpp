#include "engine/runtime.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <unistd.h>

#ifdef __linux__
#include <dirent.h>
#include <sys/resource.h>
#endif

#include "engine/compile_log.h"
#include "engine/config.h"
#include "engine/metrics.h"
#include "engine/trace.h"
#include "ir/ops.h"

namespace tpu::engine {
namespace {

std::mutex g_init_mutex;
std::string g_plugin_path;
std::string g_selected_by = "TORCH_TPU_PLUGIN";
std::vector<pjrt::CreateOption> g_create_options;
int g_device_thread_nice = 0;
std::vector<std::pair<std::string, std::string>> g_xla_flags;
Runtime* g_runtime = nullptr;  // guarded by g_init_mutex
// g_runtime once it is fully set up, read without the lock: every op asks for
// the runtime, and the runtime is never torn down.
std::atomic<Runtime*> g_runtime_ready{nullptr};
std::atomic<ir::ReductionSplit> g_reduction_split{ir::ReductionSplit::ByCompiler};
std::string g_init_error;
std::mutex g_cache_dir_mutex;
std::string g_cache_dir;
std::atomic<EagerMode> g_eager_mode{EagerMode::Strict};

// Adds values to list-valued flags in XLA_FLAGS (the user's own values of
// those flags kept) for this object's lifetime.
class ScopedXlaFlags {
 public:
  explicit ScopedXlaFlags(const std::vector<std::pair<std::string, std::string>>& additions) {
    const char* current = std::getenv("XLA_FLAGS");
    had_value_ = current != nullptr;
    if (had_value_) saved_ = current;
    std::string flags = saved_;
    for (const auto& [name, value] : additions) {
      const std::string key = "--" + name + "=";
      size_t at = flags.find(key);
      if (at != std::string::npos) {
        flags.insert(at + key.size(), value + ",");
      } else {
        flags += (flags.empty() ? "" : " ") + key + value;
      }
    }
    setenv("XLA_FLAGS", flags.c_str(), 1);
  }
  ~ScopedXlaFlags() {
    if (had_value_) setenv("XLA_FLAGS", saved_.c_str(), 1);
    else unsetenv("XLA_FLAGS");
  }
  ScopedXlaFlags(const ScopedXlaFlags&) = delete;
  ScopedXlaFlags& operator=(const ScopedXlaFlags&) = delete;

 private:
  bool had_value_ = false;
  std::string saved_;
};

// Ids of this process's threads (Linux; elsewhere none).
std::vector<long> thread_ids() {
  std::vector<long> ids;
#ifdef __linux__
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir))
      if (entry->d_name[0] != '.') ids.push_back(std::strtol(entry->d_name, nullptr, 10));
    closedir(dir);
  }
#endif
  return ids;
}

// The name of thread `tid` ("" once it has exited).
std::string thread_name(long tid) {
  std::string name;
#ifdef __linux__
  if (FILE* f = std::fopen(("/proc/self/task/" + std::to_string(tid) + "/comm").c_str(), "r")) {
    char buffer[64] = {0};
    if (std::fgets(buffer, sizeof(buffer), f) != nullptr) name = buffer;
    std::fclose(f);
    if (!name.empty() && name.back() == '\n') name.pop_back();
  }
#endif
  return name;
}

// XLA:CPU's compute pool: the threads named so run the programs' kernels. Its
// other threads dispatch programs and signal their completion, and stay as
// they are: slowing them delays every launch and every wait.
constexpr const char* kComputePoolThreadName = "tf_XLAEigen";

// Raises by `steps` (at most to 19) the nice value of the compute pool's
// threads among those in `after` but not in `before`; returns how many were
// changed. Raising a nice value is always permitted.
int lower_priority_of_new_compute_threads(std::vector<long> before, const std::vector<long>& after, int steps) {
  int lowered = 0;
#ifdef __linux__
  std::sort(before.begin(), before.end());
  for (long tid : after) {
    if (std::binary_search(before.begin(), before.end(), tid)) continue;
    if (thread_name(tid).rfind(kComputePoolThreadName, 0) != 0) continue;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    if (errno != 0) continue;  // the thread has exited
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(19, nice + steps)) == 0) ++lowered;
  }
#endif
  return lowered;
}

struct DeviceMemory {
  std::atomic<int64_t> in_use{0};
  std::atomic<int64_t> peak{0};
};
DeviceMemory g_memory[kMaxDevices];

void memory_grow(int device, int64_t bytes) {
  auto& m = g_memory[device];
  int64_t now = m.in_use += bytes;
  int64_t peak = m.peak.load();
  while (now > peak && !m.peak.compare_exchange_weak(peak, now)) {
  }
}

// The deleter of every BufferRef: keeps the device's byte count. A donated
// buffer's bytes pass to the output that reuses them, so it is not counted twice.
struct CountedBuffer {
  int device;
  int64_t bytes;
  bool donated = false;
  void operator()(pjrt::Buffer* buffer) const {
    if (!donated) g_memory[device].in_use -= bytes;
    delete buffer;
  }
};

// A donated buffer is an empty handle: its launch is covered by the launch it was donated to.
bool awaitable(const BufferRef& b) {
  auto* counted = std::get_deleter<CountedBuffer>(b);
  return counted == nullptr || !counted->donated;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void await_ready(const BufferRef& buffer) { buffer->ready_event()->await(); }

pjrt::ElementType element_type(ir::DType dtype) {
  using E = pjrt::ElementType;
  switch (dtype) {
    case ir::DType::Pred: return E::Pred;
    case ir::DType::S8: return E::S8;
    case ir::DType::S16: return E::S16;
    case ir::DType::S32: return E::S32;
    case ir::DType::S64: return E::S64;
    case ir::DType::U8: return E::U8;
    case ir::DType::U16: return E::U16;
    case ir::DType::U32: return E::U32;
    case ir::DType::U64: return E::U64;
    case ir::DType::F16: return E::F16;
    case ir::DType::BF16: return E::BF16;
    case ir::DType::F32: return E::F32;
    case ir::DType::F64: return E::F64;
    case ir::DType::C64: return E::C64;
    case ir::DType::C128: return E::C128;
  }
  return E::Invalid;
}

EagerMode eager_mode() { return g_eager_mode.load(std::memory_order_relaxed); }
const char* eager_mode_name(EagerMode mode) {
  switch (mode) {
    case EagerMode::Debug: return "debug";
    case EagerMode::Fused: return "fused";
    default: return "strict";
  }
}

void set_eager_mode(EagerMode mode) { g_eager_mode.store(mode); }

void Runtime::set_cache_dir(const std::string& directory) {
  std::lock_guard<std::mutex> lock(g_cache_dir_mutex);
  g_cache_dir = directory;
}

std::string Runtime::cache_dir() {
  std::lock_guard<std::mutex> lock(g_cache_dir_mutex);
  return g_cache_dir;
}

namespace {
// Flags the plugins read from the environment change the code they compile,
// so executables built under other flags are not reused. The plugin reads
// them when the client is created; so do we (Runtime's constructor).
const std::string& flags_in_effect() {
  static const std::string flags = [] {
    std::string f;
    for (const char* name : {"XLA_FLAGS", "LIBTPU_INIT_ARGS"})
      if (const char* value = std::getenv(name); value != nullptr && *value != '\0')
        f += std::string(" ") + name + "=" + value;
    return f;
  }();
  return flags;
}
}  // namespace

std::string Runtime::plugin_identity() const {
  const auto& plugin = client_->plugin();
  return client_->platform_name() + " " + client_->platform_version() + " pjrt-api " +
         std::to_string(plugin->api_major()) + "." + std::to_string(plugin->api_minor()) +
         " options per-device-1x1" + flags_in_effect();
}

void Runtime::set_plugin_path(const std::string& path, const std::string& selected_by,
                              const std::vector<pjrt::CreateOption>& options, int device_thread_nice,
                              bool explicit_reduction_split,
                              const std::vector<std::pair<std::string, std::string>>& xla_flags) {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_runtime != nullptr) return;  // already running on a plugin
  g_plugin_path = path;
  g_selected_by = selected_by;
  g_create_options = options;
  g_device_thread_nice = device_thread_nice;
  g_xla_flags = xla_flags;
  // Before any graph is built: every program this process compiles is lowered one way.
  g_reduction_split.store(explicit_reduction_split ? ir::ReductionSplit::Explicit : ir::ReductionSplit::ByCompiler);
  g_init_error.clear();
}

ir::ReductionSplit Runtime::reduction_split() { return g_reduction_split.load(std::memory_order_relaxed); }

bool Runtime::initialized() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  return g_runtime != nullptr;
}

namespace {
std::atomic<bool> g_forked_child{false};

// In the child of a fork after the runtime started (a DataLoader worker, a fork in
// user code): no call may reach the plugin, whose threads stayed in the parent and
// whose locks may be held forever; not even g_init_mutex is taken.
void after_fork_in_child() {
  g_forked_child.store(true);
  g_runtime_ready.store(nullptr);
}
}  // namespace

bool Runtime::in_forked_child() { return g_forked_child.load(std::memory_order_relaxed); }

Runtime& Runtime::get() {
  if (Runtime* ready = g_runtime_ready.load(std::memory_order_acquire)) return *ready;
  if (in_forked_child())
    throw pjrt::Error("torch_tpu: cannot use tpu in a forked subprocess: its parent had started the tpu device "
                      "before the fork. To use tpu with multiprocessing, use the 'spawn' start method "
                      "(torch.multiprocessing.set_start_method('spawn'), DataLoader(multiprocessing_context="
                      "'spawn')), as with CUDA",
                      9);  // FAILED_PRECONDITION
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_runtime != nullptr) return *g_runtime;
  if (!g_init_error.empty()) throw pjrt::Error(g_init_error, 9);
  if (g_plugin_path.empty()) {
    g_init_error = "torch_tpu: no PJRT plugin found (" + g_selected_by +
                   "). Install the XLA:CPU plugin (pip install xla-cpu-pjrt), libtpu on a TPU VM, or set "
                   "TORCH_TPU_PLUGIN=cpu|cuda|tpu|/path/to/plugin.so";
    throw pjrt::Error(g_init_error, 5);
  }
  try {
    // XLA reads XLA_FLAGS once, when the client is created; the user's value
    // is restored afterwards (a JAX in this process reads its own).
    std::optional<ScopedXlaFlags> plugin_flags;
    if (!g_xla_flags.empty()) plugin_flags.emplace(g_xla_flags);
    auto plugin = pjrt::Plugin::load(g_plugin_path);
    std::vector<long> threads_before;
    if (g_device_thread_nice > 0) threads_before = thread_ids();  // only to tell the plugin's new threads apart
    auto client = pjrt::Client::create(plugin, g_create_options);
    if (client->devices().empty()) throw pjrt::Error("the plugin reports no addressable devices", 5);
    // Leaked on purpose: PJRT plugins do not tolerate teardown during interpreter exit.
    g_runtime = new Runtime(std::move(client));  // records the flags in effect for the disk cache's key
    if (g_device_thread_nice > 0) {
      // XLA:CPU's "device" is a thread pool on the host's own cores, and it would
      // take every core while the thread recording and launching the next ops
      // waits for one. Below that thread in priority, the pool still gets every
      // core the host leaves idle.
      g_runtime->device_thread_nice_ = g_device_thread_nice;
      g_runtime->device_threads_lowered_ =
          lower_priority_of_new_compute_threads(std::move(threads_before), thread_ids(), g_device_thread_nice);
    }
  } catch (const pjrt::Error& e) {
    g_init_error = "torch_tpu: cannot start PJRT plugin '" + g_plugin_path + "' (selected by " + g_selected_by +
                   "; set TORCH_TPU_PLUGIN=cpu|cuda|tpu|/path/to/plugin.so to choose another): " + e.what();
    throw pjrt::Error(g_init_error, e.code());
  }
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
  g_runtime_ready.store(g_runtime, std::memory_order_release);
  return *g_runtime;
}

Runtime::Runtime(std::unique_ptr<pjrt::Client> client) : client_(std::move(client)) {
  flags_in_effect();
  if (const char* flags = std::getenv("XLA_FLAGS")) xla_flags_ = flags;
}

PJRT_Device* Runtime::device(int index) const {
  const auto& devices = client_->devices();
  if (index < 0 || index >= static_cast<int>(devices.size()))
    throw pjrt::Error("tpu device index " + std::to_string(index) + " is out of range (device count " +
                          std::to_string(devices.size()) + ")",
                      3);
  return devices[index].device;
}

ir::Fingerprint Runtime::program_key(const ir::Graph& graph, const ir::Fingerprint& fingerprint, int device) {
  if (!graph.replicas().empty()) return fingerprint;
  ir::Fingerprint key = fingerprint;
  key.low ^= (static_cast<uint64_t>(device) + 1) * 0x9e3779b97f4a7c15ULL;
  key.high += static_cast<uint64_t>(device) + 1;
  return key;
}

std::string Runtime::disk_key(const ir::Graph& graph, int device) const {
  std::string key = graph.key();
  if (graph.replicas().empty()) key += "\nfor device " + std::to_string(device_id(device));
  return key;
}

int Runtime::device_id(int index) const {
  device(index);  // raises for an index out of range
  return client_->devices()[index].id;
}

std::shared_ptr<pjrt::Executable> Runtime::in_memory(const ir::Fingerprint& key) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return nullptr;
  metrics().add(Counter::CacheHits);
  it->second.last_used = ++cache_clock_;
  return it->second.executable;
}

void Runtime::evict_least_recently_used() {
  static const size_t capacity =
      static_cast<size_t>(config::positive_integer(config::Knob::ProgramCacheSize, 4096));
  if (cache_.size() <= capacity) return;
  // An eighth of the capacity at a time: the sort is amortised over that many inserts.
  size_t drop = std::max<size_t>(cache_.size() - capacity, capacity / 8);
  std::vector<uint64_t> ages;
  ages.reserve(cache_.size());
  for (const auto& [key, program] : cache_) ages.push_back(program.last_used);
  std::nth_element(ages.begin(), ages.begin() + (drop - 1), ages.end());
  uint64_t cutoff = ages[drop - 1];
  for (auto it = cache_.begin(); it != cache_.end();)
    it = it->second.last_used <= cutoff ? cache_.erase(it) : std::next(it);
  metrics().add("program_cache_evictions", static_cast<double>(drop));
}

std::shared_ptr<pjrt::Executable> Runtime::remember(const ir::Fingerprint& key,
                                                    std::shared_ptr<pjrt::Executable> exe) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  // Another thread may have compiled the same graph meanwhile: keep one.
  auto [it, inserted] = cache_.try_emplace(key, CachedProgram{std::move(exe), ++cache_clock_});
  std::shared_ptr<pjrt::Executable> kept = it->second.executable;
  if (inserted) evict_least_recently_used();
  return kept;
}

std::shared_ptr<pjrt::Executable> Runtime::find(const ir::Graph& graph, const ir::Fingerprint& fingerprint,
                                                int device) {
  const ir::Fingerprint key = program_key(graph, fingerprint, device);
  if (auto exe = in_memory(key)) return exe;
  if (cache_dir().empty()) return nullptr;
  auto exe = load_from_disk(disk_key(graph, device), graph, nullptr);
  return exe ? remember(key, std::move(exe)) : nullptr;
}

std::shared_ptr<pjrt::Executable> Runtime::compile_into_cache(const ir::Graph& graph,
                                                              const ir::Fingerprint& fingerprint, int device) {
  trace::Span span(trace::Kind::Compile, 0);
  if (span.active()) {
    span.event().name = std::string("compile ") + trace::ScopedName::current();
    span.event().args = {{"nodes", std::to_string(graph.size())}, {"background", "1"}};
  }
  return remember(program_key(graph, fingerprint, device), compile(disk_key(graph, device), graph, device, nullptr));
}

// The lock is not held while compiling: a compile in the background must not
// stop other threads' launches of programs already in the cache.
std::shared_ptr<pjrt::Executable> Runtime::executable_for(const ir::Graph& graph, const ir::Fingerprint& fingerprint,
                                                          int device, LaunchInfo* info) {
  const ir::Fingerprint program = program_key(graph, fingerprint, device);
  if (auto exe = in_memory(program)) return exe;
  trace::Span span(trace::Kind::Compile, device < 0 ? 0 : device);
  std::string key = disk_key(graph, device);
  auto exe = load_from_disk(key, graph, info);
  bool from_disk = exe != nullptr;
  if (!exe) exe = compile(key, graph, device, info);
  if (span.active()) {
    span.event().name = std::string(from_disk ? "load " : "compile ") + trace::ScopedName::current();
    span.event().args = {{"nodes", std::to_string(graph.size())}};
    if (from_disk) span.event().args.emplace_back("from_disk", "1");
  }
  return remember(program, std::move(exe));
}

namespace {
// TORCH_TPU_DUMP_PROGRAMS: every compiled program's StableHLO text goes to `directory`
// (created if missing); a failure warns once instead of being silent.
void dump_program(const std::string& directory, const std::string& key, const std::string& text) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  std::string path = directory + "/program_" + std::to_string(std::hash<std::string>()(key)) + ".mlir";
  FILE* f = std::fopen(path.c_str(), "w");
  bool written = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr) written = std::fclose(f) == 0 && written;
  static std::atomic<bool> warned{false};
  if (!written && !warned.exchange(true))
    warn("TORCH_TPU_DUMP_PROGRAMS: cannot write " + path + (error ? " (" + error.message() + ")" : std::string()) +
         "; programs are not being dumped");
}
}  // namespace

std::shared_ptr<pjrt::Executable> Runtime::load_from_disk(const std::string& key, const ir::Graph& graph,
                                                          LaunchInfo* info) {
  std::string directory = cache_dir();
  if (directory.empty()) return nullptr;
  DiskCache disk(directory, plugin_identity());
  auto t0 = std::chrono::steady_clock::now();
  auto bytes = disk.load(key);
  if (!bytes) return nullptr;
  try {
    std::shared_ptr<pjrt::Executable> exe = client_->deserialize(*bytes);
    double seconds = seconds_since(t0);
    metrics().add("disk_cache_hits");
    metrics().add("disk_load_seconds", seconds);
    if (info) info->from_disk = true;
    record_compile(graph, seconds, true);
    return exe;
  } catch (const pjrt::Error& e) {
    warn("compilation cache entry " + disk.path_for(key) + " cannot be loaded (" + e.what() +
         "); recompiling and replacing it");
    return nullptr;
  }
}

std::shared_ptr<pjrt::Executable> Runtime::compile(const std::string& key, const ir::Graph& graph, int device,
                                                   LaunchInfo* info) {
  auto t0 = std::chrono::steady_clock::now();
  std::string text = graph.to_mlir();
  if (const char* dump = config::text(config::Knob::DumpPrograms)) dump_program(dump, key, text);
  std::shared_ptr<pjrt::Executable> exe;
  try {
    exe = client_->compile(text, graph.replicas().empty() ? std::vector<int>{device_id(device)}
                                                          : graph.replicas());
  } catch (const pjrt::Error& e) {
    if (config::text(config::Knob::DumpFailedPrograms) != nullptr)
      throw pjrt::Error(std::string(e.what()) + "\nprogram:\n" + text, e.code());
    throw;
  }
  double seconds = seconds_since(t0);
  metrics().add("compiles");
  metrics().add("compile_seconds", seconds);
  if (info) info->compiled = true;
  record_compile(graph, seconds, false);
  if (std::string directory = cache_dir(); !directory.empty()) {
    try {
      DiskCache(directory, plugin_identity()).store(key, exe->serialize());
    } catch (const pjrt::Error& e) {
      warn(std::string("cannot serialize a compiled program for the disk cache: ") + e.what());
    }
  }
  return exe;
}

size_t Runtime::cache_size() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return cache_.size();
}

std::pair<int64_t, int64_t> Runtime::memory_info(int device_index) const {
  if (auto stats = client_->memory_stats(device(device_index)); stats && stats->bytes_limit >= 0)
    return {stats->bytes_limit - stats->bytes_in_use, stats->bytes_limit};
  if (client_->platform_name() != "cpu")
    throw pjrt::Error("the " + client_->platform_name() + " plugin reports no memory limit for its devices", 12);
  const int64_t page = sysconf(_SC_PAGESIZE);
  int64_t total = sysconf(_SC_PHYS_PAGES) * page, available = sysconf(_SC_AVPHYS_PAGES) * page;
  // MemAvailable counts reclaimable caches too, as the kernel would free them.
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kib = 0;
    while (std::fgets(line, sizeof(line), f) != nullptr)
      if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) available = kib * 1024;
    std::fclose(f);
  }
  return {available, total};
}

int64_t Runtime::memory_in_use(int device) { return g_memory[device].in_use; }
int64_t Runtime::memory_peak(int device) { return g_memory[device].peak; }
void Runtime::reset_memory_peak(int device) { g_memory[device].peak = g_memory[device].in_use.load(); }

BufferRef Runtime::track(std::unique_ptr<pjrt::Buffer> buffer, const ir::Type& type, int device) {
  int64_t bytes = ir::numel(type.shape) * ir::byte_width(type.dtype);
  memory_grow(device, bytes);
  return BufferRef(buffer.release(), CountedBuffer{device, bytes});
}

std::vector<BufferRef> Runtime::execute(const ir::Graph& graph, const ir::Fingerprint& fingerprint,
                                        const std::vector<BufferRef>& args, int device_index, LaunchInfo* info) {
  auto start = std::chrono::steady_clock::now();
  auto exe = executable_for(graph, fingerprint, device_index, info);
  auto result = launch(*exe, graph, args, device_index);
  if (info) info->seconds = seconds_since(start);
  return result;
}

namespace {
std::atomic<int> g_injected_launch_failures{0};
std::mutex g_injected_mutex;
std::string g_injected_message;
}  // namespace

void Runtime::inject_launch_failures(int count, std::string message) {
  std::lock_guard<std::mutex> lock(g_injected_mutex);
  g_injected_message = std::move(message);
  g_injected_launch_failures.store(count);
}

std::vector<BufferRef> Runtime::launch(const pjrt::Executable& exe, const ir::Graph& graph,
                                       const std::vector<BufferRef>& args, int device_index) {
  if (g_injected_launch_failures.load(std::memory_order_relaxed) > 0 && g_injected_launch_failures.fetch_sub(1) > 0) {
    std::lock_guard<std::mutex> lock(g_injected_mutex);
    throw pjrt::Error(g_injected_message, 13);  // PJRT_Error_Code_INTERNAL
  }
  std::vector<PJRT_Buffer*> raw;
  raw.reserve(args.size());
  for (const auto& b : args) raw.push_back(b->raw());
  auto t0 = std::chrono::steady_clock::now();
  trace::Span span(trace::Kind::Launch, device_index);
  auto outputs = exe.execute(device(device_index), raw);
  metrics().add(Counter::Executions);
  metrics().add(Counter::ExecuteSeconds, seconds_since(t0));
  if (span.active()) {
    span.event().name = std::string("launch ") + trace::ScopedName::current();
    if (!outputs.empty()) trace::record_execution(trace::ScopedName::current(), device_index, span.start_ns(),
                                                  outputs.front()->ready_event());
  }
  DonatedUntilDone donated;
  for (auto [parameter, output] : graph.aliases()) {
    donated.buffers.push_back(args[parameter]);
    auto* counted = std::get_deleter<CountedBuffer>(args[parameter]);
    if (counted == nullptr || counted->donated) continue;
    counted->donated = true;
    g_memory[device_index].in_use -= counted->bytes;
    metrics().add(Counter::DonatedBuffers);
  }
  std::vector<BufferRef> result;
  result.reserve(outputs.size());
  const auto& order = graph.outputs();
  for (size_t i = 0; i < outputs.size(); ++i)
    result.push_back(track(std::move(outputs[i]), graph.type(ir::Value{order[i]}), device_index));
  if (!result.empty()) {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    release_finished_donations();
    if (!donated.buffers.empty()) {
      donated.done = result.front()->ready_event();
      donated_.push_back(std::move(donated));
    }
    if (pending_.size() >= 4096) {  // forget outputs that nobody can observe any more
      std::vector<std::weak_ptr<pjrt::Buffer>> live;
      for (auto& w : pending_)
        if (!w.expired()) live.push_back(std::move(w));
      pending_.swap(live);
    }
    pending_.push_back(result.back());
  }
  return result;
}

int Runtime::device_index_of_id(int id) const {
  const auto& devices = client_->devices();
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].id == id) return static_cast<int>(i);
  return -1;
}

std::vector<std::vector<BufferRef>> Runtime::execute_replicated(const ir::Graph& graph,
                                                                const std::vector<std::vector<BufferRef>>& args) {
  std::vector<int> local;  // device indices of this process's replicas, in replica order
  for (int id : graph.replicas())
    if (int index = device_index_of_id(id); index >= 0) local.push_back(index);
  if (local.size() != args.size())
    throw pjrt::Error("a replicated program got " + std::to_string(args.size()) + " argument lists for " +
                          std::to_string(local.size()) + " devices of this process",
                      3);  // INVALID_ARGUMENT
  auto exe = executable_for(graph, graph.fingerprint(), -1, nullptr);
  std::vector<std::vector<PJRT_Buffer*>> raw(args.size());
  for (size_t d = 0; d < args.size(); ++d)
    for (const auto& b : args[d]) raw[d].push_back(b->raw());
  trace::Span span(trace::Kind::Launch, local.empty() ? -1 : local[0]);
  if (span.active()) span.event().name = std::string("launch ") + trace::ScopedName::current();
  auto t0 = std::chrono::steady_clock::now();
  auto outputs = exe->execute_replicated(raw);
  metrics().add(Counter::Executions);
  metrics().add(Counter::ExecuteSeconds, seconds_since(t0));
  std::vector<std::vector<BufferRef>> result(outputs.size());
  const auto& order = graph.outputs();
  std::lock_guard<std::mutex> lock(pending_mutex_);
  for (size_t d = 0; d < outputs.size(); ++d) {
    for (size_t i = 0; i < outputs[d].size(); ++i)
      result[d].push_back(track(std::move(outputs[d][i]), graph.type(ir::Value{order[i]}), local[d]));
    if (!result[d].empty()) pending_.push_back(result[d].back());
  }
  return result;
}

BufferRef Runtime::upload(const void* data, ir::DType dtype, const ir::Shape& shape, int device_index) {
  trace::Span span(trace::Kind::Upload, device_index);
  if (span.active()) {
    span.event().name = "host to device";
    span.event().args = {{"bytes", std::to_string(ir::numel(shape) * ir::byte_width(dtype))}};
  }
  auto buffer = client_->buffer_from_host(data, element_type(dtype), shape.vec(), device(device_index));
  metrics().add("host_to_device_transfers");
  metrics().add("host_to_device_bytes", static_cast<double>(ir::numel(shape) * ir::byte_width(dtype)));
  return track(std::move(buffer), ir::Type{dtype, shape}, device_index);
}

BufferRef Runtime::copy_to_device(const BufferRef& buffer, const ir::Type& type, int device_index) {
  trace::Span span(trace::Kind::Upload, device_index);
  const int64_t bytes = ir::numel(type.shape) * ir::byte_width(type.dtype);
  if (span.active()) {
    span.event().name = "device to device";
    span.event().args = {{"bytes", std::to_string(bytes)}};
  }
  auto copy = buffer->copy_to_device(device(device_index));
  metrics().add("device_to_device_transfers");
  metrics().add("device_to_device_bytes", static_cast<double>(bytes));
  return track(std::move(copy), type, device_index);
}

void Runtime::download(const pjrt::Buffer& buffer, void* dst, size_t nbytes) {
  trace::Span span(trace::Kind::Download, -1);  // the buffer's device is not known here
  if (span.active()) {
    span.event().name = "device to host";
    span.event().args = {{"bytes", std::to_string(nbytes)}};
  }
  buffer.to_host(dst, nbytes);
  metrics().add("device_to_host_transfers");
  metrics().add("device_to_host_bytes", static_cast<double>(nbytes));
}

std::shared_ptr<Marker> Runtime::mark() {
  auto marker = std::make_shared<Marker>();
  std::lock_guard<std::mutex> lock(pending_mutex_);
  marker->outputs = pending_;
  return marker;
}

bool Marker::ready() const {
  for (auto& w : outputs)
    if (BufferRef b = w.lock(); b && awaitable(b))
      if (!b->ready_event()->is_ready()) return false;
  return true;
}

void Marker::wait() const {
  for (auto& w : outputs)
    if (BufferRef b = w.lock(); b && awaitable(b)) b->ready_event()->await();
}

void Runtime::release_finished_donations() {
  // Launches finish in order: stop at the first one still running.
  while (!donated_.empty() && donated_.front().done->is_ready()) donated_.pop_front();
}

namespace {
std::mutex g_synchronize_waits_mutex;
std::vector<std::function<void()>>& synchronize_waits() {
  static auto* waits = new std::vector<std::function<void()>>();  // never freed: read until exit
  return *waits;
}
}  // namespace

void Runtime::add_synchronize_wait(std::function<void()> wait) {
  std::lock_guard<std::mutex> lock(g_synchronize_waits_mutex);
  synchronize_waits().push_back(std::move(wait));
}

void Runtime::synchronize() {
  std::vector<std::function<void()>> waits;
  {
    std::lock_guard<std::mutex> lock(g_synchronize_waits_mutex);
    waits = synchronize_waits();
  }
  for (const auto& wait : waits) wait();
  std::vector<std::weak_ptr<pjrt::Buffer>> pending;
  std::deque<DonatedUntilDone> donated;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    pending.swap(pending_);
    donated.swap(donated_);
  }
  for (auto& w : pending)
    if (BufferRef b = w.lock(); b && awaitable(b)) b->ready_event()->await();
  for (auto& d : donated) d.done->await();
}

}  // namespace tpu::engine
