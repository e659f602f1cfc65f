#include "gathered_copy.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace fsdp::detail {

std::vector<uint32_t> versions_of(const std::vector<at::Tensor>& tensors) {
  std::vector<uint32_t> versions;
  versions.reserve(tensors.size());
  for (const auto& t : tensors) versions.push_back(static_cast<uint32_t>(t._version()));
  return versions;
}

GatheredCopy::Snapshot GatheredCopy::snapshot() const {
  Snapshot snapshot{versions_of(params_.params()), c10::nullopt};
  if (!params_.is_aliased() && !params_.sharded_flat().is_cuda()) {
    snapshot.checksum = params_.shard_checksum(/*full=*/false);
  }
  return snapshot;
}

bool GatheredCopy::current() const {
  return versions_of(params_.params()) == gathered_from_.versions &&
         (!gathered_from_.checksum ||
          params_.shard_checksum(/*full=*/false) == *gathered_from_.checksum);
}

// [Note: holding a unit unsharded]
// FSDP2's FSDPModule.unshard() and reshard(), for loops that run many
// forwards on the same parameters (generation: decode token after token,
// then train). unshard() gathers the unit once; until reshard(), its
// forwards gather nothing and free nothing. Between forwards the parameters
// are parked on their shards, so the model looks as it does at rest to the
// optimizer, state dicts and checkpoints; a forward points them back at the
// gathered buffer. The gathered copy is only right while the shards do not
// change, so:
//  - only forwards without grad run while held; a training forward is
//    refused, naming reshard(): backward would reduce gradients, and the
//    optimizer step after it would leave the copy stale;
//  - each forward checks that the shards are as unshard() found them (the
//    snapshot: version counters, and on the CPU a sample sum, as [Note:
//    optimizer step before backward] in unit_state.cpp does), so a step or a
//    checkpoint load while held is an error, not a forward on stale
//    parameters;
//  - a failed forward keeps the hold (the buffer is parked, not freed).
// SummonFullParams refuses a held unit. Every rank must unshard and reshard
// the same units, since unshard() gathers.
void GatheredCopy::hold() {
  if (held_) return;
  drop_kept_if_stale();  // a current kept copy becomes the held one
  params_.discard_post_forward_shard();
  gathered_from_ = snapshot();
  held_ = true;
  params_.unshard_async();
}

void GatheredCopy::finish_hold() {
  if (!held_) return;
  params_.wait_unshard();
  params_.park_params_on_shards();
}

void GatheredCopy::check_held_usable(const std::string& unit_name) const {
  TORCH_CHECK(!at::GradMode::is_enabled(), "fsdp: forward of unit '", unit_name,
              "' ran with grad enabled while unshard() holds it gathered; call reshard() before "
              "a training step, or run the forward under at::NoGradGuard");
  TORCH_CHECK(current(), "fsdp: the parameters of unit '", unit_name,
              "' changed after unshard() (an optimizer step or a checkpoint load?), so its "
              "gathered copy is stale; call reshard() before changing them, and unshard() again "
              "after");
}

// [Note: keeping the parameters gathered after backward]
// FSDP2's set_reshard_after_backward(false): in gradient accumulation, a
// unit that keeps its gathered parameters after backward saves the next
// micro-batch's forward gather, for the memory of the gathered copy in
// between. The copy is parked on the shards, as a held one is, with a
// snapshot of the shards. The next forward reuses it only if the shards
// still match; after an optimizer step or a load it gathers afresh, so a
// kept copy never runs on stale parameters (FSDP2 leaves that to the user).
// reshard() and SummonFullParams free it.
void GatheredCopy::keep() {
  params_.park_params_on_shards();
  gathered_from_ = snapshot();
  kept_ = true;
}

void GatheredCopy::drop_kept_if_stale() {
  if (kept_ && !current()) drop_kept();
  kept_ = false;  // the next release decides again
}

void GatheredCopy::drop_kept() {
  if (!kept_) return;
  kept_ = false;
  params_.reshard();
}

void GatheredCopy::release() {
  kept_ = false;
  if (held_) {
    params_.park_params_on_shards();
  } else {
    params_.reshard();
  }
}

void GatheredCopy::end() {
  held_ = false;
  kept_ = false;
  params_.reshard();
}

}  // namespace fsdp::detail
