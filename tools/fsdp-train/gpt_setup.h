#pragma once
// The model fsdp-train trains, and its optimizer, from the options.

#include <torch/optim/adamw.h>

#include <memory>
#include <string>

#include "fsdp/fused_adamw.h"
#include "fsdp/models/gpt.h"
#include "train_options.h"

namespace fsdp_train {

// The byte-level GPT of --layers --width --heads --context; each block is
// its own FSDP unit.
fsdp::models::GPTConfig model_config(const TrainOptions& o);

// Zeroes every gradient the model holds, keeping the buffers.
void zero_gradients(torch::nn::Module& model);

// AdamW (betas 0.9, 0.95) with --lr, and --weight-decay on the matrices only
// (told apart by the GPT's parameter names): an fsdp::FusedAdamW (see
// fsdp/fused_adamw.h). fsdp-train passes the sharded model's parameters,
// bench/peers/local_gpt.cpp the whole model's.
std::unique_ptr<torch::optim::AdamW> make_optimizer(
    const torch::OrderedDict<std::string, at::Tensor>& named_parameters, const TrainOptions& o);

}  // namespace fsdp_train
