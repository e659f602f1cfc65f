// The runtime switches a unit has after fully_shard, as FSDP2's FSDPModule
// has them (see [Note: runtime switches] in src/unit_state.h):
//  - set_gradient_divide_factor: the reduction divides by the factor, not by
//    the number of ranks;
//  - set_all_reduce_hook: called once per backward on each unit's complete,
//    divided gradient shard;
//  - set_requires_gradient_sync(on, recurse = false) on one nested unit;
//  - set_requires_all_reduce: hybrid sharding reduce-scatters every
//    micro-batch and all-reduces across replicas only at the last;
//  - set_reshard_after_forward: free or keep the gathered parameters after
//    forward, changed between steps;
//  - unshard / reshard: forwards between them gather nothing, and give the
//    one-process outputs.
// Each compares, in float64, every rank's gradient shards with one process
// on the same global batch, within 1e-6 relative.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int64_t kRows = 12;  // global batch rows: divisible by 2, 3 and 4
constexpr int kMicro = 3;      // micro-batches per step
constexpr double kRtol = 1e-6;

// A sum of squared errors divided by the global row count, as a loop that
// normalizes by the global token count computes it on each rank. Summed over
// ranks (not averaged) it is the one-process loss.
at::Tensor global_count_loss(const at::Tensor& out, const at::Tensor& target) {
  return (out - target).pow(2).sum() / kRows;
}

struct Data {
  at::Tensor x;  // [kMicro, kRows, 7]
  at::Tensor y;  // [kMicro, kRows, 3]
};

Data make_data() {
  at::manual_seed(341);
  return {at::randn({kMicro, kRows, 7}, at::kDouble), at::randn({kMicro, kRows, 3}, at::kDouble)};
}

Mlp make_initial() {
  at::manual_seed(342);
  Mlp initial(7, 10, 3, /*units=*/true);
  initial->to(at::kDouble);
  return initial;
}

// The one-process reference after `micro` micro-batches of backward, each
// loss divided by `micro` (gradient accumulation).
Mlp reference_after(const Mlp& initial, const Data& data, int micro) {
  Mlp reference(7, 10, 3, true);
  reference->to(at::kDouble);
  copy_state(*reference, *initial);
  for (int m = 0; m < micro; ++m) {
    (global_count_loss(reference->forward(data.x[m]), data.y[m]) / micro).backward();
  }
  return reference;
}

// A sharded copy of `initial` on this rank.
Mlp local_copy(const Mlp& initial) {
  Mlp local(7, 10, 3, true);
  local->to(at::kDouble);
  copy_state(*local, *initial);
  return local;
}

// Expects this rank's shard of every gradient to be `expected_of(reference
// gradient)`'s same slice, within kRtol of the largest expected element.
void expect_grads_match(const UnitModule& root, torch::nn::Module& reference,
                        const std::function<at::Tensor(const at::Tensor&)>& expected_of,
                        const std::string& who) {
  auto ref_params = reference.named_parameters();
  for (const auto& shard : param_shards(root)) {
    if (shard.numel == 0) continue;
    const at::Tensor expected_full = expected_of(ref_params[shard.name].grad());
    at::Tensor expected = expected_full.reshape(-1).narrow(0, shard.flat_begin, shard.numel);
    const at::Tensor& grad = shard.param.grad();
    ASSERT_TRUE(grad.defined()) << who << ": " << shard.name << " has no gradient";
    const double scale = std::max(expected_full.abs().max().item<double>(), 1e-12);
    const double diff = (grad.reshape(-1) - expected).abs().max().item<double>();
    EXPECT_LE(diff / scale, kRtol) << who << ": gradient of " << shard.name << " differs by "
                                   << diff << " (largest element " << scale << ")";
  }
}

at::Tensor as_is(const at::Tensor& grad) { return grad; }

UnitModule& nested_unit(const Mlp& local, size_t index) {
  auto* unit = dynamic_cast<UnitModule*>(local->layers->ptr(index).get());
  TORCH_CHECK(unit != nullptr, "layers.", index, " is not a unit");
  return *unit;
}

