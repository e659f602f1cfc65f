// The runtime switches of a unit after fully_shard that change how its
// gradients are reduced, as FSDP2's FSDPModule has them (see [Note: runtime
// switches] in src/unit_state.h):
//  - set_gradient_divide_factor: the reduction divides by the factor, not by
//    the number of ranks;
//  - set_all_reduce_hook: called once per backward on each unit's complete,
//    divided gradient shard;
//  - set_requires_gradient_sync(on, recurse = false) on one nested unit;
//  - set_requires_all_reduce: hybrid sharding reduce-scatters every
//    micro-batch and all-reduces across replicas only at the last.
// test_gather_switches.cpp has those that change when parameters are
// gathered. Each compares, in float64, every rank's gradient shards with one
// process on the same global batch, within 1e-6 relative.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"
#include "harness/switch_cases.h"

namespace fsdp::testing {
namespace {

using namespace switches;  // the shared cases: Data, Layout, reference_after, ...

class GradientDivideFactor : public ::testing::TestWithParam<Layout> {};

// A loss already normalized by the global row count needs a sum across
// ranks, not a mean: factor 1.0 gives exactly the one-process gradient.
TEST_P(GradientDivideFactor, OneSumsAcrossRanks) {
  const Layout layout = GetParam();
  const Data data = make_data();
  const Mlp initial = make_initial();
  Mlp reference = reference_after(initial, data, 1);
  run_ranks(layout.world_size, [&](RankContext& ctx) {
    Mlp local = local_copy(initial);
    auto model = fully_shard(local, options_for(layout, ctx));
    model->set_gradient_divide_factor(1.0);
    at::Tensor x = local_rows(data.x[0], ctx.rank, ctx.world_size);
    at::Tensor y = local_rows(data.y[0], ctx.rank, ctx.world_size);
    global_count_loss(model->forward(x), y).backward();
    expect_grads_match(*model, *reference, as_is, rank_str(ctx));
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, GradientDivideFactor, kShardingLayouts, layout_name);

TEST(GradientDivideFactorErrors, NamesTheValueAndTheFix) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp unsharded(4, 5, 2, true);
    EXPECT_THROWS_WITH(nested_unit(unsharded, 0).set_gradient_divide_factor(2.0),
                       "fsdp: set_gradient_divide_factor needs a unit sharded by fully_shard");
    Mlp local(4, 5, 2, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    EXPECT_THROWS_WITH(model->set_gradient_divide_factor(0.0),
                       "set_gradient_divide_factor(0): the factor must be a positive number");
    Mlp replicated(4, 5, 2, true);
    auto ddp =
        fully_shard(replicated, FullyShardOptions(ctx.group).strategy(ShardingStrategy::kNoShard));
    EXPECT_THROWS_WITH(ddp->set_gradient_divide_factor(1.0),
                       "unit '<root>' is not sharded (one rank in its shard group, no "
                       "mixed precision), and libfsdp does not support a divide factor there");
  });
}

// ---------------------------------------------------------------------------

class AllReduceHook : public ::testing::TestWithParam<Layout> {};

// The hook squares its tensor, which only gives the reference's squared
// gradient if it sees each unit's shard summed over every rank (replicas
// too) and divided, and its edit lands in .grad().
TEST_P(AllReduceHook, SeesEachUnitsCompleteShardOnce) {
  const Layout layout = GetParam();
  const Data data = make_data();
  const Mlp initial = make_initial();
  Mlp reference = reference_after(initial, data, 1);
  run_ranks(layout.world_size, [&](RankContext& ctx) {
    Mlp local = local_copy(initial);
    auto model = fully_shard(local, options_for(layout, ctx));
    int calls = 0;
    model->set_all_reduce_hook([&calls](const at::Tensor& shard) {
      ++calls;
      shard.mul_(shard);
    });
    at::Tensor x = local_rows(data.x[0], ctx.rank, ctx.world_size);
    at::Tensor y = local_rows(data.y[0], ctx.rank, ctx.world_size);
    (global_count_loss(model->forward(x), y) * ctx.world_size)
        .backward();  // averaged over ranks: the reference
    EXPECT_EQ(calls, 3) << rank_str(ctx) << ": one call per unit (root and two Linear units)";
    expect_grads_match(
        *model, *reference, [](const at::Tensor& g) { return g * g; }, rank_str(ctx));
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, AllReduceHook,
                         ::testing::Values(Layout{ShardingStrategy::kFullShard, 2},
                                           Layout{ShardingStrategy::kHybridShard, 4}),
                         layout_name);

// ---------------------------------------------------------------------------

// One nested unit skips gradient sync on all micro-batches but the last
// while the others reduce every time; the accumulated result is the same.
TEST(RequiresGradientSync, OnOneNestedUnitWithoutRecurse) {
  const Data data = make_data();
  const Mlp initial = make_initial();
  Mlp reference = reference_after(initial, data, kMicro);
  run_ranks(2, [&](RankContext& ctx) {
    Mlp local = local_copy(initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    UnitModule& first = nested_unit(local, 0);
    UnitModule& second = nested_unit(local, 2);
    for (int m = 0; m < kMicro; ++m) {
      const bool last = m == kMicro - 1;
      second.set_requires_gradient_sync(last, /*recurse=*/false);
      at::Tensor x = local_rows(data.x[m], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(data.y[m], ctx.rank, ctx.world_size);
      (global_count_loss(model->forward(x), y) * ctx.world_size / kMicro).backward();
      if (!last) {
        // Unsynced: the whole [10, 10] gradient on every rank; synced: a shard.
        EXPECT_EQ(second.named_parameters()["weight"].grad().dim(), 2) << rank_str(ctx);
        EXPECT_EQ(first.named_parameters()["weight"].grad().dim(), 1) << rank_str(ctx);
      }
    }
    expect_grads_match(*model, *reference, as_is, rank_str(ctx));
  });
}

// NoSyncGuard on a nested unit covers that unit only, and gives back its
// setting.
TEST(RequiresGradientSync, NoSyncGuardOnANestedUnit) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(4, 5, 2, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    UnitModule& second = nested_unit(local, 2);
    at::Tensor x = at::randn({2, 4});
    {
      NoSyncGuard no_sync(second);
      model->forward(x).sum().backward();
      EXPECT_EQ(second.named_parameters()["weight"].grad().dim(), 2) << rank_str(ctx);
      EXPECT_EQ(model->named_parameters()["layers.4.weight"].grad().dim(), 1) << rank_str(ctx);
    }
    model->forward(x).sum().backward();  // on again: this one reduces
    EXPECT_EQ(second.named_parameters()["weight"].grad().dim(), 1) << rank_str(ctx);
  });
}

// ---------------------------------------------------------------------------

class RequiresAllReduce : public ::testing::TestWithParam<Layout> {};

// Hybrid: every micro-batch reduce-scatters in the shard group; only the last
// all-reduces across replicas, carrying the earlier ones' sums with it.
// kNoShard: the all-reduce is its only reduction, so the earlier micro-batches
// keep full gradients as without sync.
TEST_P(RequiresAllReduce, OnlyTheLastMicroBatchAllReduces) {
  const Layout layout = GetParam();
  const Data data = make_data();
  const Mlp initial = make_initial();
  Mlp reference = reference_after(initial, data, kMicro);
  run_ranks(layout.world_size, [&](RankContext& ctx) {
    Mlp local = local_copy(initial);
    const FullyShardOptions options = options_for(layout, ctx);
    auto model = fully_shard(local, options);
    // kNoShard's replicas are the whole world.
    ProcessGroup& replicas = options.mesh() ? *options.mesh()->replicate : *ctx.group;
    for (int m = 0; m < kMicro; ++m) {
      const bool last = m == kMicro - 1;
      model->set_requires_all_reduce(last);
      const CommCounters before = replicas.counters();
      at::Tensor x = local_rows(data.x[m], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(data.y[m], ctx.rank, ctx.world_size);
      (global_count_loss(model->forward(x), y) * ctx.world_size / kMicro).backward();
      // One all-reduce per unit (the root and two Linear units), at the last.
      EXPECT_EQ((replicas.counters() - before).all_reduce, last ? 3 : 0)
          << rank_str(ctx) << " micro-batch " << m;
      if (!last && is_hybrid(layout.strategy)) {
        // .grad() lacks the held-back sums: a norm of it would be wrong.
        EXPECT_THROWS_WITH(clip_grad_norm_(*model, 1.0),
                           "fsdp: clip_grad_norm_ was called while gradients are held back");
      }
    }
    expect_grads_match(*model, *reference, as_is, rank_str(ctx));
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, RequiresAllReduce,
                         ::testing::Values(Layout{ShardingStrategy::kHybridShard, 4},
                                           Layout{ShardingStrategy::kNoShard, 2}),
                         layout_name);

//

}  // namespace
}  // namespace fsdp::testing
