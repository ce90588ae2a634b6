// Compiled executables on disk, shared by every mode and process.
//
// One file per program: <dir>/<hash>.xla holding a header (magic, the full
// program key, the plugin identity), the serialized executable and a checksum
// of everything before it. Writes go to a temporary file (mode 0600) renamed
// into place (atomic).
//
// The directory is a trust boundary: an executable loaded from it runs with the
// user's rights. Directories the cache creates are 0700. A cache directory that
// another user owns or that others may write is not used at all; an entry that
// another user owns, that others may write, or that is not a regular file is
// ignored and replaced, as is one truncated, corrupt (checksum), from another
// plugin (identity: plugin, version, compile flags) or for another program with
// the same hash. Each case warns; none crashes a load.
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
  // The serialized executable for `key`, if a valid, trusted entry exists.
  std::optional<std::string> load(const std::string& key) const;
  void store(const std::string& key, const std::string& executable) const;
  std::string path_for(const std::string& key) const;

 private:
  // Whether the directory may be used (creating it, 0700, when `create`); warns once when not.
  bool trusted_directory(bool create) const;
  std::string directory_;
  std::string plugin_identity_;
};

uint64_t fnv1a64(const std::string& bytes, uint64_t seed = 1469598103934665603ull);
uint64_t fnv1a64(const char* bytes, size_t size, uint64_t seed = 1469598103934665603ull);

}  // namespace tpu::engine
