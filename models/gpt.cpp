#include "fsdp/models/gpt.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>

#include <cmath>

#include "fsdp/deferred_init.h"
#include "fsdp/models/gpt_size.h"
#include "torch_features.h"

namespace fsdp::models {

namespace F = torch::nn::functional;

void GPTConfig::validate() const {
  TORCH_CHECK(vocab_size > 0 && context > 0 && d_model > 0 && n_layer > 0 && n_head > 0,
              "fsdp: gpt: every size must be positive (vocab ", vocab_size, ", context ", context,
              ", d_model ", d_model, ", n_layer ", n_layer, ", n_head ", n_head, ")");
  TORCH_CHECK(checkpoint_every >= 0, "fsdp: gpt: checkpoint_every is ", checkpoint_every,
              "; use 0 for no activation checkpointing, 1 for every block, N for every Nth");
  TORCH_CHECK(d_model % n_head == 0, "fsdp: gpt: d_model ", d_model, " is not divisible by n_head ",
              n_head, "; pick a head count that divides the width (e.g. ", d_model / 32 > 0 ? d_model / 32 : 1,
              ")");
}

int64_t GPTConfig::num_params() const {
  return gpt_parameter_count<int64_t>(vocab_size, context, d_model, n_layer);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& config)
    : n_head_(config.n_head) {
  qkv_ = register_module("qkv", torch::nn::Linear(config.d_model, 3 * config.d_model));
  proj_ = register_module("proj", torch::nn::Linear(config.d_model, config.d_model));
  mask_ = register_buffer("mask", at::ones({config.context, config.context}, at::kBool).triu(1));
}

// [Note: the causal mask after Module::to]
// LibTorch's Module::to(dtype) casts every buffer, the bool ones too (Python's
// casts only floating-point ones), so `model->to(at::kDouble)` leaves the
// mask as 0.0/1.0 doubles. LibTorch 2.x's masked_fill rejects such a mask;
// 1.13's takes it without a word and does not mask as meant (a 3x3 double
// triu mask fills nothing), so a float64 GPT on 1.13 attended to future
// tokens. forward therefore reads the mask as bool whatever it was cast to
// (1.0 -> true). The buffer keeps its name and its dtype, so checkpoints hold
// what they held.

// [Note: attention with SDPA]
// Materializing the scores [B, H, T, T] and running scale, mask and softmax
// as separate passes reads and writes them four times; at a 1 B GPT on an
// H200 that is a large share of the forward. at::scaled_dot_product_attention
// with is_causal does the same arithmetic in one fused kernel (flash or
// memory-efficient attention on CUDA, a blocked flash kernel on the CPU)
// and never stores the scores. It rounds differently, so losses on LibTorch
// 2.x differ from 1.13's in the last bits; the FSDP2 peer
// (bench/peers/fsdp2_gpt.py) uses the same call so the comparison stays
// like for like. On LibTorch 1.13, which lacks it, forward keeps the
// explicit path below, bit for bit what it was. The mask buffer stays
// registered on both, so checkpoints hold what they held.

bool CausalSelfAttentionImpl::keeps_attention_scores() { return FSDP_MODELS_SDPA == 0; }

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const int64_t hd = C / n_head_;
  auto qkv = qkv_->forward(x).view({B, T, 3, n_head_, hd}).permute({2, 0, 3, 1, 4});
  at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];  // [B, H, T, hd]
#if FSDP_MODELS_SDPA
  // See [Note: attention with SDPA].
  at::Tensor y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                  /*is_causal=*/true);
#else
  at::Tensor att = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  // See [Note: the causal mask after Module::to].
  at::Tensor future = mask_.narrow(0, 0, T).narrow(1, 0, T);
  if (future.scalar_type() != at::kBool) future = future.to(at::kBool);
  att = att.masked_fill(future, -std::numeric_limits<float>::infinity());
  att = at::softmax(att, -1);
  at::Tensor y = at::matmul(att, v);
#endif
  return proj_->forward(y.transpose(1, 2).reshape({B, T, C}));
}

BlockImpl::BlockImpl(const GPTConfig& config) {
  const int64_t d = config.d_model;
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  attn_ = register_module("attn", CausalSelfAttention(config));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  fc_ = register_module("fc", torch::nn::Linear(d, 4 * d));
  fc_proj_ = register_module("fc_proj", torch::nn::Linear(4 * d, d));
}

at::Tensor BlockImpl::forward(const at::Tensor& x) {
  at::Tensor h = x + attn_->forward(ln1_->forward(x));
  return h + fc_proj_->forward(at::gelu(fc_->forward(ln2_->forward(h))));
}

GPTImpl::GPTImpl(const GPTConfig& config) : config_(config) {
  config_.validate();
  wte_ = register_module("wte", torch::nn::Embedding(config.vocab_size, config.d_model));
  wpe_ = register_module("wpe", torch::nn::Embedding(config.context, config.d_model));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layer; ++i) {
    const bool checkpointed = config.checkpoint_every > 0 && i % config.checkpoint_every == 0;
    if (config.shard_blocks) {
      fsdp::Sharded<Block> unit(config);
      unit->set_activation_checkpointing(checkpointed);
      if (config.deferred_init) fsdp::defer_init(*unit);  // before the next block exists
      blocks_->push_back(unit);
    } else if (checkpointed) {
      blocks_->push_back(fsdp::Checkpointed<Block>(config));
    } else {
      blocks_->push_back(Block(config));
    }
  }
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.d_model})));
  if (config.deferred_init) {
    fsdp::defer_init(*this);  // the root's own: embeddings, ln_f
    return;
  }
  // Its submodules only: a module cannot hand out a shared_ptr to itself in its
  // constructor, and the GPT has no parameters of its own.
  for (const auto& module : modules(/*include_self=*/false)) init_gpt_module(*module);
}

void init_gpt_module(torch::nn::Module& module) {
  at::NoGradGuard no_grad;
  const bool layer_norm = module.as<torch::nn::LayerNormImpl>() != nullptr;
  for (auto& p : module.named_parameters(/*recurse=*/false)) {
    at::Tensor& value = p.value();
    if (layer_norm) {
      p.key() == "weight" ? value.fill_(1.0) : value.zero_();
    } else if (value.dim() >= 2) {
      value.normal_(0.0, 0.02);
    } else {
      value.zero_();
    }
  }
}

at::Tensor GPTImpl::forward(const at::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= config_.context, "fsdp: gpt: sequence of ", T, " tokens exceeds the context of ",
              config_.context);
  at::Tensor pos = at::arange(T, tokens.options().dtype(at::kLong));
  at::Tensor x = wte_->forward(tokens) + wpe_->forward(pos);
  for (const auto& module : *blocks_) {
    if (auto* unit = module->as<fsdp::ShardedImpl<BlockImpl>>()) {
      x = unit->forward(x);
    } else if (auto* checkpointed = module->as<fsdp::CheckpointedImpl<BlockImpl>>()) {
      x = checkpointed->forward(x);
    } else {
      x = module->as<BlockImpl>()->forward(x);
    }
  }
  x = ln_f_->forward(x);
  return F::linear(x, wte_->weight);  // tied head
}

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace fsdp::models
