#include "fsdp/shard_layout.h"

#include "fsdp/shard_size.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace fsdp {

ShardLayout::ShardLayout(const std::vector<int64_t>& numels, int world_size)
    : world_size_(world_size) {
  TORCH_CHECK(world_size >= 1, "fsdp: cannot shard over ", world_size,
              " ranks; the world size must be at least 1");
  slots_.reserve(numels.size());
  for (int64_t numel : numels) {
    TORCH_CHECK(numel >= 0, "fsdp: a parameter cannot have ", numel, " elements");
    slots_.push_back(Slot{total_numel_, numel});
    total_numel_ += numel;
  }
  shard_numel_ = fsdp::shard_numel(total_numel_, world_size);
}

ShardLayout::LocalSlice ShardLayout::local_slice(int64_t param, int rank) const {
  TORCH_CHECK(rank >= 0 && rank < world_size_, "fsdp: rank ", rank,
              " is outside the layout's world of ", world_size_, " ranks");
  const Slot& s = slot(param);
  const int64_t shard_begin = rank * shard_numel_;
  const int64_t shard_end = shard_begin + shard_numel_;
  const int64_t begin = std::max(s.offset, shard_begin);
  const int64_t end = std::min(s.offset + s.numel, shard_end);
  if (begin >= end) {
    // Empty: keep offsets clamped so narrow(0, offset, 0) stays in range.
    const int64_t clamped = std::clamp(s.offset, shard_begin, shard_end);
    return LocalSlice{std::clamp<int64_t>(shard_begin - s.offset, 0, s.numel), 0,
                      clamped - shard_begin};
  }
  return LocalSlice{begin - s.offset, end - begin, begin - shard_begin};
}

}  // namespace fsdp
