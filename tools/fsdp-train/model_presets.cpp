#include "model_presets.h"

#include <fmt/format.h>

#include <algorithm>

namespace fsdp_train {

// [Note: the presets' sizes]
// gpt2-small-bytes is GPT-2 small's shape (12 blocks of width 768, 12
// heads, context 1024) over a vocabulary of 256 bytes instead of 50,257
// tokens: 86 M parameters, nearly all in the blocks (12 x 12 x 768^2). gpt-1b
// widens to 2048 with 128 channels a head: 20 blocks of 12 x 2048^2 make
// 1.01 B. These are the two sizes the GPU comparison with FSDP2 runs.
const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"gpt2-small-bytes", 12, 768, 12, 1024, "GPT-2 small's shape over bytes, 86 M parameters"},
      {"gpt-1b", 20, 2048, 16, 1024, "1.01 B parameters"},
  };
  return presets;
}

namespace {

const ModelPreset* find_preset(const std::string& name) {
  const auto& all = model_presets();
  const auto it = std::find_if(all.begin(), all.end(),
                               [&](const ModelPreset& p) { return name == p.name; });
  return it == all.end() ? nullptr : &*it;
}

}  // namespace

void apply_model_preset(TrainOptions& o) {
  const ModelPreset* preset = o.preset.empty() ? nullptr : find_preset(o.preset);
  if (preset == nullptr) return;
  const auto fill = [&o](const char* name, int64_t& field, int64_t value) {
    if (o.was_given(name)) return;
    field = value;
    o.given.insert(name);
  };
  fill("layers", o.layers, preset->layers);
  fill("width", o.width, preset->width);
  fill("heads", o.heads, preset->heads);
  fill("context", o.context, preset->context);
}

void validate_preset(const TrainOptions& o, std::vector<std::string>& errors) {
  if (o.preset.empty() || find_preset(o.preset) != nullptr) return;
  std::string names;
  for (const auto& p : model_presets()) names += std::string(names.empty() ? "" : ", ") + p.name;
  errors.push_back(fmt::format(
      "--preset '{}' is not a preset; pick one of: {} (or give --layers --width --heads "
      "--context yourself)",
      o.preset, names));
}

std::string describe_model_presets() {
  std::string out;
  for (const auto& p : model_presets()) {
    out += fmt::format("  {:<18}{} x {}, {} heads, context {}: {}\n", p.name, p.layers, p.width,
                       p.heads, p.context, p.about);
  }
  return out;
}

}  // namespace fsdp_train
