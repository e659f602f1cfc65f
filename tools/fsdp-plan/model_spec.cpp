#include "model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "fsdp/models/gpt.h"
#include "json_text.h"

namespace fsdp_plan {

int64_t UnitSpec::numel() const {
  return std::accumulate(param_numels.begin(), param_numels.end(), int64_t{0});
}

int64_t ModelSpec::numel() const {
  int64_t total = 0;
  for (const auto& unit : units) total += unit.numel();
  return total;
}

const UnitSpec* ModelSpec::root() const {
  for (const auto& unit : units) {
    if (unit.root) return &unit;
  }
  return nullptr;
}

// [Note: the GPT's activations, counted]
// What autograd keeps for backward, per token, in elements of the compute
// dtype, read off models/gpt.cpp (C width, T context, H heads, V vocab):
//  - a block: its input (kept by ln1), ln1's output (by qkv), qkv (3C: q, k
//    and v are views of it, kept by both matmuls), the softmax's output (H*T,
//    kept by itself and by att@v), y (the transposed-back copy, by proj), h
//    (by ln2), ln2's output (by fc), fc's output (4C, by gelu) and gelu's
//    (4C, by fc_proj): 16C + HT, plus each LayerNorm's mean and rstd (4).
//    With SDPA (LibTorch 2.x; CausalSelfAttentionImpl::keeps_attention_scores
//    is false) no softmax is kept: SDPA keeps its output, which y is a view
//    of, and a float32 log-sum-exp per head (H) in place of HT;
//  - a checkpointed block keeps its input only (C);
//  - the head: the last block's output and ln_f's (2C), ln_f's mean and rstd
//    (2); the loss's logits are the model's logits_per_token (V), whose
//    bytes memory_plan.cpp counts in their own dtypes;
//  - between blocks, the gradient of the residual stream (C);
//  - a block's backward starts with the MLP: the gradients of gelu's and
//    fc's outputs (4C each) are alive together with everything it keeps.
// tests/test_plan_accounting.cpp checks the kept bytes against the counting
// allocator for a real GPT forward.
ModelSpec gpt_model_spec(const GptSizes& s) {
  const double C = static_cast<double>(s.width), T = static_cast<double>(s.context);
  const double H = static_cast<double>(s.heads), V = static_cast<double>(s.vocab);
  const int64_t d = s.width;
  ModelSpec model;
  model.name = fmt::format("GPT {}x{}, {} heads, context {}", s.layers, s.width, s.heads, s.context);
  model.tokens_per_sample = s.context;

  UnitSpec root;
  root.name = "root (embeddings, ln_f)";
  root.root = true;
  root.param_numels = {s.vocab * d, s.context * d, d, d};
  root.activation_bytes_per_token = 4 * (2 * C + 2);
  root.forward_flops_per_token = 2 * V * C;  // the tied head
  model.units.push_back(root);

  for (int64_t i = 0; i < s.layers; ++i) {
    UnitSpec block;
    block.name = fmt::format("blocks.{}", i);
    block.param_numels = {d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d};
    const bool keeps_scores = fsdp::models::CausalSelfAttentionImpl::keeps_attention_scores();
    const double attention_kept = keeps_scores ? H * T : H;
    block.activation_bytes_per_token = 4 * (16 * C + attention_kept + 4);
    block.checkpointed_bytes_per_token = 4 * C;
    block.backward_workspace_bytes_per_token = 4 * 8 * C;
    // 12 C^2 multiply-adds in the linears, and QK^T and att@V over T keys.
    block.forward_flops_per_token = 2 * 12 * C * C + 4 * T * C;
    model.units.push_back(block);
  }
  model.logits_per_token = s.vocab;
  model.boundary_bytes_per_token = 4 * C;
  return model;
}

namespace {

[[noreturn]] void bad_json(const std::string& path, const std::string& what) {
  throw std::runtime_error(fmt::format(
      "model file '{}': {}. See `fsdp-plan --help` for the format (units with \"params\" "
      "shapes)",
      path, what));
}

std::string dump(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value.Accept(writer);
  return buffer.GetString();
}

int64_t shape_numel(const rapidjson::Value& shape, const std::string& path, const std::string& unit) {
  if (!shape.IsArray() || shape.Empty()) {
    bad_json(path, fmt::format("unit '{}': a parameter shape is {}; write it as a list of sizes, "
                               "e.g. [1024, 4096]",
                               unit, dump(shape)));
  }
  int64_t n = 1;
  for (const auto& size : shape.GetArray()) {
    if (!size.IsInt64() || size.GetInt64() <= 0) {
      bad_json(path, fmt::format("unit '{}': size {} in shape {} is not a positive integer", unit,
                                 dump(size), dump(shape)));
    }
    n *= size.GetInt64();
  }
  return n;
}

UnitSpec unit_from_json(const rapidjson::Value& j, const std::string& path, size_t index) {
  if (!j.IsObject()) bad_json(path, fmt::format("unit {} is {}, not an object", index, dump(j)));
  UnitSpec unit;
  unit.name = string_or(j, "name", fmt::format("unit{}", index), path);
  unit.root = j.HasMember("root") && j["root"].IsBool() && j["root"].GetBool();
  if (!j.HasMember("params") || !j["params"].IsArray()) {
    bad_json(path, fmt::format("unit '{}' has no \"params\" list of shapes", unit.name));
  }
  for (const auto& shape : j["params"].GetArray()) unit.param_numels.push_back(shape_numel(shape, path, unit.name));
  const std::string where = fmt::format("model file '{}', unit '{}'", path, unit.name);
  unit.activation_bytes_per_token = number_or(j, "activation_bytes_per_token", 0, where);
  unit.checkpointed_bytes_per_token = number_or(j, "checkpointed_bytes_per_token", 0, where);
  unit.backward_workspace_bytes_per_token = number_or(j, "backward_workspace_bytes_per_token", 0, where);
  unit.forward_flops_per_token = number_or(j, "flops_per_token", 2.0 * static_cast<double>(unit.numel()), where);
  return unit;
}

}  // namespace

ModelSpec model_spec_from_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) bad_json(path, "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  const rapidjson::Document j = parse_json(text.str(), fmt::format("model file '{}'", path));
  if (!j.IsObject() || !j.HasMember("units") || !j["units"].IsArray() || j["units"].Empty()) {
    bad_json(path, "needs a non-empty \"units\" list");
  }
  const std::string where = fmt::format("model file '{}'", path);
  ModelSpec model;
  model.name = string_or(j, "name", path, where);
  model.tokens_per_sample = static_cast<int64_t>(number_or(j, "tokens_per_sample", 1, where));
  model.logits_per_token = static_cast<int64_t>(number_or(j, "vocab", 0, where));
  model.boundary_bytes_per_token = 4.0 * number_or(j, "hidden", 0, where);
  if (model.tokens_per_sample <= 0) bad_json(path, "\"tokens_per_sample\" must be positive");
  size_t index = 0;
  for (const auto& u : j["units"].GetArray()) {
    const double repeat = u.IsObject() ? number_or(u, "repeat", 1, where) : 1;
    if (repeat < 1) bad_json(path, fmt::format("unit {}: \"repeat\" is {}; use 1 or more", index, repeat));
    UnitSpec unit = unit_from_json(u, path, index);
    for (int64_t r = 0; r < static_cast<int64_t>(repeat); ++r) {
      model.units.push_back(unit);
      if (repeat > 1) model.units.back().name = fmt::format("{}.{}", unit.name, r);
    }
    ++index;
  }
  // The root first: it is gathered for the whole step.
  std::stable_partition(model.units.begin(), model.units.end(),
                        [](const UnitSpec& u) { return u.root; });
  if (std::count_if(model.units.begin(), model.units.end(), [](const UnitSpec& u) { return u.root; }) > 1) {
    bad_json(path, "more than one unit says \"root\": true; only the model's own parameters form the root");
  }
  return model;
}

}  // namespace fsdp_plan
