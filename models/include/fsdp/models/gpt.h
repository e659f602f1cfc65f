#pragma once
// A small decoder-only GPT over bytes (vocabulary 256): token and position
// embeddings, pre-LayerNorm blocks of causal self-attention and a GELU MLP,
// and an LM head tied to the token embedding. fsdp-train trains it, the
// parity tests use it, and it shows how a model marks its units: each block
// is an fsdp::Sharded<Block>, and the root (embeddings, final norm, tied
// head) is whatever fully_shard wraps.

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "fsdp/checkpointed.h"
#include "fsdp/sharded.h"

namespace fsdp::models {

struct GPTConfig {
  int64_t vocab_size = 256;
  int64_t context = 128;
  int64_t d_model = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  // Make every block its own FSDP unit (fsdp::Sharded<Block>); when false
  // the blocks belong to the root unit.
  bool shard_blocks = true;
  // Activation checkpointing of every Nth block, from the first (blocks
  // 0, N, 2N, ...): 0 for none, 1 for all. A sharded block is checkpointed
  // as a unit (UnitModule::set_activation_checkpointing), another one
  // through fsdp::Checkpointed<Block>.
  int64_t checkpoint_every = 0;
  // Build without parameter storage (fsdp::defer_init); with shard_blocks
  // each block is deferred right after it is made, so no rank ever holds
  // the whole model. Pass init_gpt_module as fully_shard's param_init_fn:
  // the weights come out as without it (the same draws in the same order).
  bool deferred_init = false;

  // Throws c10::Error naming the bad field and the fix.
  void validate() const;
  int64_t num_params() const;
};

// Causal self-attention: at::scaled_dot_product_attention on LibTorch 2.x,
// explicit scores, mask and softmax on 1.13. See [Note: attention with SDPA]
// in models/gpt.cpp.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  // Whether forward keeps the [H, T, T] softmax for backward (the explicit
  // path, LibTorch 1.13); if not (SDPA), it keeps one float32 log-sum-exp
  // per head and token instead. fsdp-plan counts activations by it.
  static bool keeps_attention_scores();

  explicit CausalSelfAttentionImpl(const GPTConfig& config);
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t n_head_;
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear proj_{nullptr};
  // [context, context], true above the diagonal (a buffer): bool as built,
  // cast by Module::to(dtype). See [Note: the causal mask after Module::to].
  at::Tensor mask_;
};
TORCH_MODULE(CausalSelfAttention);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GPTConfig& config);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::LayerNorm ln1_{nullptr};
  CausalSelfAttention attn_{nullptr};
  torch::nn::LayerNorm ln2_{nullptr};
  torch::nn::Linear fc_{nullptr};
  torch::nn::Linear fc_proj_{nullptr};
};
TORCH_MODULE(Block);

class GPTImpl : public torch::nn::Module {
 public:
  explicit GPTImpl(const GPTConfig& config);
  // tokens: [batch, time] int64 -> logits [batch, time, vocab]
  at::Tensor forward(const at::Tensor& tokens);
  const GPTConfig& config() const { return config_; }

 private:
  GPTConfig config_;
  torch::nn::Embedding wte_{nullptr};
  torch::nn::Embedding wpe_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
};
TORCH_MODULE(GPT);

// Mean cross-entropy of next-byte prediction: logits [B, T, V], targets [B, T].
at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets);

// GPT-2 style initialization of one module's own parameters: normal(0, 0.02)
// matrices, zero vectors, LayerNorms ones and zeros. The GPT runs it over its
// modules in pre-order; a deferred GPT gets it through fully_shard's
// param_init_fn, which walks the modules in the same order.
void init_gpt_module(torch::nn::Module& module);

}  // namespace fsdp::models
