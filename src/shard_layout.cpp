#include "fsdp/shard_layout.h"

#include "fsdp/shard_size.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>

namespace fsdp {

namespace {

// Longest processing time first: each parameter, largest first, goes to the
// least-loaded rank (ties to the lower index and the lower rank), which
// keeps the largest load within the largest parameter of the ideal. Returns
// each parameter's rank.
std::vector<int> balance_by_size(const std::vector<int64_t>& numels, int world_size) {
  std::vector<size_t> largest_first(numels.size());
  std::iota(largest_first.begin(), largest_first.end(), size_t{0});
  std::stable_sort(largest_first.begin(), largest_first.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> loads(static_cast<size_t>(world_size), 0);
  std::vector<int> owners(numels.size(), 0);
  for (size_t param : largest_first) {
    const auto least = std::min_element(loads.begin(), loads.end());
    owners[param] = static_cast<int>(least - loads.begin());
    *least += numels[param];
  }
  return owners;
}

}  // namespace

ShardLayout::ShardLayout(const std::vector<int64_t>& numels, int world_size, Placement placement)
    : world_size_(world_size), placement_(placement) {
  TORCH_CHECK(world_size >= 1, "fsdp: cannot shard over ", world_size,
              " ranks; the world size must be at least 1");
  for (int64_t numel : numels) {
    TORCH_CHECK(numel >= 0, "fsdp: a parameter cannot have ", numel, " elements");
    total_numel_ += numel;
  }
  slots_.reserve(numels.size());
  if (placement == Placement::kWholeParams) {
    place_whole(numels);
  } else {
    place_end_to_end(numels);
  }
}

void ShardLayout::place_end_to_end(const std::vector<int64_t>& numels) {
  int64_t offset = 0;
  for (int64_t numel : numels) {
    slots_.push_back(Slot{offset, numel});
    offset += numel;
  }
  shard_numel_ = fsdp::shard_numel(total_numel_, world_size_);
}

// Within its owner's shard, each parameter follows the owner's earlier ones
// in the unit's order.
void ShardLayout::place_whole(const std::vector<int64_t>& numels) {
  const std::vector<int> owners = balance_by_size(numels, world_size_);
  std::vector<int64_t> used(static_cast<size_t>(world_size_), 0);
  for (size_t i = 0; i < numels.size(); ++i) used[static_cast<size_t>(owners[i])] += numels[i];
  shard_numel_ = std::max<int64_t>(1, *std::max_element(used.begin(), used.end()));
  std::fill(used.begin(), used.end(), 0);
  for (size_t i = 0; i < numels.size(); ++i) {
    const auto owner = static_cast<size_t>(owners[i]);
    slots_.push_back(Slot{static_cast<int64_t>(owner) * shard_numel_ + used[owner], numels[i]});
    used[owner] += numels[i];
  }
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
