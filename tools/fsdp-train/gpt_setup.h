#pragma once
// The model fsdp-train trains, and its optimizer, from the options.

#include <torch/optim/adamw.h>

#include <memory>

#include "fsdp/fused_adamw.h"
#include "fsdp/models/gpt.h"
#include "train_options.h"

namespace fsdp_train {

// The byte-level GPT of --layers --width --heads --context; each block is
// its own FSDP unit.
fsdp::models::GPTConfig model_config(const TrainOptions& o);

// Zeroes every gradient the model holds, keeping the buffers.
void zero_gradients(torch::nn::Module& model);

// AdamW (betas 0.9, 0.95) with --lr, and --weight-decay on the matrices only:
// an fsdp::FusedAdamW (see fsdp/fused_adamw.h).
std::unique_ptr<torch::optim::AdamW> make_optimizer(fsdp::Sharded<fsdp::models::GPT>& model,
                                                    const TrainOptions& o);

}  // namespace fsdp_train
