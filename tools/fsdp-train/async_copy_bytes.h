#pragma once
// How much host memory --async-save's copies of a rank's training state
// take, so that the saver can reserve it before training starts ([Note:
// reserving the host copies] in fsdp/checkpoint/async_save.h).

#include <cstdint>

#include "fsdp/sharded.h"

namespace torch::optim {
class AdamW;
}

namespace fsdp_train {

// fsdp::ckpt::host_copy_bytes of the pieces rank `rank` will save: those
// there are now and, while `optimizer` has no state yet, the state AdamW
// creates at its first step: two moments shaped like each parameter's shard
// and, on rank 0, each parameter's step.
int64_t async_copy_bytes(const fsdp::UnitModule& model, const torch::optim::AdamW& optimizer,
                         int rank);

}  // namespace fsdp_train