// How each case shards: a strategy at a world size (the hybrid ones on a
// 2 x 2 mesh).
struct Layout {
  ShardingStrategy strategy;
  int world_size;
};

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  return std::string(fsdp::to_string(info.param.strategy)) + "_ws" +
         std::to_string(info.param.world_size);
}

void PrintTo(const Layout& layout, std::ostream* os) { *os << layout_name({layout, 0}); }

// A sharded, a ZeRO-2 and a hybrid case.
const auto kShardingLayouts = ::testing::Values(Layout{ShardingStrategy::kFullShard, 3},
                                                Layout{ShardingStrategy::kShardGradOp, 2},
                                                Layout{ShardingStrategy::kHybridShard, 4});

bool is_hybrid(ShardingStrategy strategy) {
  return strategy == ShardingStrategy::kHybridShard ||
         strategy == ShardingStrategy::kHybridShardZero2;
}

FullyShardOptions options_for(const Layout& layout, RankContext& ctx) {
  if (is_hybrid(layout.strategy)) {
    return FullyShardOptions(make_hybrid_mesh(ctx.group, 2)).strategy(layout.strategy);
  }
  return FullyShardOptions(ctx.group).strategy(layout.strategy);
}

// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------

// Kept gathered after forward, freed again, then kept on the root alone;
// the gradients match the reference every time.
TEST(ReshardAfterForward, SwitchesBetweenSteps) {
  const Data data = make_data();
  const Mlp initial = make_initial();
  run_ranks(2, [&](RankContext& ctx) {
    Mlp local = local_copy(initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    Mlp reference = reference_after(initial, data, 0);
    const int64_t root_bytes = memory_stats(*model).root_unit_bytes;
    const std::function<void()> switch_before_step[] = {
        [&] { model->set_reshard_after_forward(false); },
        [&] { model->set_reshard_after_forward(true); },
        [&] { model->set_reshard_after_forward(false, /*recurse=*/false); },
    };
    const int64_t gathered_after_forward[] = {-1, 0, root_bytes};  // -1: every unit, below
    for (int step = 0; step < 3; ++step) {
      switch_before_step[step]();
      at::Tensor x = local_rows(data.x[step], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(data.y[step], ctx.rank, ctx.world_size);
      at::Tensor loss = global_count_loss(model->forward(x), y) * ctx.world_size;
      const MemoryStats stats = memory_stats(*model);
      const std::string where = rank_str(ctx) + " step " + std::to_string(step);
      if (gathered_after_forward[step] < 0) {
        EXPECT_EQ(stats.gathered_units, 3) << where;
      } else {
        EXPECT_EQ(stats.gathered_param_bytes, gathered_after_forward[step]) << where;
      }
      loss.backward();
      global_count_loss(reference->forward(data.x[step]), data.y[step]).backward();
      expect_grads_match(*model, *reference, as_is, where);
    }
  });
}

// ---------------------------------------------------------------------------

class UnshardReshard : public ::testing::TestWithParam<Layout> {};

// The first forward also agrees on the execution order with a small
// all-gather per unit (see [Note: execution order validation]); run it
// before counting gathers.
template <typename Model>
void warm_up(Model& model, const Data& data) {
  at::NoGradGuard no_grad;
  model->forward(data.x[0]);
}

ProcessGroup& shard_group(const FullyShardOptions& options, RankContext& ctx) {
  return options.mesh() ? *options.mesh()->shard : *ctx.group;
}

// A generation loop: unshard the whole model once, run forwards without grad
// (no gathers, one-process outputs), reshard (nothing left gathered), then
// train as usual.
TEST_P(UnshardReshard, HeldForwardsGatherNothingAndTrainingFollows) {
  const Layout layout = GetParam();
  const Data data = make_data();
  const Mlp initial = make_initial();
  Mlp reference = reference_after(initial, data, 1);
  run_ranks(layout.world_size, [&](RankContext& ctx) {
    Mlp local = local_copy(initial);
    const FullyShardOptions options = options_for(layout, ctx);
    auto model = fully_shard(local, options);
    ProcessGroup& shards = shard_group(options, ctx);
    warm_up(model, data);
    const CommCounters before_unshard = shards.counters();
    model->unshard(/*async_op=*/false, /*recurse=*/true);
    EXPECT_EQ((shards.counters() - before_unshard).all_gather, 3) << rank_str(ctx);
    EXPECT_EQ(memory_stats(*model).gathered_units, 3) << rank_str(ctx);
    const CommCounters before_forwards = shards.counters();
    for (int m = 0; m < kMicro; ++m) {
      at::NoGradGuard no_grad;
      const at::Tensor expected = reference->forward(data.x[m]);
      const double diff = (model->forward(data.x[m]) - expected).abs().max().item<double>();
      EXPECT_LE(diff, kRtol * expected.abs().max().item<double>())
          << rank_str(ctx) << " forward " << m;
    }
    EXPECT_EQ((shards.counters() - before_forwards).all_gather, 0) << rank_str(ctx);
    model->reshard(/*recurse=*/true);
    EXPECT_EQ(memory_stats(*model).gathered_param_bytes, 0) << rank_str(ctx);
    at::Tensor x = local_rows(data.x[0], ctx.rank, ctx.world_size);
    at::Tensor y = local_rows(data.y[0], ctx.rank, ctx.world_size);
    (global_count_loss(model->forward(x), y) * ctx.world_size).backward();
    expect_grads_match(*model, *reference, as_is, rank_str(ctx));
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, UnshardReshard, kShardingLayouts, layout_name);

// unshard() on one nested unit holds that unit only; async_op returns before
// the gather is waited for, and a forward waits for it.
TEST(UnshardOneUnit, NotRecursiveByDefaultAndAsyncWaitsInForward) {
  const Data data = make_data();
  const Mlp initial = make_initial();
  Mlp reference = reference_after(initial, data, 0);
  run_ranks(2, [&](RankContext& ctx) {
    Mlp local = local_copy(initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    warm_up(model, data);
    UnshardHandle handle = nested_unit(local, 2).unshard(/*async_op=*/true);
    at::NoGradGuard no_grad;
    const at::Tensor expected = reference->forward(data.x[0]);
    for (int call = 0; call < 2; ++call) {
      const CommCounters before = ctx.group->counters();
      const at::Tensor out = model->forward(data.x[0]);
      EXPECT_LE((out - expected).abs().max().item<double>(),
                kRtol * expected.abs().max().item<double>())
          << rank_str(ctx);
      // The root and the other Linear unit gather on every call.
      EXPECT_EQ((ctx.group->counters() - before).all_gather, 2) << rank_str(ctx);
      EXPECT_EQ(memory_stats(*model).gathered_units, 1) << rank_str(ctx);
    }
    handle.wait();  // already finished by the forward: a no-op
    nested_unit(local, 2).reshard();
    EXPECT_EQ(memory_stats(*model).gathered_units, 0) << rank_str(ctx);
  });
}

// What the hold cannot allow is refused, naming reshard(); after a refused
// training forward the hold still serves forwards without grad.
TEST(UnshardErrors, NamesTheFix) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp unsharded(4, 5, 2, true);
    EXPECT_THROWS_WITH(nested_unit(unsharded, 0).unshard(),
                       "fsdp: unshard needs a unit sharded by fully_shard");
    Mlp local(4, 5, 2, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    const at::Tensor x = at::randn({2, 4});
    at::Tensor pending = model->forward(x);
    EXPECT_THROWS_WITH(model->unshard(),
                       "fsdp: unshard() of unit '<root>' was called after a "
                       "forward whose backward has not run");
    pending.sum().backward();
    model->unshard(false, /*recurse=*/true);
    EXPECT_THROWS_WITH(model->forward(x),
                       "fsdp: forward of unit '<root>' ran with grad enabled "
                       "while unshard() holds it gathered; call reshard()");
    {
      at::NoGradGuard no_grad;
      const CommCounters before = ctx.group->counters();
      model->forward(x);
      EXPECT_EQ((ctx.group->counters() - before).all_gather, 0) << rank_str(ctx);
    }
    EXPECT_THROWS_WITH((void)SummonFullParams(*model),
                       "fsdp: unit '<root>' is held gathered by "
                       "unshard(); call reshard() before SummonFullParams");
    torch::optim::SGD sgd(model->parameters(), 0.1);
    sgd.step();  // steps the shards under the held copies
    at::NoGradGuard no_grad;
    EXPECT_THROWS_WITH(model->forward(x),
                       "fsdp: the parameters of unit '<root>' changed after "
                       "unshard() (an optimizer step or a checkpoint load?)");
    model->reshard(/*recurse=*/true);
    model->forward(x);  // gathers the stepped shards
  });
}

// ---------------------------------------------------------------------------

class ReshardAfterBackward : public ::testing::TestWithParam<Layout> {};

// Gradient accumulation with set_reshard_after_backward(false) on all
// micro-batches but the last: each later forward reuses the copy the last
// backward kept (no gathers), the last backward frees everything, and the
// accumulated gradients are one process's.
TEST_P(ReshardAfterBackward, KeptCopyServesTheNextMicroBatch) {
  const Layout layout = GetParam();
  const Data data = make_data();
  const Mlp initial = make_initial();
  Mlp reference = reference_after(initial, data, kMicro);
  run_ranks(layout.world_size, [&](RankContext& ctx) {
    Mlp local = local_copy(initial);
    const FullyShardOptions options = options_for(layout, ctx);
    auto model = fully_shard(local, options);
    ProcessGroup& shards = shard_group(options, ctx);
    warm_up(model, data);
    for (int m = 0; m < kMicro; ++m) {
      const bool last = m == kMicro - 1;
      model->set_requires_gradient_sync(last);
      model->set_reshard_after_backward(last);
      at::Tensor x = local_rows(data.x[m], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(data.y[m], ctx.rank, ctx.world_size);
      const CommCounters before_forward = shards.counters();
      at::Tensor loss = global_count_loss(model->forward(x), y) * ctx.world_size / kMicro;
      const int64_t forward_gathers = (shards.counters() - before_forward).all_gather;
      EXPECT_EQ(forward_gathers, m == 0 ? 3 : 0) << rank_str(ctx) << " micro-batch " << m;
      loss.backward();
      EXPECT_EQ(memory_stats(*model).gathered_units, last ? 0 : 3) << rank_str(ctx);
    }
    expect_grads_match(*model, *reference, as_is, rank_str(ctx));
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, ReshardAfterBackward, kShardingLayouts, layout_name);

// A kept copy is only reused while the shards are the ones it was gathered
// from: after an optimizer step the next forward gathers afresh, and gives
// what a forward after an explicit reshard() gives. reshard() frees it.
TEST(ReshardAfterBackwardStale, AStepMakesTheNextForwardGather) {
  const Data data = make_data();
  const Mlp initial = make_initial();
  run_ranks(2, [&](RankContext& ctx) {
    Mlp local = local_copy(initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    warm_up(model, data);
    model->set_reshard_after_backward(false);
    const at::Tensor x = local_rows(data.x[0], ctx.rank, ctx.world_size);
    model->forward(x).pow(2).sum().backward();
    EXPECT_EQ(memory_stats(*model).gathered_units, 3) << rank_str(ctx);
    model->reshard(/*recurse=*/true);
    EXPECT_EQ(memory_stats(*model).gathered_param_bytes, 0) << rank_str(ctx);
    model->forward(x).pow(2).sum().backward();
    torch::optim::SGD sgd(model->parameters(), 0.1);
    sgd.step();
    at::NoGradGuard no_grad;
    const CommCounters before = ctx.group->counters();
    const at::Tensor after_step = model->forward(x);
    EXPECT_EQ((ctx.group->counters() - before).all_gather, 3) << rank_str(ctx);
    model->reshard(/*recurse=*/true);
    EXPECT_TRUE(at::equal(after_step, model->forward(x))) << rank_str(ctx);
  });
}

}  // namespace
}  // namespace fsdp::testing
