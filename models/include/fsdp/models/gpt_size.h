#pragma once
// The GPT's parameter count as a formula of its sizes, in any arithmetic
// type: int64_t for a model that is built (GPTConfig::num_params), double for
// sizes that may be absurd and must not overflow (fsdp-train's memory check).
// Kept apart from gpt.h so the check needs no LibTorch module headers.

namespace fsdp::models {

template <class T>
T gpt_parameter_count(T vocab_size, T context, T d_model, T n_layer) {
  const T d = d_model;
  // 2 LayerNorms, attention (qkv + proj), MLP (4x up, down), with biases.
  const T per_block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) +
                      (4 * d * d + d);
  // Token and position embeddings (the head is tied), and the final LayerNorm.
  return vocab_size * d + context * d + n_layer * per_block + 2 * d;
}

}  // namespace fsdp::models
