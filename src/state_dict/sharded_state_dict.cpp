// fsdp::sharded_state_dict and its loader: each rank's shards with their
// placement, taken and restored with no communication.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <sstream>

#include "fsdp/introspection.h"
#include "fsdp/state_dict.h"
#include "state_dict/unit_gather.h"

namespace fsdp {

ShardedStateDict sharded_state_dict(const UnitModule& root) {
  detail::RootState& state = detail::idle_root_state(root, "sharded_state_dict");
  ShardedStateDict out;
  for (const auto& shard : param_shards(root)) {
    out.insert(shard.name, ShardedTensor{shard.full_shape, shard.flat_begin,
                                         shard.param.detach().reshape(-1), shard.primary});
  }
  const bool rank0 = state.world().rank() == 0;
  for (const auto& b : root.named_buffers()) {
    out.insert(b.key(), ShardedTensor{b.value().sizes().vec(), 0, b.value().detach().reshape(-1), rank0});
  }
  return out;
}

void load_sharded_state_dict(UnitModule& root, const ShardedStateDict& state_dict) {
  detail::idle_root_state(root, "load_sharded_state_dict");
  const auto shards = param_shards(root);
  std::ostringstream problems;
  int count = 0;
  auto problem = [&](const std::string& text) {
    problems << "\n  " << text;
    ++count;
  };
  for (const auto& shard : shards) {
    const ShardedTensor* t = state_dict.find(shard.name);
    if (!t) {
      problem(shard.name + ": missing");
    } else if (t->full_shape != shard.full_shape || t->flat_begin != shard.flat_begin ||
               t->local.numel() != shard.numel) {
      std::ostringstream s;
      s << shard.name << ": state dict holds elements [" << t->flat_begin << ", "
        << t->flat_begin + t->local.numel() << ") of " << c10::IntArrayRef(t->full_shape)
        << ", this rank holds [" << shard.flat_begin << ", " << shard.flat_begin + shard.numel
        << ") of " << c10::IntArrayRef(shard.full_shape);
      problem(s.str());
    }
  }
  for (const auto& b : root.named_buffers()) {
    const ShardedTensor* t = state_dict.find(b.key());
    if (!t) {
      problem(b.key() + ": missing");
    } else if (t->local.numel() != b.value().numel()) {
      problem(b.key() + ": buffer size differs");
    }
  }
  TORCH_CHECK(count == 0, "fsdp: load_sharded_state_dict found ", count, " problem(s):",
              problems.str(),
              "\nA sharded state dict loads only at the world size and sharding it was taken at; "
              "use full_state_dict()/load_full_state_dict() or a checkpoint to change them");
  at::NoGradGuard no_grad;
  for (const auto& shard : shards) {
    if (shard.numel == 0) continue;
    shard.param.detach().view({-1}).copy_(state_dict.find(shard.name)->local);
  }
  for (auto& b : root.named_buffers()) b.value().view({-1}).copy_(state_dict.find(b.key())->local);
}

}  // namespace fsdp
