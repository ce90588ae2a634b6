// Compiled executables on disk, shared by every mode and process.
//
// One file per program: <dir>/<hash>.xla holding a header (magic, the full
// program key, the plugin identity), the serialized executable and a checksum.
// Writes go to a temporary file renamed into place (atomic). A file that is
// truncated, corrupt, from another plugin or another program with the same
// hash is ignored (with a warning) and rewritten; it never crashes a load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tpu::engine {

class DiskCache {
 public:
  // `plugin_identity` names the plugin, its version and the compile options.
  DiskCache(std::string directory, std::string plugin_identity);
  const std::string& directory() const { return directory_; }
  // The serialized executable for `key`, if a valid entry exists.
  std::optional<std::string> load(const std::string& key) const;
  void store(const std::string& key, const std::string& executable) const;
  std::string path_for(const std::string& key) const;

 private:
  std::string directory_;
  std::string plugin_identity_;
};

uint64_t fnv1a64(const std::string& bytes, uint64_t seed = 1469598103934665603ull);

}  // namespace tpu::engine
