#pragma once
// --preset: named GPT sizes, so a benchmark or a GPU run names a model
// instead of four flags. Flags given on the command line win over the
// preset's (e.g. --preset gpt2-small-bytes --context 256).

#include <cstdint>
#include <string>
#include <vector>

#include "train_options.h"

namespace fsdp_train {

struct ModelPreset {
  const char* name;
  int64_t layers, width, heads, context;
  const char* about;  // for --help
};

// Every preset, smallest first.
const std::vector<ModelPreset>& model_presets();

// Sets the model sizes the command line left out from --preset, and marks
// them given (a resumed run then checks them against its checkpoint). Does
// nothing for an unknown name: validate_preset reports it.
void apply_model_preset(TrainOptions& options);

// Appends an error when --preset names no preset.
void validate_preset(const TrainOptions& options, std::vector<std::string>& errors);

// "  gpt2-small-bytes  12 x 768, 12 heads, context 1024: ..." one per line.
std::string describe_model_presets();

}  // namespace fsdp_train
