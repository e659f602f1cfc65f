#pragma once
// What the runtime-switch tests share (test_reduction_switches.cpp and
// test_gather_switches.cpp; see [Note: runtime switches] in
// src/unit_state.h): a float64 Mlp, its micro-batches, the one-process
// reference they are compared with, and the sharding layouts each switch is
// tried under. Each test compares every rank's gradient shards with the
// reference on the same global batch, within kSwitchRtol relative.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/rank_harness.h"

namespace fsdp::testing::switches {

constexpr int64_t kRows = 12;  // global batch rows: divisible by 2, 3 and 4
constexpr int kMicro = 3;      // micro-batches per step
constexpr double kSwitchRtol = 1e-6;

// A sum of squared errors divided by the global row count, as a loop that
// normalizes by the global token count computes it on each rank. Summed over
// ranks (not averaged) it is the one-process loss.
at::Tensor global_count_loss(const at::Tensor& out, const at::Tensor& target);

struct Data {
  at::Tensor x;  // [kMicro, kRows, 7]
  at::Tensor y;  // [kMicro, kRows, 3]
};
Data make_data();

// The initial Mlp(7, 10, 3) with units, in float64.
Mlp make_initial();

// The one-process reference after `micro` micro-batches of backward, each
// loss divided by `micro` (gradient accumulation).
Mlp reference_after(const Mlp& initial, const Data& data, int micro);

// A copy of `initial` on this rank, to be sharded.
Mlp local_copy(const Mlp& initial);

// Expects this rank's shard of every gradient to be `expected_of(reference
// gradient)`'s same slice, within kSwitchRtol of the largest expected element.
void expect_grads_match(const UnitModule& root, torch::nn::Module& reference,
                        const std::function<at::Tensor(const at::Tensor&)>& expected_of,
                        const std::string& who);
inline at::Tensor as_is(const at::Tensor& grad) { return grad; }

// layers[index] of `local`, which must be a unit.
UnitModule& nested_unit(const Mlp& local, size_t index);

// How a case shards: a strategy at a world size (the hybrid ones on a 2 x 2
// mesh).
struct Layout {
  ShardingStrategy strategy;
  int world_size;
};
std::string layout_name(const ::testing::TestParamInfo<Layout>& info);
void PrintTo(const Layout& layout, std::ostream* os);

// A sharded, a ZeRO-2 and a hybrid case.
inline const auto kShardingLayouts = ::testing::Values(Layout{ShardingStrategy::kFullShard, 3},
                                                       Layout{ShardingStrategy::kShardGradOp, 2},
                                                       Layout{ShardingStrategy::kHybridShard, 4});

bool is_hybrid(ShardingStrategy strategy);
FullyShardOptions options_for(const Layout& layout, RankContext& ctx);
// The group a layout's units gather in.
ProcessGroup& shard_group(const FullyShardOptions& options, RankContext& ctx);

}  // namespace fsdp::testing::switches
