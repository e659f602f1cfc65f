#pragma once
// A unit's gathered parameters kept past the point where they would be
// freed, and whether that copy still matches the shards:
//  - held by UnitModule::unshard() until reshard(): forwards without grad
//    use it, and refuse when it is stale;
//  - kept after backward (set_reshard_after_backward(false)) for the next
//    forward, which reuses it only while it is current.
// Between forwards the parameters are parked on their shards
// (FlatParamGroup::park_params_on_shards). See [Note: holding a unit
// unsharded] and [Note: keeping the parameters gathered after backward] in
// gathered_copy.cpp.

#include <c10/util/Optional.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flat_param_group.h"

namespace fsdp::detail {

// The tensors' version counters, which every in-place change bumps.
std::vector<uint32_t> versions_of(const std::vector<at::Tensor>& tensors);

class GatheredCopy {
 public:
  explicit GatheredCopy(FlatParamGroup& params) : params_(params) {}

  // unshard(): notes the shards and starts the gather (no-op if held).
  void hold();
  // Finishes the gather hold() started, and parks the parameters.
  void finish_hold();
  bool held() const { return held_; }
  // Throws, naming reshard(), when a forward cannot use the held copy.
  void check_held_usable(const std::string& unit_name) const;
  // After backward, instead of release(): parks and notes the shards.
  void keep();
  // Before a forward: frees a kept copy the shards no longer match.
  void drop_kept_if_stale();
  // Frees a kept copy (SummonFullParams writes the shards unseen).
  void drop_kept();
  // Where the gathered parameters would be freed: parks them if held.
  void release();
  // reshard(): frees the held or kept copy.
  void end();

 private:
  // The shards when the copy was gathered: version counters, and on the
  // CPU a sample sum (for edits through .data()).
  struct Snapshot {
    std::vector<uint32_t> versions;
    c10::optional<double> checksum;
  };
  Snapshot snapshot() const;
  bool current() const;

  FlatParamGroup& params_;
  bool held_ = false;
  bool kept_ = false;
  Snapshot gathered_from_;
};

}  // namespace fsdp::detail
