#include "engine/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "pjrt/pjrt.h"

namespace tpu::engine::trace {

namespace detail {
std::atomic<bool> g_on{false};
}
thread_local const char* ScopedName::t_name = nullptr;

namespace {

// One session's events. Executions still running hold it (shared) so that a
// late completion after stop() writes into a session nobody reads, not freed memory.
struct Session {
  std::mutex mutex;
  std::vector<Event> events;
  size_t running = 0;  // executions whose end has not been seen
  std::condition_variable all_done;
};

std::mutex g_mutex;  // guards g_session (the pointer)
std::shared_ptr<Session> g_session;

std::shared_ptr<Session> current() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_session;
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Launch: return "launch";
    case Kind::Execution: return "execution";
    case Kind::Compile: return "compile";
    case Kind::Cut: return "cut";
    case Kind::Upload: return "upload";
    case Kind::Download: return "download";
    case Kind::Collective: return "collective";
  }
  return "?";
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t this_thread_id() {
  thread_local uint64_t id = static_cast<uint64_t>(::syscall(SYS_gettid));
  return id;
}

void start() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_session = std::make_shared<Session>();
  detail::g_on.store(true, std::memory_order_relaxed);
}

std::vector<Event> stop() {
  std::shared_ptr<Session> session;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    detail::g_on.store(false, std::memory_order_relaxed);
    session.swap(g_session);
  }
  if (!session) return {};
  std::unique_lock<std::mutex> lock(session->mutex);
  // Programs launched while recording end on the device; a bounded wait, so
  // that a device that never finishes cannot hang the profiler's exit.
  session->all_done.wait_for(lock, std::chrono::seconds(60), [&] { return session->running == 0; });
  std::vector<Event> events = std::move(session->events);
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.start_ns < b.start_ns; });
  return events;
}

void record(Event event) {
  if (!on()) return;
  std::shared_ptr<Session> session = current();
  if (!session) return;
  event.thread = this_thread_id();
  std::lock_guard<std::mutex> lock(session->mutex);
  session->events.push_back(std::move(event));
}

void record_execution(std::string name, int device, int64_t launch_ns, std::unique_ptr<pjrt::Event> done) {
  std::shared_ptr<Session> session = current();
  if (!session || !done) return;
  {
    std::lock_guard<std::mutex> lock(session->mutex);
    ++session->running;
  }
  uint64_t thread = this_thread_id();
  // The event itself is released on return: the plugin keeps what the callback needs.
  auto finish = [session, name = std::move(name), device, launch_ns, thread]() mutable {
    Event e{Kind::Execution, std::move(name), device, launch_ns, now_ns(), thread, {}};
    std::lock_guard<std::mutex> lock(session->mutex);
    session->events.push_back(std::move(e));
    if (--session->running == 0) session->all_done.notify_all();
  };
  try {
    done->on_ready(std::move(finish));
  } catch (const pjrt::Error&) {  // the plugin cannot call back: the event goes unrecorded
    std::lock_guard<std::mutex> lock(session->mutex);
    if (--session->running == 0) session->all_done.notify_all();
  }
}

}  // namespace tpu::engine::trace
