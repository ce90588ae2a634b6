#include "engine/disk_cache.h"

#include "engine/diagnostics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace tpu::engine {
namespace {

constexpr char kMagicPrefix[] = "TORCH_TPU_XLA_CACHE_V";
constexpr char kMagic[] = "TORCH_TPU_XLA_CACHE_V2\n";

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

// Creates the missing directories of `path`, each 0700.
void make_dirs(const std::string& path) {
  std::string partial;
  std::stringstream parts(path);
  std::string piece;
  if (!path.empty() && path[0] == '/') partial = "/";
  while (std::getline(parts, piece, '/')) {
    if (piece.empty()) continue;
    partial += piece + "/";
    mkdir(partial.c_str(), 0700);  // EEXIST is fine
  }
}

// Why a file or directory of the cache is not to be trusted, or nullptr: it must be
// owned by this user and writable by no one else.
const char* distrust(const struct stat& st) {
  if (st.st_uid != geteuid()) return "is owned by another user";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "is writable by other users";
  return nullptr;
}

// The whole file behind `fd`, or nullopt on a read error.
std::optional<std::string> read_all(int fd) {
  std::string data;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) return data;
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    data.append(buffer, static_cast<size_t>(n));
  }
}

bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

uint64_t fnv1a64(const char* bytes, size_t size, uint64_t seed) {
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= static_cast<unsigned char>(bytes[i]);
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t fnv1a64(const std::string& bytes, uint64_t seed) { return fnv1a64(bytes.data(), bytes.size(), seed); }

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

bool DiskCache::trusted_directory(bool create) const {
  if (create) make_dirs(directory_);
  struct stat st;  // through a symbolic link (a cache moved to another disk): the directory itself counts
  if (stat(directory_.c_str(), &st) != 0) return false;  // not there yet: nothing to load
  const char* why = S_ISDIR(st.st_mode) ? distrust(st) : "is not a directory";
  if (why == nullptr) return true;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    warn("the compilation cache directory " + directory_ + " " + why +
         "; the disk cache is not used (TORCH_TPU_CACHE_DIR names another)");
  return false;
}

std::optional<std::string> DiskCache::load(const std::string& key) const {
  if (!trusted_directory(false)) return std::nullopt;
  std::string path = path_for(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) warn("compilation cache entry " + path + " is a symbolic link; ignored and replaced");
    return std::nullopt;  // a miss, not a problem
  }
  struct stat st;
  const char* why = fstat(fd, &st) != 0 ? "cannot be examined" : !S_ISREG(st.st_mode) ? "is not a regular file"
                                                                                      : distrust(st);
  std::optional<std::string> read = why == nullptr ? read_all(fd) : std::nullopt;
  ::close(fd);
  if (why != nullptr) {
    warn("compilation cache entry " + path + " " + why + "; ignored and replaced, never loaded");
    return std::nullopt;
  }
  if (!read) return std::nullopt;
  const std::string& data = *read;
  size_t magic_len = sizeof(kMagic) - 1;
  if (data.compare(0, magic_len, kMagic) != 0 && data.compare(0, sizeof(kMagicPrefix) - 1, kMagicPrefix) == 0)
    return std::nullopt;  // an older torch_tpu's format: replaced without a word
  size_t pos = magic_len;
  std::string stored_key, stored_plugin, executable;
  uint64_t checksum = 0;
  bool ok = data.compare(0, magic_len, kMagic) == 0 && read_block(data, pos, stored_key) &&
            read_block(data, pos, stored_plugin) && read_block(data, pos, executable);
  size_t checked = pos;
  ok = ok && read_u64(data, pos, checksum) && pos == data.size() && checksum == fnv1a64(data.data(), checked);
  if (!ok) {
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
  if (!trusted_directory(true)) return;
  std::string data(kMagic, sizeof(kMagic) - 1);
  append_u64(data, key.size());
  data += key;
  append_u64(data, plugin_identity_.size());
  data += plugin_identity_;
  append_u64(data, executable.size());
  data += executable;
  append_u64(data, fnv1a64(data));
  std::string path = path_for(key);
  std::string temporary = path + ".tmp." + std::to_string(getpid());
  std::remove(temporary.c_str());  // a leftover of a process that died with this pid
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool written = fd >= 0 && write_all(fd, data);
  int error = errno;
  if (fd >= 0 && ::close(fd) != 0 && written) written = false, error = errno;
  if (written && std::rename(temporary.c_str(), path.c_str()) == 0) return;
  if (written) error = errno;
  std::remove(temporary.c_str());
  warn("cannot write the compilation cache entry " + path + " (" + std::strerror(error) + ")");
}

}  // namespace tpu::engine
