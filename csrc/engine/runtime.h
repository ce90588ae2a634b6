// The device runtime: one PJRT client, its devices, the compilation cache and
// program execution. Knows IR and PJRT, nothing of torch.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/diagnostics.h"
#include "engine/disk_cache.h"
#include "ir/graph.h"
#include "pjrt/pjrt.h"

namespace tpu::engine {

using BufferRef = std::shared_ptr<pjrt::Buffer>;
using ExecutableRef = std::shared_ptr<pjrt::Executable>;
// What the runtime throws when the plugin fails; layers above catch this name.
using Error = pjrt::Error;
// Blocks until `buffer`'s value is computed; throws Error if its program failed.
void await_ready(const BufferRef& buffer);

// Per-device tables (memory counters, pending graphs, storage addresses) hold this many devices.
constexpr int kMaxDevices = 64;

pjrt::ElementType element_type(ir::DType dtype);

// When programs are cut and how the host waits (see DESIGN.md).
enum class EagerMode { Strict, Debug, Fused };
EagerMode eager_mode();
void set_eager_mode(EagerMode mode);
const char* eager_mode_name(EagerMode mode);  // "strict", "debug", "fused"

// How one launch went, for logging.
struct LaunchInfo {
  bool compiled = false;   // compiled now (a miss in memory and on disk)
  bool from_disk = false;  // loaded from the disk cache
  double seconds = 0;      // host time of lookup/compile and launch
};

// The work launched up to some point (for stream/event queries).
struct Marker {
  std::vector<std::weak_ptr<pjrt::Buffer>> outputs;
  bool ready() const;
  void wait() const;
};

class Runtime {
 public:
  // The process-wide runtime; created on first use from the plugin path given
  // to set_plugin_path(). Throws pjrt::Error if the plugin cannot be used.
  static Runtime& get();
  static bool initialized();
  // Whether this process was forked after its parent started the runtime: the
  // plugin's threads and locks did not come along, so get() raises (as CUDA does in
  // a forked child) and device memory is not freed here (the parent owns it).
  static bool in_forked_child();
  // `options` are passed to PJRT_Client_Create (see torch_tpu/_plugin.py).
  // `device_thread_nice` > 0 lowers the scheduling priority of XLA:CPU's compute
  // pool by that many nice steps (see torch_tpu/_plugin.py: device_thread_nice).
  // `explicit_reduction_split`: the lowerings split long reductions themselves
  // (ir::ReductionSplit), and `xla_flags` turn XLA's own split off.
  // `xla_flags` (name, value) are added to the list-valued XLA flags in
  // XLA_FLAGS while the client is created, which is when XLA reads them.
  static void set_plugin_path(const std::string& path, const std::string& selected_by,
                              const std::vector<pjrt::CreateOption>& options = {}, int device_thread_nice = 0,
                              bool explicit_reduction_split = false,
                              const std::vector<std::pair<std::string, std::string>>& xla_flags = {});
  // How the lowerings build reductions for the plugin set_plugin_path() chose
  // (ir::GraphOptions: every graph is built with it).
  static ir::ReductionSplit reduction_split();
  // Directory of the on-disk compilation cache; empty disables it.
  static void set_cache_dir(const std::string& directory);
  static std::string cache_dir();

  const pjrt::Client& client() const { return *client_; }
  // The nice steps asked for the compute pool's threads, and how many got them.
  int device_thread_nice() const { return device_thread_nice_; }
  int device_threads_lowered() const { return device_threads_lowered_; }
  // XLA_FLAGS as the plugin read it when the client was created.
  const std::string& xla_flags() const { return xla_flags_; }
  int device_count() const { return static_cast<int>(client_->devices().size()); }
  PJRT_Device* device(int index) const;

