// The Python extension module torch_tpu._C: runtime control, device queries,
// memory statistics and metrics. Python stays a thin shell over these.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include <string>
#include <unordered_map>

#include "aten/assert_async.h"
#include "aten/attention.h"
#include "aten/compiled_program.h"
#include "aten/external.h"
#include "aten/program.h"
#include "distributed/bindings.h"
#include "engine/background_compile.h"
#include "engine/compile_log.h"
#include "engine/config.h"
#include "engine/metrics.h"
#include "engine/pending_graph.h"
#include "engine/runtime.h"
#include "engine/trace.h"
#include "ir/ops.h"
#include "lowering/types.h"
#include "python/bindings.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/generator.h"
#include "runtime/pinned_memory.h"

namespace tpu::python {
namespace {

engine::Runtime& runtime_or_throw() {
  try {
    return engine::Runtime::get();
  } catch (const pjrt::Error& e) {
    throw std::runtime_error(e.what());
  }
}

// Runs `f`, turning backend errors into Python RuntimeErrors without C++ backtraces.
template <typename F>
auto python_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  } catch (const pjrt::Error& e) {
    throw std::runtime_error(std::string("torch_tpu: ") + e.what());
  }
}

// Runs every pending fused graph (attributed to `reason`).
void flush_pending(engine::Cut reason) {
  python_errors([&] { engine::flush_all(reason); });
}

void synchronize() {
  py::gil_scoped_release release;
  flush_pending(engine::Cut::Sync);
  try {
    engine::Runtime::get().synchronize();
  } catch (const pjrt::Error& e) {
    throw std::runtime_error(std::string("torch_tpu: ") + e.what());
  }
  try {
    aten::check_pending_asserts();
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
}

py::dict metrics() {
  py::dict out;
  for (const auto& [name, value] : engine::metrics().counters()) out[py::str(name)] = value;
  py::dict fallbacks;
  for (const auto& [op, count] : engine::metrics().fallbacks()) fallbacks[py::str(op)] = count;
  out["fallback_ops"] = fallbacks;
  return out;
}

template <class T>
void append_bytes(std::string& key, T value) {
  key.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// What a sealed torch.compile program depends on besides buffer contents,
// as bytes (see torch_tpu/_compile.py), or None when an argument cannot be
// sealed. Built here since it runs on every compiled call, over every parameter.
py::object compile_signature(const py::sequence& args) {
  // Reused: regrowing a fresh key append by append was half of this function's time.
  thread_local std::string key;
  key.clear();
  // The float32 matmul precision is baked into the program's dots.
  append_bytes(key, static_cast<int8_t>(at::globalContext().float32MatmulPrecision()));
  for (py::handle a : args) {
    PyObject* o = a.ptr();
    if (THPVariable_Check(o)) {
      const at::Tensor& t = THPVariable_Unpack(o);
      if (t.is_privateuseone()) {
        key += 'T';
        append_bytes(key, static_cast<int8_t>(t.scalar_type()));
        append_bytes(key, static_cast<int8_t>(t.device().index()));
        append_bytes(key, static_cast<int32_t>(t.dim()));
        for (int64_t d : t.sizes()) append_bytes(key, d);
        for (int64_t d : t.strides()) append_bytes(key, d);
        append_bytes(key, t.storage_offset());
        append_bytes(key, static_cast<int64_t>(t.storage().nbytes()));
      } else if (t.dim() == 0) {
        key += 'S';  // uploaded per call: a program input
        append_bytes(key, static_cast<int8_t>(t.scalar_type()));
      } else {
        return py::none();  // a CPU tensor operand: not sealable
      }
    } else if (o == Py_None) {
      key += 'N';
    } else if (PyBool_Check(o)) {
      key += o == Py_True ? "B1" : "B0";
    } else if (PyLong_Check(o)) {
      // The value, not str(): an int subclass may print itself otherwise.
      int overflow = 0;
      long long value = PyLong_AsLongLongAndOverflow(o, &overflow);
      if (overflow == 0) {
        key += 'I';
        append_bytes(key, value);
      } else {
        py::object digits = py::reinterpret_steal<py::object>(PyLong_Type.tp_repr(o));
        if (!digits) throw py::error_already_set();
        key += 'L';
        key += digits.cast<std::string>();
        key += ';';
      }
    } else if (PyFloat_Check(o)) {
      key += 'F';
      append_bytes(key, PyFloat_AS_DOUBLE(o));
    } else {
      return py::none();
    }
  }
  // Interned: each call with the same signature returns the same object (its hash
  // cached, matched by identity in the program dict) instead of a fresh bytes object
  // of a few KiB, whose allocation made malloc merge its fast bins on every call.
  // The GIL guards the table; bounded, as graphs with changing scalars make new keys.
  static auto* interned = new std::unordered_map<std::string, py::object>();  // never destroyed: holds Python objects
  auto it = interned->find(key);
  if (it == interned->end()) {
    if (interned->size() >= 4096) interned->clear();
    it = interned->emplace(key, py::make_tuple(py::bytes(key))).first;
  }
  return it->second;
}

runtime::TpuGenerator& generator(int device) {
  return *at::check_generator<runtime::TpuGenerator>(
      runtime::default_generator(static_cast<c10::DeviceIndex>(device)));
}

}  // namespace
}  // namespace tpu::python

