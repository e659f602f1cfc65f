#pragma once
// <run dir>/config.json, written by rank 0 at the start of a run: what the
// checkpoint records (checkpoint_extras), plus what this run chose beyond it
// (strategy, precision, compression, the batch split, launcher, resume).

#include <cstdint>
#include <string>

#include "trainer.h"

namespace fsdp_train {

void write_config_json(const TrainSetup& setup, int world_size, int64_t start_step,
                       const std::string& run_dir);

}  // namespace fsdp_train
