#include "engine/compile_log.h"

#include <atomic>
#include <cstdio>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "engine/config.h"
#include "engine/diagnostics.h"
#include "engine/runtime.h"

namespace tpu::engine {
namespace {

// Programs a line keeps for comparison, and how many compiles make a storm.
constexpr size_t kKeptPerLine = 4;
constexpr size_t kStorm = 8;
// Records kept; the oldest go first (a long run compiles without bound only when
// something is wrong, and then the recent records are the ones to read).
constexpr size_t kMaxRecords = 10000;

struct Line {
  std::deque<ir::Graph> recent;  // the last programs compiled here, newest last
  size_t compiles = 0;
  bool warned = false;
};

std::mutex g_mutex;
std::deque<CompileRecord> g_records;
std::unordered_map<std::string, Line> g_lines;
thread_local bool t_background = false;

const char* mode_name() { return t_background ? "background" : eager_mode_name(eager_mode()); }

// The program's first few ops (parameters and shape glue left out), as its name.
std::string first_ops(const ir::Graph& graph) {
  std::string s;
  int named = 0;
  for (size_t i = 0; i < graph.size() && named < 3; ++i) {
    ir::Op op = graph.op(ir::Value{static_cast<int>(i)});
    if (op == ir::Op::Parameter || op == ir::Op::Reshape) continue;
    s += (named++ ? ", " : "") + std::string(ir::short_name(op));
  }
  return s.empty() ? "(parameters only)" : s;
}

// What differs from the nearest of the line's recent programs (most nodes in agreement).
std::string reason_against(const Line& line, const ir::Graph& graph) {
  if (line.recent.empty()) return "first program at this line";
  const ir::Graph* nearest = &line.recent.back();
  size_t best = 0;
  for (const ir::Graph& g : line.recent)
    if (size_t same = graph.agreement(g); same >= best) best = same, nearest = &g;  // ties: the newest
  std::string difference = graph.difference(*nearest);
  return difference.empty() ? "the same program as one compiled before here (the cache was cleared or another "
                              "process wrote it)"
                            : difference;
}

std::atomic<int> g_recording{-1};  // -1: not decided yet (the knob decides)

}  // namespace

BackgroundCompileScope::BackgroundCompileScope() { t_background = true; }
BackgroundCompileScope::~BackgroundCompileScope() { t_background = false; }

bool compile_recording() {
  int on = g_recording.load(std::memory_order_relaxed);
  if (on < 0) {
    on = config::flag(config::Knob::ExplainCompiles) ? 1 : 0;
    g_recording.store(on, std::memory_order_relaxed);
  }
  return on == 1;
}

void set_compile_recording(bool on) { g_recording.store(on ? 1 : 0, std::memory_order_relaxed); }

void record_compile(const ir::Graph& graph, double seconds, bool from_disk) {
  if (!compile_recording()) return;
  CompileRecord record;
  record.mode = mode_name();
  record.location = t_background ? std::string() : user_location();
  record.ops = first_ops(graph);
  record.nodes = graph.size();
  record.parameters = graph.num_parameters();
  record.seconds = seconds;
  record.from_disk = from_disk;
  std::string storm;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    // Programs with no line (backward, background) are compared by their first ops.
    Line& line = g_lines[record.location.empty() ? "ops: " + record.ops : record.location];
    record.reason = reason_against(line, graph);
    line.recent.push_back(graph);
    if (line.recent.size() > kKeptPerLine) line.recent.pop_front();
    if (++line.compiles > kStorm && !line.warned) {
      line.warned = true;
      storm = std::to_string(line.compiles) + " programs compiled at " +
              (record.location.empty() ? "the ops " + record.ops : record.location) +
              "; the last differs from the nearest earlier one in " + record.reason +
              ". A size or dtype that changes every call compiles a program each time: keep it fixed, pad it "
              "to a few sizes, or use torch.compile(dynamic=True). torch_tpu.explain_compiles() lists them all.";
    }
    g_records.push_back(record);
    if (g_records.size() > kMaxRecords) g_records.pop_front();
  }
  if (config::flag(config::Knob::ExplainCompiles))
    std::fprintf(stderr, "torch_tpu: %s %s [%s] at %s (%zu nodes, %.3f s): %s\n",
                 from_disk ? "loaded from disk" : "compiled", record.ops.c_str(), record.mode.c_str(),
                 record.location.empty() ? "(no Python line)" : record.location.c_str(), record.nodes,
                 record.seconds, record.reason.c_str());
  if (!storm.empty()) warn(storm);
}

std::vector<CompileRecord> compile_records() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_records.begin(), g_records.end()};
}

void clear_compile_records() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.clear();  // each line's earlier programs stay: later compiles are still compared with them
}

}  // namespace tpu::engine
