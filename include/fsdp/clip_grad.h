#pragma once
// Gradient clipping across shards.

#include "fsdp/sharded.h"

namespace fsdp {

// Clips the sharded gradients of `root` so that their total norm, taken over
// the full (unsharded) gradients of the whole model, is at most `max_norm`;
// returns that total norm before clipping. `norm_type` is p of the p-norm:
// 2 by default, INFINITY for the max-norm, or any p > 0. The result equals
// torch::nn::utils::clip_grad_norm_ on the unsharded model.
//
// Collective: every rank must call it, after backward returned. Calling it on
// only some ranks makes the others wait and fail at the group's timeout.
double clip_grad_norm_(UnitModule& root, double max_norm, double norm_type = 2.0);

}  // namespace fsdp
