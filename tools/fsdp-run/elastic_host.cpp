// See [Note: elastic membership] in elastic.h.

#include "elastic_host.h"

#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "line_prefixer.h"
#include "restarts.h"
#include "signal_pipe.h"

namespace fsdp_run {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

int ms_until(Clock::time_point deadline) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60'000));
}

}  // namespace

std::unique_ptr<RendezvousHost> RendezvousHost::open(const LaunchOptions& opts,
                                                     std::string& error) {
  const int fd = listen_on(opts.master_port, error);
  if (fd < 0) return nullptr;
  return std::unique_ptr<RendezvousHost>(new RendezvousHost(opts, fd));
}

RendezvousHost::~RendezvousHost() { close(listen_fd_); }

// Reads whatever has arrived within `timeout_ms` (also waking for
// `extra_fd`, when given): new agents, their lines, lost connections.
void RendezvousHost::take_input(int timeout_ms, int extra_fd) {
  std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
  for (const Peer& peer : peers_) fds.push_back({peer.channel->fd(), POLLIN, 0});
  if (extra_fd >= 0) fds.push_back({extra_fd, POLLIN, 0});
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (fds[i + 1].revents == 0) continue;
    Peer& peer = peers_[i];
    for (const std::string& line : peer.channel->receive()) on_line(peer, line);
    if (peer.channel->closed()) on_lost(peer);
  }
  if (fds[0].revents != 0) {
    while (auto channel = accept_from(listen_fd_)) {
      Peer peer;
      peer.channel = std::move(channel);
      peers_.push_back(std::move(peer));
    }
  }
  drop_closed_peers();
}

void RendezvousHost::on_line(Peer& peer, const std::string& line) {
  if (line.rfind("JOIN ", 0) == 0) {
    on_join(peer, line);
    return;
  }
  const auto exit = parse_exit(line);
  if (!exit) {
    say(fmt::format("node {} sent '{}', which is not a rendezvous message; ignored", peer.node_id,
                    line));
    return;
  }
  if (exit->first != round_ || peer.node_rank < 0) return;  // an earlier round's
  peer.report = exit->second;
  peer.joined = true;  // a node that reported takes part in the next round
  if (exit->second.is_failure() && !remote_failure_) remote_failure_ = exit->second;
}

// A node joins with its id and worker count; both must fit the job.
void RendezvousHost::on_join(Peer& peer, const std::string& line) {
  const std::vector<std::string> f = split_fields(line, 2);
  const int id = f.size() >= 2 ? std::atoi(f[1].c_str()) : -1;
  const int nproc = f.size() >= 3 ? std::atoi(f[2].c_str()) : -1;
  std::string refusal;
  const bool taken = id == 0 || std::any_of(peers_.begin(), peers_.end(), [&](const Peer& other) {
                       return &other != &peer && other.node_id == id && !other.channel->closed();
                     });
  if (nproc != opts_.nproc_per_node) {
    refusal = fmt::format(
        "node {} runs {} worker(s) but node 0 runs {}; give every node the same "
        "--nproc-per-node",
        id, nproc, opts_.nproc_per_node);
  } else if (taken || id < 0 || id >= opts_.nnodes) {
    refusal = fmt::format(
        "--node-rank {} is taken or outside 1..{}; give each node its own id "
        "(node 0 hosts the rendezvous)",
        id, opts_.nnodes - 1);
  }
  if (!refusal.empty()) {
    peer.channel->send(fmt::format("END 2 {}", refusal));
    say(fmt::format("refused a node: {}", refusal));
    peer.node_id = -1;
    peer.refused = true;
    return;
  }
  peer.node_id = id;
  peer.joined = true;
}

// A connection that closed during a round is a lost node: a failure of
// the round, unless the node had already reported.
void RendezvousHost::on_lost(const Peer& peer) {
  if (peer.node_rank < 0 || peer.report || remote_failure_) return;
  NodeReport lost;
  lost.kind = NodeReport::Kind::kFailed;
  lost.exit_code = 1;
  lost.rank = peer.node_rank * opts_.nproc_per_node;
  lost.how = fmt::format(
      "was lost with node {}: its fsdp-run's connection closed (the agent "
      "was killed or its machine is gone)",
      peer.node_id);
  remote_failure_ = lost;
}

void RendezvousHost::drop_closed_peers() {
  peers_.erase(std::remove_if(peers_.begin(), peers_.end(),
                              [](const Peer& p) { return p.refused || p.channel->closed(); }),
               peers_.end());
}

int RendezvousHost::joined_count() const {
  return static_cast<int>(
      std::count_if(peers_.begin(), peers_.end(), [](const Peer& p) { return p.joined; }));
}

