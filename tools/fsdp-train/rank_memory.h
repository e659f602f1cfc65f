#pragma once
// Every rank's memory at the end of training, for the summary table
// (RankMemory, report.h).

#include <torch/optim/optimizer.h>

#include <vector>

#include "fsdp/comm/process_group.h"
#include "fsdp/sharded.h"
#include "report.h"
#include "step_measures.h"

namespace fsdp_train {

// This rank's shards, their gradients and optimizer state as they are now,
// with its peaks over the run; every rank's, in rank order. Collective.
std::vector<RankMemory> gather_rank_memory(fsdp::ProcessGroup& world, const fsdp::UnitModule& model,
                                           const torch::optim::Optimizer& optimizer,
                                           const RunPeaks& peaks);

}  // namespace fsdp_train
