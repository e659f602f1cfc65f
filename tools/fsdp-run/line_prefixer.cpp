// See [Note: output lines] in line_prefixer.h.

#include "line_prefixer.h"

#include <unistd.h>

#include <cerrno>

namespace fsdp_run {

void LinePrefixer::emit(std::string_view line, std::string& out) {
  out += prefix_;
  out += line;
}

void LinePrefixer::feed(std::string_view data, std::string& out) {
  while (!data.empty()) {
    // "\r\n" split as "...\r" | "\n...": the '\r' already ended the line.
    if (after_cr_ && pending_.empty() && data.front() == '\n') {
      out += '\n';
      data.remove_prefix(1);
      after_cr_ = false;
      continue;
    }
    after_cr_ = false;
    size_t end = data.find_first_of("\r\n");
    if (end == std::string_view::npos) {
      pending_.append(data);
      data = {};
      size_t cut = 0;
      for (; pending_.size() - cut >= kMaxLine; cut += kMaxLine) {
        emit(std::string_view(pending_).substr(cut, kMaxLine), out);
        out += '\n';
      }
      pending_.erase(0, cut);
      break;
    }
    size_t stop = end + 1;  // a '\n' right after a '\r' is handled at the loop's top
    if (pending_.empty()) {
      emit(data.substr(0, stop), out);
    } else {
      pending_.append(data.substr(0, stop));
      emit(pending_, out);
      pending_.clear();
    }
    after_cr_ = data[stop - 1] == '\r';
    data.remove_prefix(stop);
  }
}

void LinePrefixer::finish(std::string& out) {
  if (pending_.empty()) return;
  emit(pending_, out);
  out += '\n';
  pending_.clear();
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        // A non-blocking stdout inherited from our caller: wait until it drains.
        usleep(1000);
        continue;
      }
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void say(const std::string& message) { write_all(STDERR_FILENO, "fsdp-run: " + message + "\n"); }

}  // namespace fsdp_run
