#include "checkpoint/atomic_file.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fsdp::ckpt {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

std::string parent_directory(const std::string& path) {
  auto parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

OutputFile::OutputFile(const std::string& path, bool truncate_existing) : path_(path) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (truncate_existing ? O_TRUNC : O_EXCL);
  fd_ = ::open(path.c_str(), flags, 0644);
  TORCH_CHECK(fd_ >= 0, "fsdp: cannot create '", path, "' for writing: ", errno_text());
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::write_all(const void* data, int64_t nbytes) {
  TORCH_CHECK(fd_ >= 0, "fsdp: write to closed file '", path_, "'");
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::write(fd_, p, static_cast<size_t>(nbytes));
    if (n < 0 && errno == EINTR) continue;
    TORCH_CHECK(n > 0, "fsdp: cannot write ", nbytes, " bytes to '", path_, "' at offset ", offset_, ": ",
                n < 0 ? errno_text() : std::string("no progress"));
    p += n;
    nbytes -= n;
    offset_ += n;
  }
}

void OutputFile::sync() {
  TORCH_CHECK(fd_ >= 0, "fsdp: fsync of closed file '", path_, "'");
  TORCH_CHECK(::fsync(fd_) == 0, "fsdp: cannot fsync '", path_, "': ", errno_text());
}

void OutputFile::close() {
  if (fd_ < 0) return;
  int rc = ::close(fd_);
  fd_ = -1;
  TORCH_CHECK(rc == 0, "fsdp: cannot close '", path_, "': ", errno_text());
}

InputFile::InputFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd_ >= 0, "fsdp: cannot open '", path, "' for reading: ", errno_text());
  struct stat st {};
  TORCH_CHECK(::fstat(fd_, &st) == 0, "fsdp: cannot stat '", path, "': ", errno_text());
  TORCH_CHECK(S_ISREG(st.st_mode), "fsdp: '", path, "' is not a regular file");
  size_ = static_cast<int64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool InputFile::read_at(int64_t offset, void* data, int64_t nbytes) const {
  if (offset < 0 || nbytes < 0 || offset + nbytes > size_) return false;
  char* p = static_cast<char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::pread(fd_, p, static_cast<size_t>(nbytes), offset);
    if (n < 0 && errno == EINTR) continue;
    TORCH_CHECK(n >= 0, "fsdp: cannot read '", path_, "' at offset ", offset, ": ", errno_text());
    if (n == 0) return false;  // shrank under us
    p += n;
    nbytes -= n;
    offset += n;
  }
  return true;
}

namespace {
std::atomic<int64_t> g_temp_counter{0};
}

AtomicFile::AtomicFile(const std::string& path, bool overwrite) : path_(path) {
  std::string dir = parent_directory(path);
  std::error_code ec;
  TORCH_CHECK(fs::is_directory(dir, ec), "fsdp: cannot write '", path, "': directory '", dir,
              "' does not exist");
  if (fs::exists(path, ec)) {
    TORCH_CHECK(overwrite, "fsdp: '", path, "' already exists; pass overwrite (--overwrite) to replace it");
    TORCH_CHECK(!fs::is_directory(path, ec), "fsdp: cannot replace '", path,
                "': it is a directory, not a file");
  }
  temp_path_ = path + ".tmp-" + std::to_string(::getpid()) + "-" +
               std::to_string(g_temp_counter.fetch_add(1));
  file_ = std::make_unique<OutputFile>(temp_path_, /*truncate_existing=*/false);
}

AtomicFile::~AtomicFile() {
  file_.reset();
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::commit() {
  TORCH_CHECK(!committed_, "fsdp: AtomicFile::commit called twice for '", path_, "'");
  file_->sync();
  file_->close();
  TORCH_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "fsdp: cannot rename '", temp_path_,
              "' to '", path_, "': ", errno_text());
  committed_ = true;
  fsync_directory(parent_directory(path_));
}

void write_file_atomic(const std::string& path, const std::string& contents, bool overwrite) {
  AtomicFile file(path, overwrite);
  file.file().write_all(contents.data(), static_cast<int64_t>(contents.size()));
  file.commit();
}

std::string read_file(const std::string& path) {
  InputFile in(path);
  std::string text(static_cast<size_t>(in.size()), '\0');
  TORCH_CHECK(in.read_at(0, text.data(), in.size()), "fsdp: cannot read all of '", path, "'");
  return text;
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "fsdp: cannot open directory '", dir, "' to fsync it: ", errno_text());
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  errno = saved;
  TORCH_CHECK(rc == 0, "fsdp: cannot fsync directory '", dir, "': ", errno_text());
}

}  // namespace fsdp::ckpt
