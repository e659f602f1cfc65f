// The runtime switches of a unit after fully_shard that change when its
// parameters are gathered and freed, as FSDP2's FSDPModule has them (see
// [Note: runtime switches] in src/unit_state.h):
//  - set_reshard_after_forward: free or keep the gathered parameters after
//    forward, changed between steps;
//  - unshard / reshard: forwards between them gather nothing, and give the
//    one-process outputs;
//  - set_reshard_after_backward: a copy kept after backward serves the next
//    micro-batch's forward.
// test_reduction_switches.cpp has those that change how gradients are
// reduced. Each compares, in float64, every rank's gradient shards (or
// outputs) with one process on the same global batch, within 1e-6 relative.

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
      EXPECT_LE(diff, kSwitchRtol * expected.abs().max().item<double>())
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
                kSwitchRtol * expected.abs().max().item<double>())
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
