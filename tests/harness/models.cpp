#include "harness/models.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/normalization.h>

namespace fsdp::testing {

MlpImpl::MlpImpl(int64_t in, int64_t hidden, int64_t out, bool units) {
  layers = register_module("layers", torch::nn::Sequential());
  if (units) {
    layers->push_back(fsdp::Sharded<torch::nn::Linear>(torch::nn::Linear(in, hidden)));
    layers->push_back(torch::nn::Tanh());
    layers->push_back(fsdp::Sharded<torch::nn::Linear>(torch::nn::Linear(hidden, hidden)));
  } else {
    layers->push_back(torch::nn::Linear(in, hidden));
    layers->push_back(torch::nn::Tanh());
    layers->push_back(torch::nn::Linear(hidden, hidden));
  }
  layers->push_back(torch::nn::Tanh());
  layers->push_back(torch::nn::Linear(hidden, out));  // stays in the root unit
  scale = register_parameter("scale", at::full({}, 1.5));
  shift = register_parameter("shift", at::full({2}, 0.25));
}

at::Tensor MlpImpl::forward(const at::Tensor& x) {
  return layers->forward(x) * scale + shift.sum();
}

ResettableNetImpl::ResettableNetImpl(bool units) {
  layers = register_module("layers", torch::nn::Sequential());
  if (units) {
    layers->push_back(fsdp::Sharded<torch::nn::Linear>(torch::nn::Linear(7, 16)));
    layers->push_back(torch::nn::Tanh());
    layers->push_back(fsdp::Sharded<torch::nn::Linear>(torch::nn::Linear(16, 16)));
  } else {
    layers->push_back(torch::nn::Linear(7, 16));
    layers->push_back(torch::nn::Tanh());
    layers->push_back(torch::nn::Linear(16, 16));
  }
  layers->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})));
  layers->push_back(torch::nn::Linear(16, 3));
  steps = register_buffer("steps", at::zeros({1}));
}

fsdp::models::GPTConfig tiny_gpt_config(bool shard_blocks) {
  fsdp::models::GPTConfig config;
  config.vocab_size = 256;
  config.context = 16;
  config.d_model = 32;
  config.n_layer = 2;
  config.n_head = 4;
  config.shard_blocks = shard_blocks;
  return config;
}

GatedImpl::GatedImpl() {
  a = register_module("a", torch::nn::Linear(6, 6));
  b = register_module("b", torch::nn::Linear(6, 6));
}

at::Tensor GatedImpl::forward(const at::Tensor& x) {
  at::Tensor h = a->forward(x);
  if (*use_b) h = h + b->forward(x);
  return at::tanh(h);
}

}  // namespace fsdp::testing
