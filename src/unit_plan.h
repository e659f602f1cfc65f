#pragma once
// The facts about one unit that follow from its options, its strategy and
// its groups: decided once, by resolve_unit_options, and read everywhere
// else. See [Note: a unit's plan].

namespace fsdp::detail {

// [Note: a unit's plan]
// Storage, gradients, lifecycle and the root all ask the same questions of a
// unit: does it communicate, is it aliased, does it reshard after forward.
// Each deriving the answer from groups and dtypes on its own would let the
// answers drift apart. Decided in one place, they stay identical
// everywhere, and a new strategy or option changes one function
// (resolve_unit_options) instead of every reader.
struct UnitPlan {
  // The parameters never change shape or dtype (a shard group of one rank,
  // no mixed-precision cast, no offload): unshard and reshard are no-ops,
  // and .grad() is always the full gradient.
  bool aliased = false;
  // The shard group has more than one rank: parameters are all-gathered and
  // gradients reduce-scattered across ranks.
  bool shards_across_ranks = false;
  // Gradients are all-reduced across replicas (the hybrid strategies'
  // replicate group, or NO_SHARD over more than one rank).
  bool replicates = false;
  // The gradients go through a reduction (communicated, or cast into the
  // parameter dtype's shard): false only for aliased units without
  // replicas, where autograd's own accumulation is already the answer. Such
  // a unit has no post-backward work.
  bool reduces_grads = false;
  // After forward the gathered parameters are freed (or cut to a k-chunk),
  // and backward gathers them again. The choice at fully_shard time: the
  // unit's current one is UnitState's, which this seeds (see [Note: runtime
  // switches] in unit_state.h).
  bool reshards_after_forward = true;
  // Each parameter lies whole in one rank's shard (UnitOptions::
  // keep_params_whole); see [Note: whole-parameter placement].
  bool keeps_params_whole = false;
  // k of the k-rank post-forward group, or 0 for none (a plain reshard, or
  // no reshard). See [Note: resharding to a smaller group].
  int post_forward_group_size = 0;
};

}  // namespace fsdp::detail
