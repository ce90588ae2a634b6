// torch.profiler's view of the device: a Kineto activity profiler, registered
// as PyTorch's PrivateUse1 profiler, whose sessions record engine::trace events
// and hand them to Kineto as activities. profile(activities=[CPU, PrivateUse1])
// then shows, beside the ATen ops, each program's launch and its execution on
// the device, compiles, fused-graph cuts with their reasons, transfers and
// collectives; export_chrome_trace writes them with the rest.
#include "python/bindings.h"

#if __has_include(<torch/csrc/profiler/standalone/privateuse1_profiler.h>)
// This torch was built with Kineto (the registry's header exists only then).
#ifndef USE_KINETO
#define USE_KINETO
#endif
#include <memory>
// The headers Kineto ships declare CpuTraceBuffer without defining it, yet a
// session must return a unique_ptr to one. Ours always returns none, so its
// deleter (which the return type instantiates) never sees an object.
namespace libkineto {
struct CpuTraceBuffer;
}
template <>
struct std::default_delete<libkineto::CpuTraceBuffer> {
  void operator()(libkineto::CpuTraceBuffer*) const noexcept {}
};
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#define TORCH_TPU_HAS_KINETO_PLUGIN 1
#endif

#ifdef TORCH_TPU_HAS_KINETO_PLUGIN
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <mutex>

#include <ITraceActivity.h>
#include <output_base.h>

#include "engine/trace.h"
#endif

namespace tpu::python {

#ifdef TORCH_TPU_HAS_KINETO_PLUGIN
namespace {

using libkineto::ActivityType;
namespace trace = engine::trace;

// One event as Kineto sees it. Kineto's loggers keep pointers to activities
// until the trace is exported, so the profiler below owns them (see kKeptTraces).
class Activity final : public libkineto::ITraceActivity {
 public:
  Activity(const trace::Event& e, const libkineto::TraceSpan* span) : event_(e), span_(span) {
    on_device_ = e.kind == trace::Kind::Execution;
  }
  // Device events go on the device's row (a "stream" per device); host events
  // on the recording thread's row of this process, as CUDA's runtime calls do.
  int64_t deviceId() const override { return on_device_ ? event_.device : static_cast<int64_t>(::getpid()); }
  int64_t resourceId() const override { return on_device_ ? 0 : static_cast<int64_t>(event_.thread); }
  int32_t getThreadId() const override { return static_cast<int32_t>(event_.thread); }
  int64_t timestamp() const override { return event_.start_ns; }
  int64_t duration() const override { return event_.end_ns - event_.start_ns; }
  int64_t correlationId() const override { return 0; }
  int flowType() const override { return 0; }
  int64_t flowId() const override { return 0; }
  bool flowStart() const override { return false; }
  ActivityType type() const override {
    return on_device_ ? ActivityType::CONCURRENT_KERNEL : ActivityType::PRIVATEUSE1_RUNTIME;
  }
  const std::string name() const override { return event_.name; }
  const ITraceActivity* linkedActivity() const override { return nullptr; }
  const libkineto::TraceSpan* traceSpan() const override { return span_; }
  void log(libkineto::ActivityLogger& logger) const override { logger.handleActivity(*this); }
  const std::string metadataJson() const override {
    // Values are op names, reasons and numbers: nothing to escape.
    std::string json = "\"kind\": \"" + std::string(trace::kind_name(event_.kind)) + "\"";
    if (event_.device >= 0) json += ", \"device\": \"tpu:" + std::to_string(event_.device) + "\"";
    for (const auto& [key, value] : event_.args) json += ", \"" + std::string(key) + "\": \"" + value + "\"";
    return json;
  }

 private:
  trace::Event event_;
  const libkineto::TraceSpan* span_;
  bool on_device_;
};

// The activities of one profiling session and the span they belong to.
struct Recorded {
  libkineto::TraceSpan span{0, 0, "tpu"};
  std::deque<Activity> activities;
};

class Session final : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(std::shared_ptr<Recorded> recorded) : recorded_(std::move(recorded)) {}
  void start() override {
    trace::start();
    status_ = libkineto::TraceStatus::RECORDING;
  }
  void stop() override {
    events_ = trace::stop();
    for (const trace::Event& e : events_)
      if (e.kind == trace::Kind::Execution && std::find(devices_.begin(), devices_.end(), e.device) == devices_.end())
        devices_.push_back(e.device);
    status_ = libkineto::TraceStatus::PROCESSING;
  }
  std::vector<std::string> errors() override { return {}; }
  void processTrace(libkineto::ActivityLogger& logger) override { emit(logger, INT64_MIN, INT64_MAX); }
  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback, int64_t start_ns,
                    int64_t end_ns) override {
    emit(logger, start_ns, end_ns);
  }
  // Names the rows of the devices that ran programs ("tpu:0", its "programs" row).
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    int device = devices_.empty() ? 0 : devices_.front();
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{device, device, "tpu:" + std::to_string(device), "tpu:" + std::to_string(device)});
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> rows;
    for (int device : devices_) rows.push_back(libkineto::ResourceInfo{0, 0, device, "programs"});
    return rows;
  }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

 private:
  void emit(libkineto::ActivityLogger& logger, int64_t start_ns, int64_t end_ns) {
    for (const trace::Event& e : events_) {
      // Kineto's window; a zero or inverted window means "no window".
      if (end_ns > start_ns && (e.end_ns < start_ns || e.start_ns > end_ns)) continue;
      recorded_->activities.emplace_back(e, &recorded_->span);
      logger.handleActivity(recorded_->activities.back());
    }
    events_.clear();
    status_ = libkineto::TraceStatus::READY;
  }
  std::shared_ptr<Recorded> recorded_;
  std::vector<trace::Event> events_;
  std::vector<int> devices_;  // those that ran programs, in first-run order
};

class DeviceProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return activities_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config&) override {
    return session_for(activity_types);
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config&) override {
    return session_for(activity_types);
  }

 private:
  // The activities of the last kKeptTraces sessions stay alive: a trace keeps
  // pointers to them until it is exported, and Kineto gives no signal when it is gone.
  static constexpr size_t kKeptTraces = 16;
  std::unique_ptr<libkineto::IActivityProfilerSession> session_for(const std::set<ActivityType>& types) {
    // Only a profile that asked for the device (ProfilerActivity.PrivateUse1 adds
    // device kernels): once Kineto has run one, CPU-only profiles ask for
    // PRIVATEUSE1_RUNTIME too, and those must not pay for recording.
    if (types.count(ActivityType::CONCURRENT_KERNEL) == 0) return nullptr;
    auto recorded = std::make_shared<Recorded>();
    std::lock_guard<std::mutex> lock(mutex_);
    kept_.push_back(recorded);
    if (kept_.size() > kKeptTraces) kept_.pop_front();
    return std::make_unique<Session>(std::move(recorded));
  }
  std::string name_ = "torch_tpu";
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::PRIVATEUSE1_RUNTIME};
  std::mutex mutex_;
  std::deque<std::shared_ptr<Recorded>> kept_;
};

}  // namespace

bool register_profiler() {
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
      [] { return std::unique_ptr<libkineto::IActivityProfiler>(new DeviceProfiler()); });
  return true;
}
#else
bool register_profiler() { return false; }
#endif

}  // namespace tpu::python
