#include "engine/background_compile.h"

#include "engine/compile_log.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <unordered_set>
#include <utility>

#include "engine/config.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "engine/trace.h"

namespace tpu::engine {
namespace {

struct Job {
  ir::Graph graph;
  ir::Fingerprint fingerprint;
  std::string ops;
  int device;
};

// Never destroyed: the worker may still be compiling while statics are torn
// down at exit (an atexit hook waits for it first).
struct Queue {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Job> jobs;
  std::unordered_set<ir::Fingerprint, ir::FingerprintHash> queued;  // waiting or compiling
  bool compiling = false;
  bool stopping = false;
  bool worker = false;  // the worker thread runs (in this process: a fork has none)
  std::deque<std::pair<int, std::string>> errors;  // (device, message), oldest first
  std::string injected_failure;  // fault injection: the next job fails with this
};

Queue& queue() {
  static Queue* q = new Queue();
  return *q;
}

void work() {
  BackgroundCompileScope background;  // its compiles are logged as background ones
  Queue& q = queue();
  std::unique_lock<std::mutex> lock(q.mutex);
  for (;;) {
    q.changed.wait(lock, [&] { return q.stopping || !q.jobs.empty(); });
    if (q.stopping) return;
    Job job = std::move(q.jobs.front());
    q.jobs.pop_front();
    q.compiling = true;
    std::string error = std::exchange(q.injected_failure, {});
    lock.unlock();
    if (error.empty()) try {
        trace::ScopedName trace_name("fused graph");
        Runtime::get().compile_into_cache(job.graph, job.fingerprint, job.device);
      } catch (const std::exception& e) {
        error = e.what();
      }
    lock.lock();
    if (!error.empty()) {
      metrics().add("background_compile_errors");
      q.errors.emplace_back(job.device, "torch_tpu: a fused graph of " + job.ops + " failed to compile on tpu:" +
                                            std::to_string(job.device) + ": " + error +
                                            "\nIts ops ran one by one meanwhile, so the values computed are "
                                            "right; run with TORCH_TPU_EAGER_MODE=debug to find the op at fault.");
    }
    q.queued.erase(Runtime::program_key(job.graph, job.fingerprint, job.device));
    q.compiling = false;
    q.changed.notify_all();
  }
}

// A forked child has no worker thread, whatever the parent had; the lock is
// held across fork so that the child's copy of the queue is consistent.
void before_fork() { queue().mutex.lock(); }
void after_fork_in_parent() { queue().mutex.unlock(); }
void after_fork_in_child() {
  Queue& q = queue();
  q.jobs.clear();
  q.queued.clear();
  q.compiling = false;
  q.worker = false;
  q.mutex.unlock();
}

}  // namespace

void stop_background_compiles() {
  Queue& q = queue();
  std::unique_lock<std::mutex> lock(q.mutex);
  q.jobs.clear();  // what waits is not compiled: nothing runs after exit
  q.changed.wait(lock, [&] { return !q.compiling; });
  q.stopping = true;
  q.changed.notify_all();
}

bool background_compile_enabled() {
  // Unset: on, except on XLA:CPU, whose "device" is the host's own cores: there
  // the compile takes a core from the ops running one by one, and with a cold
  // cache their own programs take longer to compile than the fused one
  // (docs/execution.md#background-compiles has the measurements).
  static const bool enabled = config::text(config::Knob::FusedBackgroundCompile) != nullptr
                                  ? config::flag(config::Knob::FusedBackgroundCompile)
                                  : Runtime::get().client().platform_name() != "cpu";
  return enabled;
}

bool compile_in_background(ir::Graph&& graph, const ir::Fingerprint& fingerprint, std::string ops, int device) {
  Queue& q = queue();
  std::lock_guard<std::mutex> lock(q.mutex);
  if (q.stopping) return false;
  if (!q.queued.insert(Runtime::program_key(graph, fingerprint, device)).second) return true;  // already on its way
  if (!q.worker) {
    static bool hooked = false;
    if (!hooked) {
      hooked = true;
      std::atexit(stop_background_compiles);  // the fallback to Python's exit hook (see the header)
      pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    }
    std::thread(work).detach();
    q.worker = true;
  }
  q.jobs.push_back(Job{std::move(graph), fingerprint, std::move(ops), device});
  metrics().add("background_compiles");
  q.changed.notify_all();
  return true;
}

std::optional<std::string> take_background_error(int device) {
  Queue& q = queue();
  std::lock_guard<std::mutex> lock(q.mutex);
  for (auto it = q.errors.begin(); it != q.errors.end(); ++it)
    if (it->first == device) {
      std::string message = std::move(it->second);
      q.errors.erase(it);
      return message;
    }
  return std::nullopt;
}

void inject_background_compile_failure(std::string message) {
  Queue& q = queue();
  std::lock_guard<std::mutex> lock(q.mutex);
  q.injected_failure = std::move(message);
}

void drain_background_compiles() {
  Queue& q = queue();
  std::unique_lock<std::mutex> lock(q.mutex);
  q.changed.wait(lock, [&] { return q.jobs.empty() && !q.compiling; });
}

}  // namespace tpu::engine
