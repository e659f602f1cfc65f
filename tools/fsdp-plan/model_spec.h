#pragma once
// What fsdp-plan knows of a model: its FSDP units, each with its parameters'
// element counts, what one token keeps for backward, and the flops per token.
//
// Two sources:
//  - the demo GPT by its sizes (gpt_model_spec), the same flags as fsdp-train;
//  - a JSON file listing units (model_spec_from_json), so any model can be
//    described:
//      {"name": "my-model", "tokens_per_sample": 2048,
//       "vocab": 50304, "hidden": 1024,
//       "units": [{"name": "embed", "root": true, "params": [[50304, 1024]]},
//                 {"name": "layer", "repeat": 24,
//                  "params": [[1024, 3072], [3072], [1024, 1024], [1024]],
//                  "activation_bytes_per_token": 34816}]}
//    Parameters are shapes; "repeat" makes N identical units; activation bytes
//    are per token of one micro-batch at fp32 (scaled by the compute dtype);
//    "flops_per_token" (forward, per unit) defaults to 2 per parameter;
//    "vocab" is the logits per token of a language model's loss and "hidden"
//    the width of what flows between units (both optional).

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp_plan {

struct UnitSpec {
  std::string name;
  bool root = false;  // the model's own parameters: gathered for the whole step
  std::vector<int64_t> param_numels;
  // Kept for backward per token when the unit is not checkpointed, and what a
  // checkpointed one keeps (its input), at 4 bytes per element.
  double activation_bytes_per_token = 0;
  double checkpointed_bytes_per_token = 0;
  // What its backward allocates at once beyond its activations, per token
  // (the gradients of its widest tensors), at 4 bytes per element.
  double backward_workspace_bytes_per_token = 0;
  // Forward flops per token (backward is twice that).
  double forward_flops_per_token = 0;

  int64_t numel() const;
};

struct ModelSpec {
  std::string name;
  std::vector<UnitSpec> units;  // units[0] is the root when it has parameters
  int64_t tokens_per_sample = 1;  // sequence length
  // A language model's logits per token (its vocabulary): the loss keeps
  // them in fp32 (cast from the compute dtype) with log_softmax's fp32
  // output, and its backward makes their gradients. 0: no such loss.
  int64_t logits_per_token = 0;
  // The activation gradient one unit's backward hands the next, per token at
  // 4 bytes per element (the residual stream's width for a transformer).
  double boundary_bytes_per_token = 0;

  int64_t numel() const;
  const UnitSpec* root() const;
};

struct GptSizes {
  int64_t layers = 4;
  int64_t width = 128;
  int64_t heads = 4;
  int64_t context = 128;
  int64_t vocab = 256;  // bytes
};

// The fsdp-train GPT: a root (embeddings, final norm) and one unit per block.
ModelSpec gpt_model_spec(const GptSizes& sizes);

// A model from a JSON description (see above); throws std::runtime_error
// naming the file, the field and the fix.
ModelSpec model_spec_from_json(const std::string& path);

}  // namespace fsdp_plan
