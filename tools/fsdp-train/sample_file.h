#pragma once
// --sample-bytes: text from the trained model at the end of a run, kept in
// the run dir as sample.txt.

#include <c10/core/Device.h>

#include <string>

#include "fsdp/models/gpt.h"
#include "fsdp/sharded.h"
#include "train_options.h"

namespace fsdp_train {

// The bytes that follow --prompt (generate.h). Collective: every rank runs it.
std::string generate_sample(fsdp::Sharded<fsdp::models::GPT>& model, const TrainOptions& options,
                            c10::Device device);

// Rank 0: writes sample.txt in `run_dir` (the prompt and what followed it),
// and echoes it unless --quiet. Returns the file's path.
std::string write_sample(const std::string& run_dir, const TrainOptions& options,
                         const std::string& sample);

}  // namespace fsdp_train
