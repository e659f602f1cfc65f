#pragma once
// Small models for parity tests. Each marks its units with fsdp::Sharded<>
// when `units` is true; unsharded, the same class is the reference.

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/optimizer.h>

#include <memory>

#include "fsdp/models/gpt.h"
#include "fsdp/sharded.h"

namespace fsdp::testing {

// in -> hidden -> hidden -> out, with a scalar and a 2-element parameter
// in the root so some parameters have fewer elements than ranks.
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t in, int64_t hidden, int64_t out, bool units);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Sequential layers{nullptr};
  at::Tensor scale;  // scalar
  at::Tensor shift;  // [2]
};
TORCH_MODULE(Mlp);

// Built only from LibTorch modules with reset_parameters(), so deferred init
// can use their own initialization; two Linear blocks are units.
class ResettableNetImpl : public torch::nn::Module {
 public:
  explicit ResettableNetImpl(bool units);
  at::Tensor forward(const at::Tensor& x) { return layers->forward(x); }

  torch::nn::Sequential layers{nullptr};
  at::Tensor steps;  // a buffer
};
TORCH_MODULE(ResettableNet);

// y = tanh(a(x) + b(x)), or tanh(a(x)) while *use_b is false: a module
// whose parameter `b` is used in some steps only.
class GatedImpl : public torch::nn::Module {
 public:
  GatedImpl();
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Linear a{nullptr}, b{nullptr};
  std::shared_ptr<bool> use_b = std::make_shared<bool>(true);
};
TORCH_MODULE(Gated);

fsdp::models::GPTConfig tiny_gpt_config(bool shard_blocks);

// One language-model training step of `model` (a GPT, sharded or not) on
// `tokens` as input and target: zero_grad, backward, step. Returns the loss.
template <class Model>
at::Tensor lm_train_step(Model& model, torch::optim::Optimizer& opt, const at::Tensor& tokens) {
  at::Tensor loss = fsdp::models::lm_loss(model->forward(tokens), tokens);
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss;
}

}  // namespace fsdp::testing
