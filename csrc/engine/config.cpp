#include "engine/config.h"

#include <array>
#include <cstdlib>
#include <cstring>

namespace tpu::engine::config {
namespace {

struct Entry {
  Knob knob;
  const char* name;
};

// In the enum's order (checked below).
constexpr std::array kTable = {
    Entry{Knob::Fallback, "TORCH_TPU_FALLBACK"},
    Entry{Knob::FusedMaxOps, "TORCH_TPU_FUSED_MAX_OPS"},
    Entry{Knob::FusedMergeBackward, "TORCH_TPU_FUSED_MERGE_BACKWARD"},
    Entry{Knob::FusedBackgroundCompile, "TORCH_TPU_FUSED_BACKGROUND_COMPILE"},
    Entry{Knob::CheckNan, "TORCH_TPU_CHECK_NAN"},
    Entry{Knob::LogOps, "TORCH_TPU_LOG_OPS"},
    Entry{Knob::DumpPrograms, "TORCH_TPU_DUMP_PROGRAMS"},
    Entry{Knob::DumpFailedPrograms, "TORCH_TPU_DUMP_FAILED_PROGRAMS"},
    Entry{Knob::ExplainCompiles, "TORCH_TPU_EXPLAIN_COMPILES"},
    Entry{Knob::ProgramCacheSize, "TORCH_TPU_PROGRAM_CACHE_SIZE"},
    Entry{Knob::DistBlocking, "TORCH_TPU_DIST_BLOCKING"},
    Entry{Knob::OpMemo, "TORCH_TPU_OP_MEMO"},
};

constexpr bool in_order() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<size_t>(kTable[i].knob) != i) return false;
  return true;
}
static_assert(in_order(), "config: kTable must list the knobs in the enum's order");

constexpr std::array<Knob, kTable.size()> all_knobs() {
  std::array<Knob, kTable.size()> all{};
  for (size_t i = 0; i < kTable.size(); ++i) all[i] = kTable[i].knob;
  return all;
}
constexpr auto kKnobs = all_knobs();

}  // namespace

const char* name(Knob knob) { return kTable[static_cast<size_t>(knob)].name; }

std::span<const Knob> knobs() { return kKnobs; }

const char* text(Knob knob) {
  const char* value = std::getenv(name(knob));
  return value != nullptr && *value != '\0' ? value : nullptr;
}

bool flag(Knob knob) {
  const char* value = text(knob);
  return value != nullptr && std::strcmp(value, "0") != 0;
}

int64_t positive_integer(Knob knob, int64_t otherwise) {
  const char* value = text(knob);
  if (value == nullptr) return otherwise;
  char* end = nullptr;
  long long n = std::strtoll(value, &end, 10);
  return end != value && *end == '\0' && n > 0 ? static_cast<int64_t>(n) : otherwise;
}

bool equals(Knob knob, const char* word) {
  const char* value = text(knob);
  return value != nullptr && std::strcmp(value, word) == 0;
}

}  // namespace tpu::engine::config
