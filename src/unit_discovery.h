#pragma once
// Finds the units in a model and which parameters each one owns.
//
// A parameter belongs to the innermost unit whose subtree contains it. A
// parameter reachable from two units (tied weights across units) is an
// error: the tie must live inside one unit, e.g. the root.

#include <torch/nn/module.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "fsdp/sharded.h"

namespace fsdp::detail {

struct DiscoveredUnit {
  UnitModule* module = nullptr;  // whose UnitOptions apply (the leader of a shared unit)
  std::string name;  // module path from the root ("" for the root); "a+b" for a shared unit
  std::vector<at::Tensor> params;
  std::vector<std::string> param_names;  // fully qualified, first name seen
  // The wrappers that run this unit: `module`, and those sharing its unit
  // (UnitModule::share_unit_with), in the order met.
  std::vector<UnitModule*> members;
};

struct DiscoveredModel {
  std::vector<DiscoveredUnit> units;  // pre-order; units[0] is the root
  std::vector<at::Tensor> buffers;    // deduplicated
  std::vector<std::string> buffer_names;
  std::vector<std::string> ignored_param_names;  // left to the user
};

// What FullyShardOptions::ignored_modules / ignored_params exclude. An
// ignored module's whole subtree (parameters, buffers and any units inside)
// is skipped. See [Note: ignored parameters].
struct IgnoredSet {
  std::unordered_set<const torch::nn::Module*> modules;
  std::unordered_set<const c10::TensorImpl*> params;
};

DiscoveredModel discover_units(UnitModule& root, const IgnoredSet& ignored = {});

}  // namespace fsdp::detail
