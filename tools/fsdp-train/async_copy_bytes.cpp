#include "async_copy_bytes.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <vector>

#include "fsdp/checkpoint/async_save.h"
#include "fsdp/checkpoint/training_state.h"
#include "fsdp/introspection.h"

namespace fsdp_train {

int64_t async_copy_bytes(const fsdp::UnitModule& model, const torch::optim::AdamW& optimizer,
                         int rank) {
  using fsdp::ckpt::TensorPiece;
  const int64_t now =
      fsdp::ckpt::host_copy_bytes(fsdp::ckpt::training_state_pieces(model, &optimizer));
  if (fsdp::optimizer_state_bytes(optimizer) > 0) return now;  // resumed: all there
  std::vector<TensorPiece> first_step_state;
  const at::Tensor step = at::zeros({1}, at::kLong);
  for (const auto& shard : fsdp::param_shards(model)) {
    if (!shard.primary) continue;
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
      first_step_state.push_back(
          {moment, shard.full_shape, shard.param.scalar_type(), shard.flat_begin, shard.param});
    }
    if (rank == 0) first_step_state.push_back({"step", {}, at::kLong, 0, step});
  }
  return now + fsdp::ckpt::host_copy_bytes(first_step_state);
}

}  // namespace fsdp_train
