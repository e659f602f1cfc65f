// See [Note: elastic membership] in elastic.h.

#include "elastic_agent.h"

#include <poll.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "restarts.h"
#include "signal_pipe.h"

namespace fsdp_run {
namespace {

using Clock = std::chrono::steady_clock;

// Waits up to `timeout_ms` for `fd` (or -1: none) or a signal. Returns a stop
// signal for fsdp-run, or 0.
int wait_for(int fd, int timeout_ms) {
  std::vector<pollfd> fds = {{SignalPipe::read_fd(), POLLIN, 0}};
  if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  poll(fds.data(), fds.size(), timeout_ms);
  return pending_stop_signal();
}

}  // namespace

std::unique_ptr<RendezvousAgent> RendezvousAgent::connect(const LaunchOptions& opts,
                                                          std::string& error, int& signal) {
  const auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(opts.rdzv_timeout_s));
  while (true) {
    if (auto channel = connect_to(opts.master_addr, opts.master_port, error)) {
      channel->send(fmt::format("JOIN {} {}", opts.node_rank, opts.nproc_per_node));
      return std::unique_ptr<RendezvousAgent>(new RendezvousAgent(opts, std::move(channel)));
    }
    if (Clock::now() >= give_up) {
      error = fmt::format(
          "node 0's rendezvous did not answer within --rdzv-timeout {} s ({}); "
          "start fsdp-run with --node-rank 0 on {} with the same --master-port",
          opts.rdzv_timeout_s, error, opts.master_addr);
      return nullptr;
    }
    signal = wait_for(-1, 200);
    if (signal != 0) return nullptr;
  }
}

std::variant<RoundPlan, JobEnded> RendezvousAgent::next_round(int& signal) {
  if (ended_) return *ended_;
  while (true) {
    signal = wait_for(channel_->fd(), -1);
    if (signal != 0) return JobEnded{128 + signal, ""};
    for (const std::string& line : channel_->receive()) {
      if (auto plan = parse_start(line)) return *plan;
      std::string ignored;  // a STOP for a round that is over
      if (auto ended = take_line(line, ignored)) return *ended;
    }
    if (channel_->closed()) return host_lost();
  }
}

void RendezvousAgent::report(int round, const NodeReport& report) {
  channel_->send(exit_line(round, report));
}

std::vector<int> RendezvousAgent::fds() const {
  if (channel_->closed()) return {};
  return {channel_->fd()};
}

std::string RendezvousAgent::check() {
  std::string stop_reason;
  for (const std::string& line : channel_->receive()) {
    if (auto ended = take_line(line, stop_reason)) ended_ = ended;
  }
  if (channel_->closed() && !ended_) {
    ended_ = host_lost();
    stop_reason = ended_->why;
  }
  return stop_reason;
}

// An END ends the job; a STOP, the round (its reason in `stop_reason`).
std::optional<JobEnded> RendezvousAgent::take_line(const std::string& line,
                                                   std::string& stop_reason) {
  const std::vector<std::string> f = split_fields(line, 2);
  if (f.size() == 3 && f[0] == "STOP") {
    stop_reason = fmt::format("node 0 stopped round {}: {}", f[1], f[2]);
  } else if (f.size() >= 2 && f[0] == "END") {
    const std::string why = f.size() == 3 ? f[2] : "";
    stop_reason = "node 0 ended the job" + (why.empty() ? std::string() : ": " + why);
    return JobEnded{std::atoi(f[1].c_str()), why};
  }
  return std::nullopt;
}

JobEnded RendezvousAgent::host_lost() const {
  return JobEnded{1, fmt::format("lost the connection to node 0 ({}:{}), which hosts the "
                                 "rendezvous; an elastic job cannot go on without node 0",
                                 opts_.master_addr, opts_.master_port)};
}

}  // namespace fsdp_run
