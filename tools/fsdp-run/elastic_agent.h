#pragma once
// A node's side of the elastic rendezvous, on every node but node 0: its
// connection to node 0, and what node 0 says over it. See [Note: elastic
// membership] in elastic.h.

#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "elastic_messages.h"
#include "launch_options.h"
#include "line_channel.h"
#include "supervisor.h"

namespace fsdp_run {

// The job is over, as node 0 said (or as losing node 0 means).
struct JobEnded {
  int exit_code = 0;
  std::string why;  // "" after a success
};

class RendezvousAgent : public GroupWatcher {
 public:
  // Connects to node 0, retrying until --rdzv-timeout, and joins the job.
  // nullptr with `error` set, or with `signal` set when fsdp-run was told to
  // stop meanwhile.
  static std::unique_ptr<RendezvousAgent> connect(const LaunchOptions& opts, std::string& error,
                                                  int& signal);

  // Waits for node 0 to start the next round or end the job. `signal` is
  // set (and the answer meaningless) when fsdp-run was told to stop
  // meanwhile.
  std::variant<RoundPlan, JobEnded> next_round(int& signal);
  // What this node's workers did in `round`; also joins the next round.
  void report(int round, const NodeReport& report);

  // During a round: node 0's connection, and its news.
  std::vector<int> fds() const override;
  std::string check() override;
  // Set when node 0 ended the job, or was lost, during a round.
  const std::optional<JobEnded>& ended() const { return ended_; }

 private:
  RendezvousAgent(const LaunchOptions& opts, std::unique_ptr<LineChannel> channel)
      : opts_(opts), channel_(std::move(channel)) {}
  std::optional<JobEnded> take_line(const std::string& line, std::string& stop_reason);
  JobEnded host_lost() const;

  const LaunchOptions& opts_;
  std::unique_ptr<LineChannel> channel_;
  std::optional<JobEnded> ended_;
};

}  // namespace fsdp_run
