#include "gpt_setup.h"

#include <string>
#include <tuple>
#include <vector>

namespace fsdp_train {

using fsdp::models::GPT;
using fsdp::models::GPTConfig;

GPTConfig model_config(const TrainOptions& o) {
  GPTConfig config;
  config.context = o.context;
  config.d_model = o.width;
  config.n_layer = o.layers;
  config.n_head = o.heads;
  config.shard_blocks = true;  // each block its own FSDP unit
  config.checkpoint_every = checkpoint_every(o).value_or(0);  // checked by check_options
  config.deferred_init = o.deferred_init;  // fully_shard then needs init_gpt_module
  return config;
}

// [Note: gradients zeroed, not dropped]
// LibTorch 1.13's Optimizer::zero_grad() zeroes each gradient; 2.x's sets it
// to none by default, so a rank without sharding (one rank, NO_SHARD's
// autograd-owned gradients) would allocate them afresh in every backward and
// peak at a different moment on each version. Zeroing them here keeps the
// gradient buffers, and the step's peak that fsdp-plan predicts, the same on
// both; the values are identical (0 + g is g).
void zero_gradients(torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

// AdamW with decoupled weight decay on the matrices only: biases and
// LayerNorm parameters are not decayed. fsdp-train's parameters are 1-D
// shards by now, so the choice goes by name (fully_shard keeps the original
// names). It is fsdp::FusedAdamW, one fused kernel per group where LibTorch
// has it (2.4+), torch::optim::AdamW's own step elsewhere; checkpoints are
// AdamW's either way.
std::unique_ptr<torch::optim::AdamW> make_optimizer(
    const torch::OrderedDict<std::string, at::Tensor>& named_parameters, const TrainOptions& o) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& item : named_parameters) {
    const std::string& name = item.key();
    const bool is_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    const bool is_norm = name.find("ln") != std::string::npos;
    (is_weight && !is_norm ? decay : no_decay).push_back(item.value());
  }
  auto options = [&o](double weight_decay) {
    auto opts = std::make_unique<torch::optim::AdamWOptions>(o.lr);
    opts->betas(std::make_tuple(0.9, 0.95)).eps(1e-8).weight_decay(weight_decay);
    return opts;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(o.weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<fsdp::FusedAdamW>(std::move(groups), torch::optim::AdamWOptions(o.lr));
}

}  // namespace fsdp_train
