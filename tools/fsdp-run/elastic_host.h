#pragma once
// Node 0's side of the elastic rendezvous: the agents' connections, which
// of them are in the round, and what each reported. See [Note: elastic
// membership] in elastic.h.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "elastic_messages.h"
#include "launch_options.h"
#include "line_channel.h"
#include "supervisor.h"

namespace fsdp_run {

class RendezvousHost : public GroupWatcher {
 public:
  // Listens at opts.master_port; nullptr with `error` set when it cannot.
  static std::unique_ptr<RendezvousHost> open(const LaunchOptions& opts, std::string& error);
  ~RendezvousHost() override;

  // Waits until a round can start and sends START to its other nodes.
  // Returns node 0's plan, or nullopt when none could form (the reason in
  // `error`; a stop signal for fsdp-run in `signal`).
  std::optional<RoundPlan> form_round(int restart_count, const std::string& failure_time,
                                      std::string& error, int& signal);

  // During a round: the other nodes' connections, and their news.
  std::vector<int> fds() const override;
  std::string check() override;

  // After node 0's workers finished: stops the round elsewhere when
  // `failed`, then waits for every node's report (a node silent past the
  // grace period counts as lost). A stop signal for fsdp-run meanwhile
  // fails the round and is kept in interrupted().
  void finish_round(bool failed);
  int interrupted() const { return interrupted_; }
  // The first failure elsewhere in the round: a failed node's report, or a
  // lost node as a failure of its first rank.
  const std::optional<NodeReport>& remote_failure() const { return remote_failure_; }
  // Tells every connected agent the job is over.
  void end_job(int exit_code, const std::string& why);

 private:
  struct Peer {
    std::unique_ptr<LineChannel> channel;
    int node_id = -1;                  // from its JOIN; -1 before
    int node_rank = -1;                // in the current round; -1 when not in it
    bool joined = false;               // waiting for the next round
    bool refused = false;              // to be dropped: a bad JOIN, or silent past a stop
    std::optional<NodeReport> report;  // its EXIT of the current round
  };

  RendezvousHost(const LaunchOptions& opts, int listen_fd) : opts_(opts), listen_fd_(listen_fd) {}
  void take_input(int timeout_ms, int extra_fd);
  void stop_unreported();
  void on_line(Peer& peer, const std::string& line);
  void on_join(Peer& peer, const std::string& line);
  void on_lost(const Peer& peer);
  void drop_closed_peers();
  int joined_count() const;
  bool round_settled() const;
  std::optional<RoundPlan> start_round(int restart_count, const std::string& failure_time);

  const LaunchOptions& opts_;
  int listen_fd_;
  std::vector<Peer> peers_;
  int round_ = 0;
  std::optional<NodeReport> remote_failure_;
  std::string stop_reason_;  // why check() stopped the round; said once
  bool stops_sent_ = false;
  int interrupted_ = 0;
};

}  // namespace fsdp_run
