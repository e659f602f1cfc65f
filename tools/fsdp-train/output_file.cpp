#include "output_file.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace fsdp_train {
namespace {

[[noreturn]] void throw_write_error(const std::string& path, int error) {
  throw std::runtime_error(fmt::format(
      "writing '{}' failed: {}; free space there (or pass another --run-dir) and resume from "
      "the last checkpoint",
      path, error != 0 ? std::strerror(error) : "the stream reported an error"));
}

}  // namespace

void flush_or_throw(std::ostream& out, const std::string& path) {
  errno = 0;
  out.flush();
  if (!out) throw_write_error(path, errno);
}

LineFile::LineFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_write_error(path_, errno);
}

LineFile::~LineFile() {
  if (fd_ >= 0) ::close(fd_);
}

// See [Note: a metrics line is written whole or not at all]
void LineFile::append_line(const std::string& line) {
  const std::string whole = line + '\n';
  size_t done = 0;
  while (done < whole.size()) {
    const ssize_t n = ::write(fd_, whole.data() + done, whole.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int error = n < 0 ? errno : ENOSPC;  // a write of 0 bytes stored nothing
    // Best effort: a device such as /dev/full cannot be truncated, and kept nothing.
    if (done > 0 && ::ftruncate(fd_, whole_bytes_) == 0) ::lseek(fd_, whole_bytes_, SEEK_SET);
    throw_write_error(path_, error);
  }
  whole_bytes_ += static_cast<long long>(whole.size());
}

void write_output_file(const std::string& path, const std::string& text) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw_write_error(path, errno);
  out << text;
  flush_or_throw(out, path);
  out.close();
  if (!out) throw_write_error(path, errno);
}

}  // namespace fsdp_train
