#pragma once
// Small models for parity tests. Each marks its units with fsdp::Sharded<>
// when `units` is true; unsharded, the same class is the reference.

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

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

// The two models the parity tests train, by name: "mlp" (Mlp(7, 10, 3) on
// random vectors, MSE) or "gpt" (tiny_gpt_config on random bytes, lm_loss).
// Draws inputs, then targets, shaped `leading` plus the model's own
// dimension, and calls check(make_model, inputs, targets, loss_fn), where
// make_model(units) builds the model with or without its units marked:
//
//   with_parity_model(c.model, {kSteps, kBatch}, [&](auto make_model, auto... data) {
//     check_parity<decltype(make_model(true))>(c, make_model, data...);
//   });
template <class Check>
void with_parity_model(const std::string& model, std::vector<int64_t> leading, Check&& check) {
  if (model == "mlp") {
    std::vector<int64_t> shape = leading;
    shape.push_back(7);
    const at::Tensor inputs = at::randn(shape);
    shape.back() = 3;
    const at::Tensor targets = at::randn(shape);
    check([](bool units) { return Mlp(7, 10, 3, units); }, inputs, targets,
          [](const at::Tensor& out, const at::Tensor& y) { return at::mse_loss(out, y); });
    return;
  }
  TORCH_CHECK(model == "gpt", "with_parity_model: no test model named '", model, "'");
  const fsdp::models::GPTConfig config = tiny_gpt_config(true);
  leading.push_back(config.context);
  const at::Tensor tokens = at::randint(0, config.vocab_size, leading);
  const at::Tensor targets = at::randint(0, config.vocab_size, leading);
  check([](bool units) { return fsdp::models::GPT(tiny_gpt_config(units)); }, tokens, targets,
        [](const at::Tensor& logits, const at::Tensor& y) {
          return fsdp::models::lm_loss(logits, y);
        });
}

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
