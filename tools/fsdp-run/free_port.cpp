// Binding to port 0 makes the kernel choose a free port; getsockname tells us
// which. We close the socket before the workers start so rank 0 can bind it.

#include "free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fsdp_run {

int pick_free_port(std::string& error) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket(): ") + std::strerror(errno);
    return 0;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    error = std::string("bind(127.0.0.1:0): ") + std::strerror(errno);
  } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    error = std::string("getsockname(): ") + std::strerror(errno);
  } else {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace fsdp_run