std::optional<RoundPlan> RendezvousHost::form_round(int restart_count,
                                                    const std::string& failure_time,
                                                    std::string& error, int& signal) {
  const auto opened = Clock::now();
  const auto last_call = opened + seconds(opts_.rdzv_last_call_s);
  const auto give_up = opened + seconds(opts_.rdzv_timeout_s);
  while (true) {
    const int nodes = 1 + joined_count();
    if (nodes >= opts_.nnodes || (nodes >= opts_.min_nodes && Clock::now() >= last_call)) {
      return start_round(restart_count, failure_time);
    }
    if (Clock::now() >= give_up) {
      error = fmt::format(
          "only {} node(s) joined within --rdzv-timeout {} s, and the job needs at least {} "
          "(--nnodes {}:{}); start fsdp-run on the missing nodes with --master-addr naming "
          "this node and --master-port {}",
          nodes, opts_.rdzv_timeout_s, opts_.min_nodes, opts_.min_nodes, opts_.nnodes,
          opts_.master_port);
      end_job(1, error);
      return std::nullopt;
    }
    take_input(ms_until(nodes >= opts_.min_nodes ? last_call : give_up), SignalPipe::read_fd());
    signal = pending_stop_signal();
    if (signal != 0) {
      end_job(128 + signal, "node 0's fsdp-run was told to stop; the job ends");
      return std::nullopt;
    }
  }
}

// The joined nodes in the order of their ids, after node 0.
std::optional<RoundPlan> RendezvousHost::start_round(int restart_count,
                                                     const std::string& failure_time) {
  std::stable_sort(peers_.begin(), peers_.end(),
                   [](const Peer& a, const Peer& b) { return a.node_id < b.node_id; });
  ++round_;
  remote_failure_.reset();
  stop_reason_.clear();
  stops_sent_ = false;
  RoundPlan plan{round_, 0, 1 + joined_count(), restart_count, failure_time};
  int next_rank = 1;
  for (Peer& peer : peers_) {
    peer.report.reset();
    peer.node_rank = peer.joined ? next_rank++ : -1;
    if (!peer.joined) continue;
    peer.joined = false;
    RoundPlan theirs = plan;
    theirs.node_rank = peer.node_rank;
    peer.channel->send(start_line(theirs));
  }
  say(fmt::format("round {}: {} node(s), world size {}", round_, plan.nnodes,
                  plan.nnodes * opts_.nproc_per_node));
  return plan;
}

std::vector<int> RendezvousHost::fds() const {
  std::vector<int> fds = {listen_fd_};
  for (const Peer& peer : peers_) fds.push_back(peer.channel->fd());
  return fds;
}

std::string RendezvousHost::check() {
  take_input(0, -1);
  if (!remote_failure_ || !stop_reason_.empty()) return "";
  stop_reason_ = fmt::format("rank {} {}", remote_failure_->rank, remote_failure_->how);
  return stop_reason_;
}

bool RendezvousHost::round_settled() const {
  return std::all_of(peers_.begin(), peers_.end(),
                     [](const Peer& p) { return p.node_rank < 0 || p.report.has_value(); });
}

void RendezvousHost::stop_unreported() {
  if (stops_sent_) return;
  stops_sent_ = true;
  for (Peer& peer : peers_) {
    if (peer.node_rank >= 0 && !peer.report) {
      peer.channel->send(fmt::format("STOP {} the round failed", round_));
    }
  }
}

void RendezvousHost::finish_round(bool failed) {
  // A failed round's nodes are stopping their workers: the grace period,
  // and time to report. A healthy one's are finishing as node 0's did.
  const auto deadline = Clock::now() + seconds(opts_.grace_period_s + 30);
  while (true) {
    failed = failed || remote_failure_.has_value() || interrupted_ != 0;
    if (failed) stop_unreported();
    if (round_settled() || (failed && Clock::now() >= deadline)) break;
    take_input(failed ? ms_until(deadline) : 60'000, SignalPipe::read_fd());
    if (interrupted_ == 0) interrupted_ = pending_stop_signal();
  }
  for (Peer& peer : peers_) {
    if (peer.node_rank < 0 || peer.report) continue;
    say(fmt::format("node {} did not report within {} s of the stop; counting it as lost",
                    peer.node_id, opts_.grace_period_s + 30));
    on_lost(peer);
    peer.refused = true;  // dropped: it takes no part in the next round
  }
  drop_closed_peers();
}

void RendezvousHost::end_job(int exit_code, const std::string& why) {
  for (Peer& peer : peers_) peer.channel->send(fmt::format("END {} {}", exit_code, why));
}

}  // namespace fsdp_run