PYBIND11_MODULE(_C, m) {
  using namespace tpu;
  m.doc() = "torch_tpu native core";
  // c10 errors raised by these bindings become the Python types torch raises (IndexError
  // for a bad device index, ...), without C++ backtraces. Module-local, so it answers
  // before any translator another module registered (on a torch 2.11 build a c10 error
  // reaching the shared translators crashed the process).
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const c10::IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
    } catch (const c10::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
    } catch (const c10::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
    } catch (const c10::NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
  distributed::bind_host_staged_backend(m);
  distributed::bind_device_collectives(m);
  // Whether torch.profiler's PrivateUse1 activity shows the device's events.
  m.attr("_device_profiler") = python::register_profiler();
  // The same events without torch.profiler (torch_tpu.tools.step_report): stop
  // returns them as (kind, name, device, start_ns, end_ns, [(key, value), ...]), oldest first.
  m.def("_trace_start", &engine::trace::start);
  m.def("_trace_stop", [] {
    std::vector<std::tuple<std::string, std::string, int, int64_t, int64_t,
                           std::vector<std::pair<const char*, std::string>>>>
        out;
    for (auto& e : engine::trace::stop())
      out.emplace_back(engine::trace::kind_name(e.kind), std::move(e.name), e.device, e.start_ns, e.end_ns,
                       std::move(e.args));
    return out;
  }, py::call_guard<py::gil_scoped_release>());
  m.def("_compile_signature", &python::compile_signature);
  // Engine warnings become Python warnings (TORCH_WARN is buffered and raised
  // by the Python bindings when the op returns).
  engine::set_warning_handler([](const std::string& message) { TORCH_WARN("torch_tpu: ", message); });
  m.def("_set_location_provider", [](py::object provider) {
    // Leaked on purpose: the engine's hook outlives the interpreter, and a
    // py::object must not be released after Python has finalised.
    auto* holder = new py::object(std::move(provider));
    engine::set_location_provider([holder]() -> std::string {
      // A thread Python never ran on (autograd's device thread, a compile worker)
      // has no user frame to name: answered without taking the GIL.
      if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return {};
      py::gil_scoped_acquire gil;
      try {
        return (*holder)().cast<std::string>();
      } catch (const py::error_already_set&) {
        return {};
      }
    });
  });
  m.def("_config_knobs", [] {  // the TORCH_TPU_* names the C++ core reads (torch_tpu.config lists them all)
    std::vector<std::string> names;
    for (engine::config::Knob knob : engine::config::knobs()) names.emplace_back(engine::config::name(knob));
    return names;
  });
  m.def("_set_cache_dir", &engine::Runtime::set_cache_dir);
  m.def("_set_subclasses_take_fused_attention", &aten::set_subclasses_take_fused_attention);
  m.def("_cache_dir", &engine::Runtime::cache_dir);
  m.def("_compile_records", [] {
    py::list out;
    for (const engine::CompileRecord& r : engine::compile_records()) {
      py::dict d;
      d["mode"] = r.mode;
      d["location"] = r.location;
      d["ops"] = r.ops;
      d["nodes"] = r.nodes;
      d["parameters"] = r.parameters;
      d["seconds"] = r.seconds;
      d["from_disk"] = r.from_disk;
      d["reason"] = r.reason;
      out.append(std::move(d));
    }
    return out;
  });
  m.def("_clear_compile_records", &engine::clear_compile_records);
  m.def("_set_compile_recording", &engine::set_compile_recording);
  m.def("_wait_for_compiles", &engine::drain_background_compiles, py::call_guard<py::gil_scoped_release>());
  m.def("_stop_background_compiles", &engine::stop_background_compiles, py::call_guard<py::gil_scoped_release>());
  m.def("_inject_background_compile_failure", &engine::inject_background_compile_failure);
  m.def("_inject_launch_failures", &engine::Runtime::inject_launch_failures);
  m.def("_set_eager_mode", [](const std::string& mode) {
    engine::EagerMode next;
    if (mode == "strict")
      next = engine::EagerMode::Strict;
    else if (mode == "debug")
      next = engine::EagerMode::Debug;
    else if (mode == "fused")
      next = engine::EagerMode::Fused;
    else
      throw std::invalid_argument("unknown eager mode '" + mode + "'");
    if (engine::Runtime::initialized()) python::flush_pending(engine::Cut::ModeSwitch);
    engine::set_eager_mode(next);
  });
  m.def("_get_eager_mode", [] { return engine::eager_mode_name(engine::eager_mode()); });
  // torch.compile(backend="tpu"): capture a graph's ops once, replay the program.
  py::class_<aten::CompiledProgram, std::shared_ptr<aten::CompiledProgram>>(m, "_CapturedProgram")
      .def("run",
           [](const aten::CompiledProgram& program, const std::vector<at::Tensor>& inputs) {
             return python::python_errors([&] { return program.run(inputs); });
           })
      // A whole call: the graph's arguments as they come (non-tensors are in the signature).
      .def("call",
           [](const aten::CompiledProgram& program, const py::sequence& args) {
             std::vector<const at::Tensor*> tensors;
             tensors.reserve(args.size());
             for (py::handle a : args)
               if (THPVariable_Check(a.ptr())) tensors.push_back(&THPVariable_Unpack(a.ptr()));
             return python::python_errors([&] { return program.call(tensors); });
           })
      .def_property_readonly("num_ops", &aten::CompiledProgram::num_ops)
      .def_property_readonly("mutated_inputs", &aten::CompiledProgram::mutated_inputs);
  m.def("_begin_capture",
        [](int device) { return python::python_errors([&] { return engine::begin_capture(device); }); });
  // None when the capture was cut (its ops ran or stay pending as fused eager work).
  m.def("_end_capture", [](int device, uint64_t token, const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& outputs) {
    return python::python_errors([&] {
      try {
        return aten::CompiledProgram::seal(device, token, inputs, outputs);
      } catch (...) {
        engine::abandon_capture(device);
        throw;
      }
    });
  });
  m.def("_abandon_capture", &engine::abandon_capture);
  // torch_tpu.jax_kernel: a StableHLO function lowered by JAX, run as one op.
  m.def("_call_external", [](const std::string& name, const std::string& text, const std::vector<at::Tensor>& inputs,
                             const std::vector<at::Tensor>& outputs) {
    python::python_errors([&] { aten::call_external(name, text, inputs, outputs); });
  });
  m.def("_flush", [](const std::string& reason) {
    py::gil_scoped_release release;
    python::flush_pending(reason == "sync"             ? engine::Cut::Sync
                           : reason == "optimizer_step" ? engine::Cut::OptimizerStep
                                                        : engine::Cut::DataRead);
  });
  m.def("_scalar_to_device", &aten::scalar_to_device, py::arg("scalar"), py::arg("device"));
  // The dims of the device buffer holding a tpu tensor's storage (running what
  // is pending for it first); None before anything was written. For tests.
  m.def("_storage_buffer_shape", [](const at::Tensor& t) -> std::optional<std::vector<int64_t>> {
    engine::StorageValue* value = t.is_privateuseone() ? runtime::storage_value(t.storage()) : nullptr;
    TORCH_CHECK(value != nullptr, "_storage_buffer_shape: expected a tpu tensor with storage, got ", t.device());
    python::python_errors([&] { engine::materialize(value); });
    if (!value->buffer) return std::nullopt;
    return std::vector<int64_t>(value->buffer_shape.begin(), value->buffer_shape.end());
  });
  m.def("_set_plugin_path", &engine::Runtime::set_plugin_path, py::arg("path"), py::arg("selected_by"),
        py::arg("options") = std::vector<pjrt::CreateOption>{}, py::arg("device_thread_nice") = 0,
        py::arg("explicit_reduction_split") = false,
        py::arg("xla_flags") = std::vector<std::pair<std::string, std::string>>{});
  m.def("_is_initialized", &engine::Runtime::initialized);
  m.def("_is_in_bad_fork", &engine::Runtime::in_forked_child);
  m.def("_init", [] {
    auto& rt = python::runtime_or_throw();
    const auto& plugin = rt.client().plugin();
    py::dict info;
    info["platform"] = rt.client().platform_name();
    info["platform_version"] = rt.client().platform_version();
    info["plugin_path"] = plugin->path();
    info["api_version"] = std::to_string(plugin->api_major()) + "." + std::to_string(plugin->api_minor());
    py::list kinds;
    for (const auto& d : rt.client().devices()) kinds.append(d.kind);
    info["device_kinds"] = kinds;
    info["process_index"] = rt.client().process_index();
    info["global_device_count"] = rt.client().global_device_count();  // > len(device_kinds): spans processes
    info["device_thread_nice"] = rt.device_thread_nice();
    info["device_threads_lowered"] = rt.device_threads_lowered();
    info["xla_flags"] = rt.xla_flags();
    info["reduction_split"] = engine::Runtime::reduction_split() == ir::ReductionSplit::Explicit ? "torch_tpu" : "compiler";
    return info;
  });
  m.def("_mem_get_info", [](int device) {
    return python::python_errors([&] {
      runtime::check_device(device);
      return python::runtime_or_throw().memory_info(device);
    });
  });
  m.def("_device_count", &runtime::device_count);
  m.def("_current_device", &runtime::current_device);
  m.def("_set_device", &runtime::set_device);
  m.def("_synchronize", &python::synchronize);
  py::class_<engine::Marker, std::shared_ptr<engine::Marker>>(m, "_Marker")
      .def("query", [](const engine::Marker& marker) {
        try {
          return marker.ready();
        } catch (const pjrt::Error& e) {
          throw std::runtime_error(std::string("torch_tpu: ") + e.what());
        }
      })
      .def("synchronize", [](const engine::Marker& marker) {
        py::gil_scoped_release release;
        try {
          marker.wait();
        } catch (const pjrt::Error& e) {
          throw std::runtime_error(std::string("torch_tpu: ") + e.what());
        }
      });
  m.def("_mark", [] {
    auto& rt = python::runtime_or_throw();
    python::flush_pending(engine::Cut::Sync);  // an event covers the work queued before it
    return rt.mark();
  });
  python::bind_memory_history(m);
  m.def("_memory_allocated", &runtime::memory_allocated);
  m.def("_max_memory_allocated", &runtime::max_memory_allocated);
  m.def("_reset_peak_memory_stats", &runtime::reset_peak_memory);
  m.def("_metrics", &python::metrics);
  m.def("_reset_metrics", [] { engine::metrics().reset(); });
  m.def("_pinned_host_memory", [] {
    auto total = runtime::pinned_host_memory();
    return py::make_tuple(total.bytes, total.dma_mapped_bytes);
  });
  m.def("_compiled_program_count", [] { return python::runtime_or_throw().cache_size(); });
  m.def("_unsupported_dtype_reason", [](const std::string& platform, py::object dtype) {
    return lowering::unsupported_dtype_reason(platform,
                                              reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
  });
  m.def("_manual_seed", [](int device, uint64_t seed) {
    at::Generator gen = runtime::default_generator(static_cast<c10::DeviceIndex>(device));
    std::lock_guard<std::mutex> lock(gen.mutex());
    python::generator(device).set_current_seed(seed);
  });
  m.def("_seed", [](int device) {
    at::Generator gen = runtime::default_generator(static_cast<c10::DeviceIndex>(device));
    std::lock_guard<std::mutex> lock(gen.mutex());
    return python::generator(device).seed();
  });
  m.def("_initial_seed", [](int device) { return python::generator(device).current_seed(); });
  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(runtime::default_generator(static_cast<c10::DeviceIndex>(device))));
  });
}
