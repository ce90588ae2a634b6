#include "engine/disk_cache.h"

#include "engine/diagnostics.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tpu::engine {
namespace {

constexpr char kMagic[] = "TORCH_TPU_XLA_CACHE_V1\n";


void append_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool read_u64(const std::string& in, size_t& pos, uint64_t& v) {
  if (pos + 8 > in.size()) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[pos + i])) << (8 * i);
  pos += 8;
  return true;
}

bool read_block(const std::string& in, size_t& pos, std::string& out) {
  uint64_t n;
  if (!read_u64(in, pos, n) || n > in.size() - pos) return false;
  out.assign(in, pos, n);
  pos += n;
  return true;
}

void make_dirs(const std::string& path) {
  std::string partial;
  std::stringstream parts(path);
  std::string piece;
  if (!path.empty() && path[0] == '/') partial = "/";
  while (std::getline(parts, piece, '/')) {
    if (piece.empty()) continue;
    partial += piece + "/";
    mkdir(partial.c_str(), 0755);  // EEXIST is fine
  }
}

}  // namespace

uint64_t fnv1a64(const std::string& bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

DiskCache::DiskCache(std::string directory, std::string plugin_identity)
    : directory_(std::move(directory)), plugin_identity_(std::move(plugin_identity)) {}

std::string DiskCache::path_for(const std::string& key) const {
  // Two differently seeded 64-bit hashes: 128 bits for the file name.
  char name[40];
  std::snprintf(name, sizeof(name), "%016llx%016llx",
                static_cast<unsigned long long>(fnv1a64(plugin_identity_ + '\0' + key)),
                static_cast<unsigned long long>(fnv1a64(key + '\0' + plugin_identity_, 0x9e3779b97f4a7c15ull)));
  return directory_ + "/" + name + ".xla";
}

std::optional<std::string> DiskCache::load(const std::string& key) const {
  std::string path = path_for(key);
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;  // a miss, not a problem
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  std::string stored_key, stored_plugin, executable;
  uint64_t checksum = 0;
  size_t magic_len = sizeof(kMagic) - 1;
  bool ok = data.compare(0, magic_len, kMagic) == 0;
  pos = magic_len;
  ok = ok && read_block(data, pos, stored_key) && read_block(data, pos, stored_plugin) &&
       read_block(data, pos, executable) && read_u64(data, pos, checksum) && pos == data.size();
  if (!ok || checksum != fnv1a64(executable)) {
    warn("compilation cache entry " + path + " is truncated or corrupt; recompiling and replacing it");
    return std::nullopt;
  }
  if (stored_plugin != plugin_identity_) {
    warn("compilation cache entry " + path + " was written by another plugin (" + stored_plugin +
         "); recompiling and replacing it");
    return std::nullopt;
  }
  if (stored_key != key) return std::nullopt;  // a hash collision: simply a miss
  return executable;
}

void DiskCache::store(const std::string& key, const std::string& executable) const {
  make_dirs(directory_);
  std::string data(kMagic, sizeof(kMagic) - 1);
  append_u64(data, key.size());
  data += key;
  append_u64(data, plugin_identity_.size());
  data += plugin_identity_;
  append_u64(data, executable.size());
  data += executable;
  append_u64(data, fnv1a64(executable));
  std::string path = path_for(key);
  std::string temporary = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!file) {
      std::remove(temporary.c_str());
      warn("cannot write the compilation cache entry " + path + " (" + std::strerror(errno) + ")");
      return;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    warn("cannot write the compilation cache entry " + path + " (" + std::strerror(errno) + ")");
  }
}

}  // namespace tpu::engine
