#pragma once
// Two "nodes" on one machine joined by a slow link: two network namespaces
// and a veth pair whose both ends are rate-limited with a token bucket (tc
// tbf). Ranks inside one namespace talk over its loopback at full speed;
// traffic between the namespaces crosses the limited link. Needs root (or
// CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's `ip` and `tc`.
//
// [Note: a shaped veth, not netem]
// netem (delay, loss) is not available on these machines' kernels; tbf is.
// A token bucket on each end's egress shapes each direction to `rate`, with
// a burst of one 64 KiB window, so a collective crossing the link moves at
// the rate and not in a burst the bucket could hide.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace fsdp::bench {

struct ProcessOutcome {
  int exit_code = 0;  // -1 when ended by a signal or the time limit
  std::string log;    // its stdout and stderr
};

// Runs the commands at once, each with stdout and stderr in its own log;
// at `limit` every one still running is killed. Throws when one cannot start.
std::vector<ProcessOutcome> run_processes(const std::vector<std::vector<std::string>>& commands,
                                          std::chrono::seconds limit);

class SlowLinkTestbed {
 public:
  static constexpr const char* kAddress[2] = {"10.78.0.1", "10.78.0.2"};

  // `rate` in tc's syntax, e.g. "1gbit" or "200mbit". Throws naming what
  // failed and that root is needed.
  explicit SlowLinkTestbed(const std::string& rate);
  ~SlowLinkTestbed();
  SlowLinkTestbed(const SlowLinkTestbed&) = delete;
  SlowLinkTestbed& operator=(const SlowLinkTestbed&) = delete;

  // `argv` run inside node `n`'s namespace.
  std::vector<std::string> on_node(int n, const std::vector<std::string>& argv) const;
  // Bytes node `n` has sent over the link so far (its veth end's tx_bytes).
  int64_t bytes_sent(int n) const;
  const std::string& rate() const { return rate_; }

 private:
  void run_or_throw(const std::vector<std::string>& argv) const;
  void remove();

  std::string ip_, tc_, rate_;
  std::string names_[2], links_[2];
  bool created_[2] = {false, false};
};

// "" when this process may build the testbed, else why not.
std::string slowlink_unavailable_reason();

}  // namespace fsdp::bench
