#pragma once
// One TCP connection between two fsdp-run agents, carrying text lines: the
// elastic rendezvous's messages (elastic.h). Reads happen only when poll()
// says the socket is readable, so they never block; writes are a few dozen
// bytes and go out at once.

#include <memory>
#include <string>
#include <vector>

namespace fsdp_run {

class LineChannel {
 public:
  explicit LineChannel(int fd) : fd_(fd) {}
  ~LineChannel();
  LineChannel(const LineChannel&) = delete;
  LineChannel& operator=(const LineChannel&) = delete;

  int fd() const { return fd_; }
  // Sends `line` and a newline. False when the peer is gone.
  bool send(const std::string& line);
  // One read of what has arrived: the complete lines in it. At end of
  // stream or on an error, closed() becomes true.
  std::vector<std::string> receive();
  bool closed() const { return closed_; }

 private:
  int fd_;
  bool closed_ = false;
  std::string partial_;  // the start of a line whose end has not arrived
};

// A listening socket on every address at `port` (SO_REUSEADDR). Returns the
// fd, or -1 with `error` set.
int listen_on(int port, std::string& error);

// A connection to host:port, or nullptr with `error` set (refused, unknown
// host...). One attempt.
std::unique_ptr<LineChannel> connect_to(const std::string& host, int port, std::string& error);

// The next connection waiting on `listen_fd`, or nullptr.
std::unique_ptr<LineChannel> accept_from(int listen_fd);

// `line` split at its first `fields` spaces: fields words, then the rest
// (which may hold spaces) as the last element. Fewer elements when the line
// has fewer words.
std::vector<std::string> split_fields(const std::string& line, size_t fields);

}  // namespace fsdp_run
