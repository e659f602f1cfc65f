#pragma once
// One run per run dir.
//
// [Note: one run per run dir]
// Two fsdp-train runs started into the same --run-dir would both run, leaving
// one run's metrics beside the other's checkpoints (and metrics.jsonl lines
// cut by the other's writes). So rank 0 holds an exclusive flock(2) on
// <run-dir>/.fsdp-train.lock for the whole run. The kernel drops the lock when
// the process ends however it ends, so a killed run never leaves a stale lock
// behind, and a second run is refused at once, naming the holder that the file
// records (pid and host). Only rank 0 locks: it is the rank that writes the
// run dir's shared files, and a second run's rank 0 is the one that meets the
// lock. Resuming a killed run into its own dir works, since the lock died with
// it. fsdp-ckpt clean asks held_elsewhere() before it removes partial saves.
// Shared by the tools, so header-only.

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace fsdp::tools {

class RunDirLock {
 public:
  RunDirLock() = default;
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // Takes the lock of `run_dir` (which exists) and records this process in
  // it. Returns "" on success, else a message naming the dir, the holder and
  // the fix. The lock is held until this object is destroyed.
  std::string acquire(const std::string& run_dir);

  // Whether a process holds `run_dir`'s lock now (this one must not).
  static bool held_elsewhere(const std::string& run_dir);

  static constexpr const char* kFileName = ".fsdp-train.lock";

 private:
  int fd_ = -1;
};

namespace detail {

// What the holder wrote: "pid 123 on host-a", or "" if it could not be read.
inline std::string read_holder(int fd) {
  char buffer[256];
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (n <= 0) return "";
  std::string text(buffer, static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

inline void record_holder(int fd) {
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  const std::string text = fmt::format("pid {} on {}\n", ::getpid(), host);
  if (::ftruncate(fd, 0) == 0) {
    // Informational only: the lock itself is the flock, not this text.
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, text.data(), text.size(), 0);
  }
}

}  // namespace detail

inline RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

inline std::string RunDirLock::acquire(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / kFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fmt::format("cannot open the run dir's lock file '{}': {}; pass a --run-dir in a "
                       "writable place",
                       path, std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = detail::read_holder(fd);
    ::close(fd);
    if (error != EWOULDBLOCK) {
      return fmt::format("cannot lock the run dir '{}' ({}): {}", run_dir, path,
                         std::strerror(error));
    }
    return fmt::format("run dir '{}' is in use by another fsdp-train run{}; two runs in one dir "
                       "would mix their metrics and checkpoints. Pass another --run-dir, or "
                       "wait for that run to end",
                       run_dir, holder.empty() ? "" : " (" + holder + ")");
  }
  detail::record_holder(fd);
  fd_ = fd;
  return "";
}

inline bool RunDirLock::held_elsewhere(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / kFileName).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

}  // namespace fsdp::tools