  // Compiles (or finds in the cache) and launches `graph` asynchronously.
  // Arguments the graph aliases to outputs are donated: invalid afterwards.
  std::vector<BufferRef> execute(const ir::Graph& graph, const std::vector<BufferRef>& args, int device,
                                 LaunchInfo* info = nullptr) {
    return execute(graph, graph.fingerprint(), args, device, info);
  }
  // The same for a graph whose fingerprint the caller has.
  std::vector<BufferRef> execute(const ir::Graph& graph, const ir::Fingerprint& fingerprint,
                                 const std::vector<BufferRef>& args, int device, LaunchInfo* info = nullptr);
  // The two halves of execute(), for programs launched many times (torch.compile):
  // look the executable for `device` up once, then launch it with no per-call key.
  std::shared_ptr<pjrt::Executable> prepare(const ir::Graph& graph, int device) {
    return executable_for(graph, graph.fingerprint(), device, nullptr);
  }
  // The executable of `graph` (whose fingerprint is given) for `device` if it is in
  // memory or on disk; nullptr where it would have to be compiled.
  std::shared_ptr<pjrt::Executable> find(const ir::Graph& graph, const ir::Fingerprint& fingerprint, int device);
  // Compiles `graph` for `device` and keeps it in the cache (memory and disk); any thread.
  std::shared_ptr<pjrt::Executable> compile_into_cache(const ir::Graph& graph, const ir::Fingerprint& fingerprint,
                                                       int device);
  // What the cache knows a program by: its graph's fingerprint and, unless the
  // graph names its replicas' devices, the device it is compiled for. A program
  // is compiled for its device rather than portable since the plugin's launch of
  // a portable program copies its compile options every time (see pjrt::Executable).
  static ir::Fingerprint program_key(const ir::Graph& graph, const ir::Fingerprint& fingerprint, int device);
  std::vector<BufferRef> launch(const pjrt::Executable& exe, const ir::Graph& graph,
                                const std::vector<BufferRef>& args, int device);
  // Launches a replicated graph (ir::Graph::set_replicas) once on each of its
  // devices that this process has, in the graph's replica order: `args` holds
  // one argument list per such device, and the result one output list.
  std::vector<std::vector<BufferRef>> execute_replicated(const ir::Graph& graph,
                                                         const std::vector<std::vector<BufferRef>>& args);
  // The index (as device(index)) of the device with PJRT id `id`, or -1 where
  // it belongs to another process.
  int device_index_of_id(int id) const;
  BufferRef upload(const void* data, ir::DType dtype, const ir::Shape& shape, int device);
  void download(const pjrt::Buffer& buffer, void* dst, size_t nbytes);
  // `buffer` (of type `type`) copied to device `device` by the plugin, device to device.
  BufferRef copy_to_device(const BufferRef& buffer, const ir::Type& type, int device);
  // Waits for everything launched so far, and first for the work outside the
  // device's programs that a synchronize also covers (see add_synchronize_wait).
  void synchronize();
  // `wait` runs at the start of every synchronize(): work of another layer that
  // writes device tensors off the device's queue (a collective in flight on the
  // host, as NCCL's stream is covered by torch.cuda.synchronize()).
  static void add_synchronize_wait(std::function<void()> wait);
  // Fault injection (tests): the next `count` launches fail with `message`
  // before reaching the plugin, as a launch the plugin refused would.
  static void inject_launch_failures(int count, std::string message);
  std::shared_ptr<Marker> mark();

  size_t cache_size() const;

  // Bytes of device buffers alive now / at most since the last reset: what
  // tensors (and cached scalars) really hold on the device.
  static int64_t memory_in_use(int device);
  static int64_t memory_peak(int device);
  static void reset_memory_peak(int device);
  // (free, total) bytes of `device`'s memory, as torch.cuda.mem_get_info: the
  // plugin's limit where it reports one; XLA:CPU's devices are host memory.
  std::pair<int64_t, int64_t> memory_info(int device) const;

 private:
  explicit Runtime(std::unique_ptr<pjrt::Client> client);
  // `device` -1: a replicated graph, bound to the devices it names.
  std::shared_ptr<pjrt::Executable> executable_for(const ir::Graph& graph, const ir::Fingerprint& fingerprint,
                                                   int device, LaunchInfo* info);
  std::shared_ptr<pjrt::Executable> in_memory(const ir::Fingerprint& key);
  // Puts `exe` in the cache; returns what the cache holds for `key` then.
  std::shared_ptr<pjrt::Executable> remember(const ir::Fingerprint& key, std::shared_ptr<pjrt::Executable> exe);
  // The PJRT id of device `index` (raises pjrt::Error for an index out of range).
  int device_id(int index) const;
  // The disk cache's key of `graph` compiled for `device`.
  std::string disk_key(const ir::Graph& graph, int device) const;
  std::shared_ptr<pjrt::Executable> load_from_disk(const std::string& key, const ir::Graph& graph, LaunchInfo* info);
  std::shared_ptr<pjrt::Executable> compile(const std::string& key, const ir::Graph& graph, int device,
                                            LaunchInfo* info);
  std::string plugin_identity() const;
  BufferRef track(std::unique_ptr<pjrt::Buffer> buffer, const ir::Type& type, int device);

  std::unique_ptr<pjrt::Client> client_;
  int device_thread_nice_ = 0;
  int device_threads_lowered_ = 0;
  std::string xla_flags_;
  mutable std::mutex cache_mutex_;
  // By fingerprint: the text key (for the disk cache) is built only on a miss. Bounded:
  // past its capacity the least recently run programs are dropped (their users' own
  // references keep them loaded), since every loaded program holds memory maps.
  struct CachedProgram {
    std::shared_ptr<pjrt::Executable> executable;
    uint64_t last_used;
  };
  std::unordered_map<ir::Fingerprint, CachedProgram, ir::FingerprintHash> cache_;
  uint64_t cache_clock_ = 0;
  void evict_least_recently_used();  // cache_mutex_ held
  std::mutex pending_mutex_;
  std::vector<std::weak_ptr<pjrt::Buffer>> pending_;  // outputs of launches not yet synchronized
  // Buffers donated to a launch, kept until it finishes: the plugin holds a
  // donation until the execution ends, and destroying the donated handle
  // earlier would block the host until then (on every in-place update).
  struct DonatedUntilDone {
    std::vector<BufferRef> buffers;
    std::unique_ptr<pjrt::Event> done;
  };
  std::deque<DonatedUntilDone> donated_;  // in launch order; guarded by pending_mutex_
  void release_finished_donations();  // requires pending_mutex_
};

}  // namespace tpu::engine
