#pragma once
// Writing the run dir's files so that a failure is never silent.
//
// [Note: a failed write is an error]
// With the disk full, std::ofstream only sets a flag: unread, metrics.jsonl
// would end mid-line while training went on. So every write to a run output
// checks the stream after flushing and throws naming the file
// and the system's reason, so the run stops with that message (rank 0's exit
// ends the job). The checkpoints written so far stay valid: each is committed
// atomically (see [Note: checkpoint commit protocol]).

#include <ostream>
#include <string>

namespace fsdp_train {

// [Note: a metrics line is written whole or not at all]
// A full disk can take part of a write: the kernel stores what fits and
// fails the rest, and a stream then leaves metrics.jsonl ending mid-record
// ('..."tokens_per_s":8880'), which tools reading it must skip (issue #35).
// So a LineFile writes each line, newline included, with write(2) from one
// buffer, and on any failure cuts the file back to the end of the last whole
// line before it throws: the file holds whole lines or nothing more.
class LineFile {
 public:
  // Creates or truncates `path`. Throws as write_output_file does.
  explicit LineFile(std::string path);
  ~LineFile();
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;

  // Appends `line` and a newline, whole, or throws naming the file and the
  // reason with the file as it was before the call.
  void append_line(const std::string& line);

 private:
  std::string path_;
  int fd_ = -1;
  long long whole_bytes_ = 0;  // the file's size up to its last newline
};

// Replaces `path` with `text`. Throws std::runtime_error naming the file and
// the reason if it cannot be opened or written in full.
void write_output_file(const std::string& path, const std::string& text);

// Flushes `out`, the stream of the output file `path`, and throws as above if
// any write to it has failed.
void flush_or_throw(std::ostream& out, const std::string& path);

}  // namespace fsdp_train
