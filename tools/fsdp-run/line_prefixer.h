#pragma once
// Turns a worker's raw output bytes into whole, prefixed lines.
//
// [Note: output lines]
// Workers write into pipes; the launcher reads them and writes complete lines
// ("[rank 3] loss 2.31\n") to its own stdout/stderr with one write() each, from
// one thread, so lines of different ranks never mix. Rules:
//   - '\n' ends a line; so does '\r' (progress bars redraw with '\r'), and
//     "\r\n" counts as one end.
//   - A line longer than kMaxLine bytes is cut every kMaxLine bytes (a '\n'
//     added at each cut), so a rank writing no newlines cannot hold its output
//     back for ever or grow our buffer without bound.
//   - At end of stream an unterminated last line is written with a '\n' added.

#include <cstddef>
#include <string>
#include <string_view>

namespace fsdp_run {

class LinePrefixer {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  explicit LinePrefixer(std::string prefix) : prefix_(std::move(prefix)) {}

  // Appends every line completed by `data` (prefixed) to `out`; keeps the tail.
  void feed(std::string_view data, std::string& out);

  // Appends the held-back partial line, if any, with a '\n'.
  void finish(std::string& out);

 private:
  void emit(std::string_view line, std::string& out);

  std::string prefix_;
  std::string pending_;    // bytes of the current, unfinished line
  bool after_cr_ = false;  // the last line ended with '\r' (a '\n' may follow)
};

// Writes all of `data` to `fd`, retrying short writes and EINTR. Returns false
// if the fd is gone (EPIPE, closed terminal); the caller stops writing to it.
bool write_all(int fd, std::string_view data);

// Writes "fsdp-run: <message>\n" to stderr in one write: the launcher's own
// lines, among the workers' prefixed ones.
void say(const std::string& message);

}  // namespace fsdp_run
