#include "aten/op_memo.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/config.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "runtime/device_allocator.h"

namespace tpu::aten::op_memo {
namespace {

// Bounds the memory a thread's memo holds. When full, the keys seen once and
// not lately go (one-off calls; a key seen lately may come again, as an op's
// second call); recorded ones stay unless they fill half of it (shapes that
// never repeat), then it starts over rather than grow.
constexpr size_t kMaxEntries = 4096;
constexpr uint64_t kLately = kMaxEntries / 4;  // keys first seen within this many new keys

struct Entry {
  enum State : uint8_t { Seen, Recording, Unusable, Ready };
  std::vector<int64_t> key;
  State state = Seen;  // a key is recorded when it comes a second time: one-off calls build once
  uint64_t seen_at = 0;  // the count of new keys when it was first seen
  std::unique_ptr<Program::Recipe> recipe;
};

struct Memo {
  std::unordered_map<uint64_t, Entry> entries;
  uint64_t new_keys = 0;
};

Memo& memo_of_this_thread() {
  thread_local Memo memo;
  return memo;
}

void make_room(Memo& memo) {
  std::erase_if(memo.entries, [&](const auto& entry) {
    return entry.second.state == Entry::Seen && memo.new_keys - entry.second.seen_at > kLately;
  });
  // What is left: at most kLately + 1 recent keys, and the recorded ones.
  size_t recorded = 0;
  for (const auto& entry : memo.entries) recorded += entry.second.state != Entry::Seen;
  if (recorded >= kMaxEntries / 2) memo.entries.clear();
}

}  // namespace

bool enabled() {
  static const bool on = !engine::config::equals(engine::config::Knob::OpMemo, "0");
  return on;
}

void Key::add_text(const char* text) {
  size_t n = std::strlen(text);
  add(static_cast<int64_t>(n));
  for (size_t i = 0; i < n; i += 8) {
    int64_t word = 0;
    std::memcpy(&word, text + i, std::min<size_t>(8, n - i));
    add(word);
  }
}

namespace {
// The first position of each tensor and each storage among a call's tensors: a
// scan for an op's few, an open-addressing table for a list op's hundreds.
class FirstPositions {
 public:
  explicit FirstPositions(size_t count) {
    if (count <= kScanned) return;
    size_t size = 64;
    while (size < 2 * count) size *= 2;
    table_.assign(size, {nullptr, 0});
  }
  // The first position `key` was seen at, or `position` (which it is then recorded at).
  int64_t first(const void* key, int64_t position) {
    if (table_.empty()) {
      for (auto [k, p] : seen_)
        if (k == key) return p;
      seen_.emplace_back(key, position);
      return position;
    }
    size_t mask = table_.size() - 1;
    for (size_t i = (reinterpret_cast<uintptr_t>(key) >> 4) * 0x9e3779b97f4a7c15ull >> 20 & mask;; i = (i + 1) & mask) {
      if (table_[i].first == key) return table_[i].second;
      if (table_[i].first == nullptr) {
        table_[i] = {key, position};
        return position;
      }
    }
  }

