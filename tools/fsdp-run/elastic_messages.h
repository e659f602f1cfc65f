#pragma once
// The elastic rendezvous's messages as values, and their one-line text
// forms. See [Note: elastic membership] in elastic.h.

#include <cstdint>
#include <optional>
#include <string>

#include "supervisor.h"

namespace fsdp_run {

// One round as node 0 announces it to one node.
struct RoundPlan {
  int round = 0;
  int node_rank = 0;
  int nnodes = 1;
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT of this start
  std::string failure_time;  // FSDP_RUN_FAILURE_TIME; "" on the first start
};

// What one node's workers did in one round, as its agent tells node 0.
struct NodeReport {
  enum class Kind { kOk, kFailed, kNoStart, kInterrupted, kStopped };
  Kind kind = Kind::kOk;
  int exit_code = 0;
  int rank = 0;                 // the worker that failed first
  std::optional<int64_t> step;  // the step it failed in, when its node knows
  std::string how;              // "exited with code 3", ...

  bool is_failure() const { return kind != Kind::kOk && kind != Kind::kStopped; }
};

// This node's workers' `outcome`, `step` read from their progress file.
NodeReport report_of(const JobOutcome& outcome, std::optional<int64_t> step);
// The report as the outcome RestartPolicy judges.
JobOutcome outcome_of(const NodeReport& report);

std::string start_line(const RoundPlan& plan);
std::optional<RoundPlan> parse_start(const std::string& line);
std::string exit_line(int round, const NodeReport& report);
// The round and the report; nullopt when `line` is not a well-formed EXIT.
std::optional<std::pair<int, NodeReport>> parse_exit(const std::string& line);

}  // namespace fsdp_run
