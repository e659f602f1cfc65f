#pragma once
// Durable file output for checkpoints: plain POSIX files with every error
// turned into a c10::Error that names the path and strerror, and the
// write-to-temp + fsync + rename pattern that makes a file appear whole or not
// at all. See [Note: checkpoint commit protocol] in save.cpp. Internal to
// src/checkpoint (and its tests).

#include <cstdint>
#include <memory>
#include <string>

namespace fsdp::ckpt {

// Whether an OutputFile's bytes go through the page cache. See [Note: writing
// around the page cache] in atomic_file.cpp.
enum class PageCache { kUse, kBypass };

// A file opened for writing. Closes (without fsync) on destruction.
class OutputFile {
 public:
  // Creates `path`; fails if it exists unless `truncate_existing`.
  OutputFile(const std::string& path, bool truncate_existing,
             PageCache page_cache = PageCache::kUse);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write_all(const void* data, int64_t nbytes);
  // Bytes written so far (the current offset).
  int64_t offset() const { return offset_; }
  // fsync(2): the bytes are on stable storage when this returns.
  void sync();
  void close();
  const std::string& path() const { return path_; }

 private:
  struct FreeAligned {
    void operator()(char* p) const;
  };
  void stage(const char* data, int64_t nbytes);
  void write_staged_tail();
  void write_at(const char* data, int64_t nbytes, int64_t at);

  std::string path_;
  int fd_ = -1;
  int64_t offset_ = 0;
  // PageCache::kBypass: bytes wait here until a whole buffer can be written;
  // the first of them belongs at file offset offset_ - staged_.
  std::unique_ptr<char, FreeAligned> staging_;
  int64_t staged_ = 0;
  bool tail_unwritten_ = false;  // staged bytes since write_staged_tail()
};

// A file opened for positional reads.
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int64_t size() const { return size_; }
  // Reads exactly `nbytes` at `offset`; returns false (reads nothing useful)
  // if the file ends first. Throws on I/O errors.
  bool read_at(int64_t offset, void* data, int64_t nbytes) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// Writes a file under a temporary name in the same directory
// ("<path>.tmp-<pid>-<n>"); commit() fsyncs it, renames it over `path` and
// fsyncs the directory. Without commit() the temporary is removed.
class AtomicFile {
 public:
  // Fails before creating anything if `path` exists and !overwrite, or if its
  // directory does not exist.
  AtomicFile(const std::string& path, bool overwrite);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  OutputFile& file() { return *file_; }
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_;
  std::string temp_path_;
  std::unique_ptr<OutputFile> file_;
  bool committed_ = false;
};

// write_file_atomic("x.json", text): `text` is in x.json, durably, or x.json
// is untouched.
void write_file_atomic(const std::string& path, const std::string& contents, bool overwrite);

// Reads a whole file; throws naming the path.
std::string read_file(const std::string& path);

// fsync(2) on a directory, so renames and creations inside it are durable.
void fsync_directory(const std::string& dir);

// The directory part of a path ("." for a bare name).
std::string parent_directory(const std::string& path);

// strerror(errno) text for the current errno.
std::string errno_text();

}  // namespace fsdp::ckpt
