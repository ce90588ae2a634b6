// Native test of the engine layer (csrc/engine: pending graphs, the runtime's
// program cache and launches, background compiles) without torch: several
// threads record and launch at once, as Python threads and autograd's device
// thread do, each on storages of its own, while storages die on other threads
// than the one that recorded them (Python frees a tensor wherever its last
// reference goes). Every value read back is checked against the host's.
//
// Usage: test_engine PLUGIN_PATH
// Prints "PASS name" / "FAIL name: why" per scenario and "N passed, M failed";
// exits 1 if any failed. Built and run by tests/test_pjrt_native.py, also
// under ThreadSanitizer.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/background_compile.h"
#include "engine/pending_graph.h"
#include "engine/runtime.h"
#include "engine/storage_value.h"
#include "ir/graph.h"
#include "ir/ops.h"

namespace engine = tpu::engine;
namespace ir = tpu::ir;

namespace {

constexpr int64_t kElements = 64;
constexpr int kThreads = 4;
const ir::Type kFlat{ir::DType::F32, {kElements}};

using Storage = std::unique_ptr<engine::StorageValue, void (*)(engine::StorageValue*)>;

// A storage's end, as the allocator's deleter has it: out of any pending graph, then freed.
void free_storage(engine::StorageValue* value) {
  engine::forget_pending(value);
  delete value;
}

Storage make_storage(float fill) {
  Storage s(new engine::StorageValue(), &free_storage);
  s->nbytes = kElements * sizeof(float);
  s->dtype = ir::DType::F32;
  std::vector<float> host(kElements, fill);
  engine::set_buffer(s.get(), engine::Runtime::get().upload(host.data(), ir::DType::F32, kFlat.shape, 0), kFlat);
  return s;
}

// dst = src * scale + offset: appended to the device's pending graph in fused
// mode (as aten::Program::run does), launched at once otherwise.
void scale_add(engine::StorageValue* src, engine::StorageValue* dst, float scale, float offset) {
  ir::Graph g;
  ir::Value x = engine::flat_storage_value(g, g.parameter(kFlat));
  ir::Value y = ir::binary(g, ir::Op::Add, ir::binary(g, ir::Op::Multiply, x, ir::full(g, ir::DType::F32, scale, kFlat.shape)),
                           ir::full(g, ir::DType::F32, offset, kFlat.shape));
  if (engine::fused_mode()) {
    engine::ProgramArgument argument{nullptr, src, kFlat};
    std::pair<engine::StorageValue*, ir::Value> written{dst, y};
    engine::defer(0, "scale_add", std::move(g), {&argument, 1}, {&written, 1}, {});
    return;
  }
  ir::Value result = engine::storage_result(g, y, nullptr);
  g.add_output(result);
  auto outputs = engine::Runtime::get().execute(g, {src->buffer}, 0);
  dst->hold(std::move(outputs.at(0)), g.type(result));
}

std::vector<float> read(engine::StorageValue* s) {
  engine::materialize(s);
  std::vector<float> host(kElements);
  engine::Runtime::get().download(*s->buffer, host.data(), host.size() * sizeof(float));
  return host;
}

void expect_all(engine::StorageValue* s, float want, const std::string& what) {
  for (float got : read(s))
    if (std::fabs(got - want) > 1e-3f * std::max(1.0f, std::fabs(want)))
      throw std::runtime_error(what + ": " + std::to_string(got) + " instead of " + std::to_string(want));
}

// Runs body(thread index) on kThreads threads at once; rethrows the first failure.
void on_threads(const std::function<void(int)>& body) {
  std::mutex mutex;
  std::string error;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        body(t);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        if (error.empty()) error = "thread " + std::to_string(t) + ": " + e.what();
      }
    });
  for (auto& th : threads) th.join();
  if (!error.empty()) throw std::runtime_error(error);
}

// Each thread runs chains of ops on its own storages and checks them; every
// round mixes reads (which cut the shared pending graph, ops of other threads
// in it) with chains left pending for another thread's cut to run.
void chains_on_threads() {
  on_threads([](int t) {
    for (int round = 0; round < 40; ++round) {
      float start = static_cast<float>(t * 100 + round);
      Storage a = make_storage(start), b = make_storage(0), c = make_storage(0);
      scale_add(a.get(), b.get(), 2, 1);                 // b = 2a + 1
      scale_add(b.get(), c.get(), 0.5f, static_cast<float>(t));  // c = b / 2 + t
      scale_add(c.get(), a.get(), 1, -1);                // a = c - 1 (in place of the input)
      if (round % 3 != 2) expect_all(a.get(), start + 0.5f + static_cast<float>(t) - 1, "a");
      if (round % 2 == 0) expect_all(b.get(), 2 * start + 1, "b");
      // otherwise a, b and c die with their values still pending
    }
  });
}

// Storages recorded by one thread die on another while the first records more,
// as Python frees tensors wherever their last reference goes.
void storages_die_on_other_threads() {
  std::mutex mutex;
  std::vector<Storage> handed;  // recorded by some thread, freed by another
  on_threads([&](int t) {
    for (int round = 0; round < 40; ++round) {
      Storage kept = make_storage(static_cast<float>(t)), dying = make_storage(0);
      scale_add(kept.get(), dying.get(), 3, 0);
      Storage other(nullptr, &free_storage);
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!handed.empty()) {
          other = std::move(handed.back());
          handed.pop_back();
        }
        handed.push_back(std::move(dying));
      }
      other.reset();
      scale_add(kept.get(), kept.get(), 1, 2);
      expect_all(kept.get(), static_cast<float>(t) + 2, "kept");
    }
  });
  handed.clear();
}

// Threads launch the same programs at once: the shared cache compiles or finds
// each, and every thread's results are its own.
void launches_share_the_cache() {
  on_threads([](int t) {
    for (int round = 0; round < 30; ++round) {
      float offset = static_cast<float>(round % 3);  // three programs, each launched by every thread
      Storage a = make_storage(static_cast<float>(t)), b = make_storage(0);
      scale_add(a.get(), b.get(), 2, offset);
      scale_add(b.get(), a.get(), 0.5f, 0);
      expect_all(a.get(), static_cast<float>(t) + offset / 2, "a");
    }
  });
}

struct Scenario {
  const char* name;
  engine::EagerMode mode;
  void (*run)();
};

const Scenario kScenarios[] = {
    {"fused_chains_on_threads", engine::EagerMode::Fused, chains_on_threads},
    {"fused_storages_die_on_other_threads", engine::EagerMode::Fused, storages_die_on_other_threads},
    {"strict_chains_on_threads", engine::EagerMode::Strict, chains_on_threads},
    {"strict_launches_share_the_cache", engine::EagerMode::Strict, launches_share_the_cache},
    {"fused_launches_share_the_cache", engine::EagerMode::Fused, launches_share_the_cache},
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PLUGIN_PATH\n", argv[0]);
    return 2;
  }
  engine::Runtime::set_plugin_path(argv[1], "test_engine");
  int passed = 0, failed = 0;
  for (const Scenario& s : kScenarios) {
    std::string error;
    try {
      engine::set_eager_mode(s.mode);
      s.run();
      engine::flush_all(engine::Cut::Sync);
      engine::Runtime::get().synchronize();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (error.empty()) {
      ++passed;
      std::printf("PASS %s\n", s.name);
    } else {
      ++failed;
      std::printf("FAIL %s: %s\n", s.name, error.c_str());
    }
  }
  engine::stop_background_compiles();  // as torch_tpu's exit hook does, before statics go
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
