#include "line_channel.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace fsdp_run {

LineChannel::~LineChannel() {
  if (fd_ >= 0) close(fd_);
}

bool LineChannel::send(const std::string& line) {
  const std::string data = line + "\n";
  size_t sent = 0;
  while (!closed_ && sent < data.size()) {
    // MSG_NOSIGNAL: a peer that is gone is an answer, not a SIGPIPE.
    const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) closed_ = true;
    if (n > 0) sent += static_cast<size_t>(n);
  }
  return !closed_;
}

std::vector<std::string> LineChannel::receive() {
  std::vector<std::string> lines;
  if (closed_) return lines;
  char buffer[4096];
  const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return lines;
  if (n <= 0) {
    closed_ = true;
    return lines;
  }
  partial_.append(buffer, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t end = partial_.find('\n'); end != std::string::npos;
       end = partial_.find('\n', start)) {
    lines.push_back(partial_.substr(start, end - start));
    start = end + 1;
  }
  partial_.erase(0, start);
  return lines;
}

int listen_on(int port, std::string& error) {
  // Non-blocking: accept_from() takes every waiting connection and returns.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = fmt::format("socket(): {}", std::strerror(errno));
    return -1;
  }
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0) {
    error = fmt::format("cannot listen on port {}: {}", port, std::strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

std::unique_ptr<LineChannel> connect_to(const std::string& host, int port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    error = fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc));
    return nullptr;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  if (!connected)
    error = fmt::format("cannot connect to {}:{}: {}", host, port, std::strerror(errno));
  freeaddrinfo(found);
  if (!connected) {
    if (fd >= 0) close(fd);
    return nullptr;
  }
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  return std::make_unique<LineChannel>(fd);
}

std::unique_ptr<LineChannel> accept_from(int listen_fd) {
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return nullptr;
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  return std::make_unique<LineChannel>(fd);
}

std::vector<std::string> split_fields(const std::string& line, size_t fields) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (parts.size() < fields && start <= line.size()) {
    const size_t space = line.find(' ', start);
    if (space == std::string::npos) {
      parts.push_back(line.substr(start));
      return parts;
    }
    parts.push_back(line.substr(start, space - start));
    start = space + 1;
  }
  if (start <= line.size()) parts.push_back(line.substr(start));
  return parts;
}

}  // namespace fsdp_run
