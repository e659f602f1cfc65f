#pragma once
// The local address a Gloo group of a launched job binds to.
// See [Note: the address Gloo binds to].

#include <string>

namespace fsdp::comm {

// The address for GroupOptions::hostname when a group is built from the
// launcher's environment: `configured` if the caller changed it from the
// default 127.0.0.1; else the IPv4 address of GLOO_SOCKET_IFNAME if that is
// set; else, when `master_addr` is not a loopback address, the local address
// the kernel routes to it from; else 127.0.0.1. Throws c10::Error saying what
// could not be resolved and how to choose the address by hand.
std::string gloo_hostname_for_job(const std::string& configured, const std::string& master_addr,
                                  int master_port);

}  // namespace fsdp::comm
