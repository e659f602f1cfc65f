#pragma once
// The environment each worker starts with: the launcher's own, plus the
// torchrun variables that tell the worker where it sits in the job.

#include <string>
#include <vector>

#include "launch_options.h"

namespace fsdp_run {

// Where one local worker sits. global rank = node_rank * nproc_per_node + local_rank.
struct WorkerPlace {
  int rank = 0;
  int local_rank = 0;
};

WorkerPlace place_of(const LaunchOptions& opts, int local_rank);

// Which start of the group this is. See [Note: restarts] in restarts.h.
struct AttemptInfo {
  int restart_count = 0;      // TORCHELASTIC_RESTART_COUNT: 0 for the first start
  std::string progress_file;  // FSDP_RUN_PROGRESS_FILE; "" = not set (no restarts asked)
  std::string failure_time;   // FSDP_RUN_FAILURE_TIME, epoch seconds; "" on the first start
};

// "NAME=value" strings: every variable of `base` (the launcher's environ)
// except those we set, then RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, NODE_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, and the attempt's
// FSDP_RUN_PROGRESS_FILE and FSDP_RUN_FAILURE_TIME when it has them (an
// inherited one never leaks through).
std::vector<std::string> worker_environment(const LaunchOptions& opts, const WorkerPlace& place,
                                            const AttemptInfo& attempt, char** base);

}  // namespace fsdp_run
