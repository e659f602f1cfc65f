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

// "NAME=value" strings: every variable of `base` (the launcher's environ)
// except those we set, then RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, NODE_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
std::vector<std::string> worker_environment(const LaunchOptions& opts, const WorkerPlace& place,
                                            char** base);

}  // namespace fsdp_run
