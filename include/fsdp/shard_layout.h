#pragma once
// How one unit's parameters map onto a flat buffer and onto ranks.
//
// [Note: flat shard layout]
// A unit's parameters are laid end to end in one flat buffer of
// `total_numel` elements, padded at the end to `padded_numel`, a multiple of
// the world size. Rank r owns elements [r * shard_numel, (r+1) * shard_numel).
// We chose this (FSDP1's FlatParameter) over per-parameter dim-0 sharding
// (FSDP2) because unsharding is then zero-copy: one all-gather writes the
// whole unit, and each parameter's full value is a contiguous slice of it,
// with no copy-out per parameter per step. A parameter's sharded value is its
// intersection with the local shard: a 1-D run of its flattened elements,
// possibly empty (FSDP1's use_orig_params). bench/fsdp-bench measures it.
//
// [Note: whole-parameter placement]
// Optimizers such as Muon and Shampoo need each matrix whole on one rank
// (FSDP2's shard_placement_fn). Under Placement::kWholeParams every
// parameter lies entirely inside one rank's shard: the parameters are
// balanced by size (largest first, each to the least-loaded rank), and each
// rank's shard is as large as the most loaded rank's parameters, padded at
// its end. The shards stay equal, so the all-gather and the reduce-scatter
// are the same collectives as under the even split: the reduce-scatter
// delivers each gradient whole to its owner, and the next all-gather hands
// the owner's update to everyone. The cost is padding: a shard is at most
// the largest parameter larger than under the even split.
//
// Everything here is pure arithmetic, independent of tensors and ranks'
// state, so it is tested exhaustively in tests/test_shard_layout.cpp.

#include <cstdint>
#include <vector>

namespace fsdp {

class ShardLayout {
 public:
  // One parameter's place in the flat buffer.
  struct Slot {
    int64_t offset = 0;  // first element in the flat buffer
    int64_t numel = 0;
  };

  // One parameter's intersection with one rank's shard.
  struct LocalSlice {
    int64_t param_begin = 0;   // first element within the flattened parameter
    int64_t numel = 0;         // may be 0: the rank holds none of it
    int64_t shard_offset = 0;  // where that run starts within the shard
  };

  // How parameters are placed on ranks.
  enum class Placement {
    kEvenSplit,    // end to end, in order; a parameter may straddle shards
    kWholeParams,  // each whole in one rank's shard; see [Note: whole-parameter placement]
  };

  ShardLayout() = default;
  // `numels`: element counts of the parameters, in the unit's order.
  // `world_size`: ranks sharing the unit (>= 1).
  ShardLayout(const std::vector<int64_t>& numels, int world_size,
              Placement placement = Placement::kEvenSplit);

  int world_size() const { return world_size_; }
  Placement placement() const { return placement_; }
  int64_t num_params() const { return static_cast<int64_t>(slots_.size()); }
  int64_t total_numel() const { return total_numel_; }
  int64_t padded_numel() const { return shard_numel_ * world_size_; }
  int64_t shard_numel() const { return shard_numel_; }
  int64_t padding() const { return padded_numel() - total_numel_; }
  const Slot& slot(int64_t param) const { return slots_.at(param); }

  // Parameter `param`'s run of elements on rank `rank`.
  LocalSlice local_slice(int64_t param, int rank) const;

  // The range of flat elements that `rank` owns: [begin, begin + shard_numel).
  int64_t shard_begin(int rank) const { return rank * shard_numel_; }

 private:
  void place_end_to_end(const std::vector<int64_t>& numels);
  void place_whole(const std::vector<int64_t>& numels);

  std::vector<Slot> slots_;
  int world_size_ = 1;
  Placement placement_ = Placement::kEvenSplit;
  int64_t total_numel_ = 0;
  int64_t shard_numel_ = 0;
};

}  // namespace fsdp
