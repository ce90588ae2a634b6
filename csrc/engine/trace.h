// What the device and the runtime did, as timed events for torch.profiler:
// program executions (the launch call on the host; launch to done on the
// device), compiles, fused-graph cuts with their reasons, host <-> device
// transfers, collectives. Recorded only between start() and stop(): off, each
// hook costs one relaxed atomic load. Knows no torch: python/profiler.cpp turns
// the events into Kineto activities.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tpu::pjrt {
class Event;
}

namespace tpu::engine::trace {

enum class Kind : uint8_t {
  Launch,      // host: the call that launches a program
  Execution,   // device: from the launch to its outputs being ready
  Compile,     // host: compiling a program or loading it from the disk cache
  Cut,         // host: a fused graph cut and launched (named by its reason)
  Upload,      // host -> device transfer
  Download,    // device -> host transfer
  Collective,  // a distributed collective
};
const char* kind_name(Kind kind);

struct Event {
  Kind kind;
  std::string name;
  int device = 0;                    // -1: not known (a download)
  int64_t start_ns = 0, end_ns = 0;  // system clock, since the epoch (Kineto's clock)
  uint64_t thread = 0;                // the recording thread's id (the OS's)
  // What else is known, as (key, value): {"bytes", "4096"}, {"ops", "12"}, ...
  std::vector<std::pair<const char*, std::string>> args;
};

namespace detail {
extern std::atomic<bool> g_on;
}
inline bool on() { return detail::g_on.load(std::memory_order_relaxed); }

int64_t now_ns();
uint64_t this_thread_id();

// Starts recording (drops what an earlier session left); stop() waits for the
// executions still running, ends recording and returns the events in order.
void start();
std::vector<Event> stop();

// Records `event` (its thread is set here) when recording is on.
void record(Event event);
// A device execution launched at `launch_ns`: `done` (the first output's ready
// event) gives its end when it fires.
void record_execution(std::string name, int device, int64_t launch_ns, std::unique_ptr<pjrt::Event> done);

// While alive, names what this thread launches and compiles ("add", "fused
// graph"): the runtime below knows programs, not the ops they came from. Only
// while recording: every strict op makes one, and the thread-local costs.
class ScopedName {
 public:
  explicit ScopedName(const char* name) : active_(on()) {
    if (!active_) return;
    previous_ = t_name;
    t_name = name;
  }
  ~ScopedName() {
    if (active_) t_name = previous_;
  }
  ScopedName(const ScopedName&) = delete;
  ScopedName& operator=(const ScopedName&) = delete;
  static const char* current() { return t_name != nullptr ? t_name : "program"; }

 private:
  static thread_local const char* t_name;
  bool active_;
  const char* previous_ = nullptr;
};

// Records [construction, destruction) as one event when recording was on at
// construction. `name` and `args` may be filled in before the end.
class Span {
 public:
  Span(Kind kind, int device) : on_(on()) {
    if (on_) {
      event_.kind = kind;
      event_.device = device;
      event_.start_ns = now_ns();
    }
  }
  ~Span() {
    if (on_) {
      event_.end_ns = now_ns();
      record(std::move(event_));
    }
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  bool active() const { return on_; }
  Event& event() { return event_; }
  int64_t start_ns() const { return event_.start_ns; }

 private:
  bool on_;
  Event event_;
};

}  // namespace tpu::engine::trace
