#include "python/bindings.h"

#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/extension.h>

#include <vector>

#include "engine/runtime.h"
#include "runtime/memory_history.h"

namespace py = pybind11;
using namespace pybind11::literals;

// From torch/csrc/profiler/python/combined_traceback.h (libtorch_python exports them),
// which the wheel's headers cannot include: it needs nlohmann/json.hpp, not shipped.
namespace torch {
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
void installCapturedTracebackPython();
}  // namespace torch

namespace tpu::python {
namespace {

// The symbolized frames of each context, in one batch (torch symbolizes C++ frames
// once per batch); an empty list where there is none.
std::vector<py::object> frames_of(const std::vector<const std::shared_ptr<c10::GatheredContext>*>& contexts) {
  std::vector<torch::CapturedTraceback*> tracebacks;
  std::vector<int> index(contexts.size(), -1);
  for (size_t i = 0; i < contexts.size(); ++i)
    if (*contexts[i]) {
      index[i] = static_cast<int>(tracebacks.size());
      tracebacks.push_back(static_cast<torch::CapturedTraceback*>(contexts[i]->get()));
    }
  std::vector<py::object> symbolized = torch::py_symbolize(tracebacks);
  std::vector<py::object> out;
  out.reserve(contexts.size());
  for (int i : index) out.push_back(i < 0 ? py::list() : symbolized[i]);
  return out;
}

py::dict snapshot() {
  runtime::MemorySnapshot snap = runtime::memory_snapshot();
  std::vector<const std::shared_ptr<c10::GatheredContext>*> contexts;
  for (const auto& b : snap.blocks) contexts.push_back(&b.context);
  for (const auto& e : snap.events) contexts.push_back(&e.context);
  std::vector<py::object> frames = frames_of(contexts);
  size_t next = 0;

  py::list segments;
  for (const runtime::LiveBlock& b : snap.blocks) {
    // Sizes are the storage's bytes: the allocator's address spacing is not memory.
    py::dict block("address"_a = b.address, "size"_a = b.nbytes, "requested_size"_a = b.nbytes,
                   "state"_a = "active_allocated", "frames"_a = frames[next]);
    // No caching allocator: a segment per storage, wholly in use.
    segments.append(py::dict("device"_a = b.device, "address"_a = b.address, "total_size"_a = b.nbytes,
                             "allocated_size"_a = b.nbytes, "active_size"_a = b.nbytes, "requested_size"_a = b.nbytes,
                             "stream"_a = 0, "segment_type"_a = "large", "segment_pool_id"_a = py::make_tuple(0, 0),
                             "is_expandable"_a = false, "frames"_a = frames[next++],
                             "blocks"_a = py::list(py::make_tuple(block))));
  }
  int devices = 0;
  try {
    devices = engine::Runtime::get().device_count();
  } catch (const std::exception&) {
  }
  std::vector<py::list> traces(devices);
  for (const runtime::MemoryEvent& e : snap.events) {
    const char* action = e.action == runtime::MemoryEvent::Action::Alloc ? "alloc" : "free_completed";
    py::dict entry("action"_a = action, "addr"_a = e.address, "size"_a = e.nbytes, "stream"_a = 0,
                   "time_us"_a = e.time_us, "frames"_a = frames[next++]);
    if (e.device >= 0 && e.device < devices) traces[e.device].append(entry);
  }
  py::list device_traces;
  for (auto& t : traces) device_traces.append(t);
  return py::dict("segments"_a = segments, "device_traces"_a = device_traces, "allocator_settings"_a = py::dict());
}

}  // namespace

void bind_memory_history(py::module_& m) {
  m.def("_record_memory_history", [](bool enabled, bool python_stacks, bool cpp_stacks, size_t max_entries) {
    runtime::ContextGatherer gatherer;
    if (enabled && (python_stacks || cpp_stacks)) {
      torch::installCapturedTracebackPython();
      gatherer = [python_stacks, cpp_stacks]() -> std::shared_ptr<c10::GatheredContext> {
        return torch::CapturedTraceback::gather(python_stacks, /*script=*/python_stacks, cpp_stacks);
      };
    }
    runtime::record_memory_history(enabled, std::move(gatherer), max_entries);
  });
  m.def("_memory_snapshot", &snapshot);
}

}  // namespace tpu::python
