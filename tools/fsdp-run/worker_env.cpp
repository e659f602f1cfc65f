// Building a worker's environment. The names and meanings are torchrun's, so
// a program written for torchrun (or libfsdp's read_launch_env) needs no
// change. Values we set replace inherited ones: a stale RANK in the caller's
// shell must not leak into the job.

#include "worker_env.h"

#include <cstring>
#include <string_view>
#include <utility>

namespace fsdp_run {

WorkerPlace place_of(const LaunchOptions& opts, int local_rank) {
  WorkerPlace place;
  place.local_rank = local_rank;
  place.rank = opts.node_rank * opts.nproc_per_node + local_rank;
  return place;
}

std::vector<std::string> worker_environment(const LaunchOptions& opts, const WorkerPlace& place,
                                            const AttemptInfo& attempt, char** base) {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(place.rank)},
      {"WORLD_SIZE", std::to_string(opts.world_size())},
      {"LOCAL_RANK", std::to_string(place.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(opts.nproc_per_node)},
      {"GROUP_RANK", std::to_string(opts.node_rank)},
      {"NODE_RANK", std::to_string(opts.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(opts.nnodes)},
      {"MASTER_ADDR", opts.master_addr},
      {"MASTER_PORT", std::to_string(opts.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(opts.max_restarts)},
  };
  if (!opts.comm_timeout_s.empty()) ours.emplace_back("FSDP_COMM_TIMEOUT", opts.comm_timeout_s);
  if (!attempt.progress_file.empty()) {
    ours.emplace_back("FSDP_RUN_PROGRESS_FILE", attempt.progress_file);
  }
  if (!attempt.failure_time.empty()) {
    ours.emplace_back("FSDP_RUN_FAILURE_TIME", attempt.failure_time);
  }
  // Another attempt's (or an outer fsdp-run's) values would mislead the worker.
  const std::vector<std::string> never_inherited = {"FSDP_RUN_PROGRESS_FILE",
                                                    "FSDP_RUN_FAILURE_TIME"};
  auto is_ours = [&](std::string_view entry) {
    const auto names = [&](const std::string& name) {
      return entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
             entry[name.size()] == '=';
    };
    for (const auto& [name, value] : ours) {
      if (names(name)) return true;
    }
    for (const auto& name : never_inherited) {
      if (names(name)) return true;
    }
    return false;
  };

  std::vector<std::string> env;
  for (char** entry = base; entry != nullptr && *entry != nullptr; ++entry) {
    if (!is_ours(*entry)) env.emplace_back(*entry);
  }
  for (const auto& [name, value] : ours) env.push_back(name + "=" + value);
  return env;
}

}  // namespace fsdp_run
