#include "run_dir_lock.h"

#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fsdp_train {
namespace {

// What the holder wrote: "pid 123 on host-a", or "" if it could not be read.
std::string read_holder(int fd) {
  char buffer[256];
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (n <= 0) return "";
  std::string text(buffer, static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

void record_holder(int fd) {
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  const std::string text = fmt::format("pid {} on {}\n", ::getpid(), host);
  if (::ftruncate(fd, 0) == 0) {
    // Informational only: the lock itself is the flock, not this text.
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, text.data(), text.size(), 0);
  }
}

}  // namespace

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::string RunDirLock::acquire(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / kFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fmt::format("cannot open the run dir's lock file '{}': {}; pass a --run-dir in a "
                       "writable place",
                       path, std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = read_holder(fd);
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
  record_holder(fd);
  fd_ = fd;
  return "";
}

}  // namespace fsdp_train
