#pragma once
// What a full state dict load (model or optimizer) loads, decided once and
// acted on by every rank. Internal to src/state_dict.
//
// [Note: one decision per load]
// The ranks must agree on which tensors load, or with rank0_only they would
// issue different broadcasts and hang. Without rank0_only every rank holds
// the same dict and decides alone, reaching the same decision; with
// rank0_only only rank 0 holds it, so rank 0 decides and sends the decision
// to every rank. A strict load then throws on every rank at once, listing
// every problem (KeyMismatches::message).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fsdp/state_dict.h"

namespace fsdp {
class ProcessGroup;
}

namespace fsdp::detail {

// What to load for one tensor the model lists.
struct LoadPlanEntry {
  bool load = false;                // a model tensor: whether to load it
  std::vector<std::string> fields;  // a parameter's optimizer state: the fields to load (none: skip it)
  int64_t step = -1;                // ... and its step (-1: none)
};

struct LoadDecision {
  // One entry per tensor the model lists, in the same order on every rank.
  std::vector<LoadPlanEntry> plan;
  KeyMismatches problems;

  // {"plan": [{"load": ..., "fields": [...], "step": ...}, ...], "missing": [...],
  //  "unexpected": [...], "mismatched": [...]}
  std::string encode() const;
  static LoadDecision decode(const std::string& text);
};

// The decision this rank acts on: decide() run here, or with
// options.rank0_only() run on rank 0 and sent to every rank. Checks that its
// plan has `num_targets` entries (`targets` names them in the error: every
// rank must load into the same model) and, if options.strict(), that it has
// no problems; `api` names the caller in errors. Collective with rank0_only.
LoadDecision agree_on_load(ProcessGroup& world, const char* api, const LoadStateDictOptions& options,
                           size_t num_targets, const char* targets,
                           const std::function<LoadDecision()>& decide);

}  // namespace fsdp::detail
