// Picks the local address a launched job's Gloo groups bind to.

#include "comm/gloo_address.h"

#include <c10/util/Exception.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace fsdp::comm {

// [Note: the address Gloo binds to]
// A Gloo device listens on one local address and publishes it through the
// store; every peer connects to the published address. GroupOptions::hostname
// defaults to 127.0.0.1, which every rank on one host can reach and no rank on
// another host can. (The TCPStore is not affected: its server listens on all
// addresses, and clients connect to MASTER_ADDR.) So for a launched job,
// init_process_group_from_env() chooses, in this order:
//   1. GroupOptions::hostname, if the caller set it to something other than
//      127.0.0.1;
//   2. the IPv4 address of the interface named by GLOO_SOCKET_IFNAME, the
//      variable torchrun users already set for this (one interface name);
//   3. if MASTER_ADDR resolves to a loopback address, 127.0.0.1: one host;
//   4. otherwise the source address of this host's route to MASTER_ADDR
//      (connect() on a UDP socket sends nothing, it only picks the route;
//      getsockname() then reads the address). Rank 0 reached the store over
//      that network already, so its peers can reach this address over it too.
// A multi-homed host whose route to the master is not the network the ranks
// share sets GLOO_SOCKET_IFNAME.

namespace {

constexpr const char* kDefaultHostname = "127.0.0.1";

std::string address_text(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {0};
  const void* raw = address->sa_family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(address)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  TORCH_CHECK(::inet_ntop(address->sa_family, raw, text, sizeof(text)) != nullptr,
              "fsdp: inet_ntop failed: ", std::strerror(errno));
  return text;
}

bool is_loopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr);
    return (ip >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  }
  return false;
}

std::string interface_address(const std::string& interface) {
  ifaddrs* list = nullptr;
  TORCH_CHECK(::getifaddrs(&list) == 0, "fsdp: GLOO_SOCKET_IFNAME=", interface,
              ": cannot list network interfaces: ", std::strerror(errno));
  std::string found;
  for (ifaddrs* entry = list; entry != nullptr && found.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr != nullptr && entry->ifa_addr->sa_family == AF_INET &&
        interface == entry->ifa_name) {
      found = address_text(entry->ifa_addr);
    }
  }
  ::freeifaddrs(list);
  TORCH_CHECK(!found.empty(), "fsdp: GLOO_SOCKET_IFNAME=", interface,
              " names no interface with an IPv4 address on this host; set it to one "
              "interface (see `ip -4 addr`), or unset it to use the route to MASTER_ADDR");
  return found;
}

std::string route_source_address(const std::string& master_addr, int master_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* resolved = nullptr;
  const std::string port = std::to_string(master_port);
  const int rc = ::getaddrinfo(master_addr.c_str(), port.c_str(), &hints, &resolved);
  TORCH_CHECK(rc == 0 && resolved != nullptr, "fsdp: cannot resolve MASTER_ADDR=", master_addr,
              " to pick the address Gloo binds to: ", ::gai_strerror(rc),
              "; set GLOO_SOCKET_IFNAME to the interface the ranks share");
  if (is_loopback(resolved->ai_addr)) {
    ::freeaddrinfo(resolved);
    return kDefaultHostname;
  }
  const int fd = ::socket(resolved->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  const bool ok = fd >= 0 && ::connect(fd, resolved->ai_addr, resolved->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(resolved);
  TORCH_CHECK(ok, "fsdp: no route from this host to MASTER_ADDR=", master_addr, " (",
              std::strerror(error), "), so no address for Gloo to bind to; set "
              "GLOO_SOCKET_IFNAME to the interface the ranks share");
  return address_text(reinterpret_cast<const sockaddr*>(&local));
}

}  // namespace

std::string gloo_hostname_for_job(const std::string& configured, const std::string& master_addr,
                                  int master_port) {
  if (configured != kDefaultHostname) return configured;
  const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
  if (interface != nullptr && *interface != '\0') {
    TORCH_CHECK(std::strchr(interface, ',') == nullptr, "fsdp: GLOO_SOCKET_IFNAME=", interface,
                " lists several interfaces; libfsdp binds Gloo to one, name one of them");
    return interface_address(interface);
  }
  return route_source_address(master_addr, master_port);
}

}  // namespace fsdp::comm
