#pragma once
// The shard-padding arithmetic of the flat layout, on its own: how many
// elements each rank's shard of a unit holds. Pure arithmetic with no
// dependency, so planners (tools/fsdp-plan) size shards exactly as the
// library does without linking it. See [Note: flat shard layout] in
// fsdp/shard_layout.h.

#include <algorithm>
#include <cstdint>

namespace fsdp {

// Elements in each rank's shard of a unit of `total_numel` elements over
// `shard_group_size` ranks: the total rounded up to a multiple of the group
// and split evenly. At least 1, so collectives never see an empty buffer.
// With one rank, the whole unit. Example: shard_numel(10, 4) == 3 (12
// padded elements).
constexpr int64_t shard_numel(int64_t total_numel, int shard_group_size) {
  return std::max<int64_t>(1, (total_numel + shard_group_size - 1) / shard_group_size);
}

}  // namespace fsdp