 private:
  static constexpr size_t kScanned = 16;
  c10::SmallVector<std::pair<const void*, int64_t>, kScanned> seen_;
  std::vector<std::pair<const void*, int64_t>> table_;
};
}  // namespace

bool Key::add_tensors(std::span<const at::Tensor* const> tensors) {
  const bool fused = engine::fused_mode();
  FirstPositions same_tensor(tensors.size()), same_storage(tensors.size());
  // Fused mode: each storage's content type, asked for all at once (one lock) after the loop.
  c10::SmallVector<engine::StorageValue*, 8> contents;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = *tensors[i];
    if (!t.defined()) {
      add(-1);
      continue;
    }
    // Which earlier tensor is this very tensor (a CPU scalar is read once per program).
    add(same_tensor.first(t.unsafeGetTensorImpl(), static_cast<int64_t>(i)));
    c10::Device device = t.device();
    add(static_cast<int64_t>(t.scalar_type()) | static_cast<int64_t>(device.type()) << 8 |
        static_cast<int64_t>(device.index() + 1) << 16 | static_cast<int64_t>(t.dim()) << 32 |
        static_cast<int64_t>(t.is_conj()) << 48 | static_cast<int64_t>(t.is_neg()) << 49);
    if (!t.is_privateuseone()) {
      if (device.is_cpu() && t.dim() == 0) continue;  // a scalar, read by value
      return false;                                   // the op raises its device error
    }
    for (int64_t size : t.sizes()) add(size);
    if (t.numel() == 0) continue;  // read as zeros, never written: no storage
    for (int64_t stride : t.strides()) add(stride);
    add(t.storage_offset());
    engine::StorageValue* value = runtime::storage_value(t.storage());
    if (value == nullptr) return false;
    add(same_storage.first(value, static_cast<int64_t>(i)));
    add(static_cast<int64_t>(value->nbytes));
    if (fused) {
      if (!contents.empty() && value->device != contents[0]->device) return false;  // the op raises its device error
      contents.push_back(value);
    } else {
      add(value->buffer ? static_cast<int64_t>(value->buffer_dtype) : -1);
      add(static_cast<int64_t>(value->buffer_shape.size()));
      for (int64_t d : value->buffer_shape) add(d);
    }
  }
  size_t first = words_.size();
  words_.resize(first + contents.size());
  engine::content_dtypes(contents, std::span<int64_t>(words_.data() + first, contents.size()));
  return true;
}

uint64_t Key::hash() const {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ words_.size();
  for (int64_t w : words_) {
    h ^= static_cast<uint64_t>(w) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  }
  return h ^ (h >> 33);
}

const Program::Recipe* find_or_record(Key& key, const char* name, int device,
                                      std::span<const at::Tensor* const> tensors,
                                      c10::function_ref<bool(Program::Recipe&)> record) {
  key.add_text(name);
  key.add(device);
  key.add(static_cast<int64_t>(engine::eager_mode()));
  try {
    if (!key.add_tensors(tensors)) return nullptr;
  } catch (const std::exception&) {  // e.g. a storage whose graph failed: the op raises it as usual
    return nullptr;
  }
  Memo& state = memo_of_this_thread();
  auto& memo = state.entries;
  uint64_t hash = key.hash();
  auto found = memo.find(hash);
  std::span<const int64_t> words = key.words();
  if (found != memo.end() && std::equal(found->second.key.begin(), found->second.key.end(), words.begin(),
                                        words.end())) {
    Entry& entry = found->second;
    if (entry.state == Entry::Ready) {
      engine::metrics().add(engine::Counter::OpMemoHits);
      return entry.recipe.get();
    }
    if (entry.state != Entry::Seen) return nullptr;  // unusable, or being recorded (an op it runs)
    entry.state = Entry::Recording;  // kept when ops run while recording make room
    auto recipe = std::make_unique<Program::Recipe>();
    bool usable;
    try {
      usable = record(*recipe);
    } catch (...) {  // the op's own error: a later call may record
      auto again = memo.find(hash);
      if (again != memo.end() && again->second.state == Entry::Recording) again->second.state = Entry::Seen;
      throw;
    }
    if (usable) {
      static std::atomic<uint64_t> stamps{0};
      recipe->stamp = ++stamps;
    } else {
      recipe.reset();
    }
    // Looked up again: an op run while recording could have changed the memo.
    auto recorded = memo.find(hash);
    if (recorded == memo.end() || !std::equal(recorded->second.key.begin(), recorded->second.key.end(),
                                              words.begin(), words.end()))
      return nullptr;
    recorded->second.state = recipe ? Entry::Ready : Entry::Unusable;
    recorded->second.recipe = std::move(recipe);
    if (recorded->second.recipe) engine::metrics().add(engine::Counter::OpMemoRecipes);
    return recorded->second.recipe.get();
  }
  if (memo.size() >= kMaxEntries) make_room(state);
  Entry& entry = memo[hash];  // a colliding key replaces the other
  entry.key.assign(words.begin(), words.end());
  entry.state = Entry::Seen;
  entry.seen_at = ++state.new_keys;
  entry.recipe.reset();
  return nullptr;
}

}  // namespace tpu::aten::op_memo
