// Memory, by tensor-byte accounting (docs/design.md section 8, "Memory"), at world
// size 4 with FULL_SHARD and AdamW on a small GPT:
//  - persistent bytes per rank (sharded params + sharded grads + AdamW's two
//    moments) are a quarter of the unsharded total (4 x the parameter bytes),
//    plus at most one padding element per unit and category;
//  - the gathered parameter bytes alive at once, in forward and in backward,
//    never exceed the root plus the two largest units, and the whole model
//    is never gathered at once;
//  - gradient reduction buffers: at most two units' at once, each of the size
//    computed from the unit's shapes ([Note: bounded gradient reductions]);
//  - once a step is over, nothing stays gathered or reducing.
// The bounds are computed here from the reference model's shapes, not read
// back from the library, so a wrong number in memory_stats() fails too.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <map>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kWorld = 4;
constexpr int64_t kFloat = 4;  // bytes

models::GPTConfig memory_config(int64_t n_layer) {
  auto config = tiny_gpt_config(true);
  config.d_model = 48;  // odd-ish sizes: units do not divide by 4 evenly
  config.n_layer = n_layer;
  config.vocab_size = 253;
  return config;
}

int64_t padded(int64_t numel, int world) { return (numel + world - 1) / world * world; }

// Unpadded element counts of each unit, keyed by unit path ("" = root),
// from the full shapes (the same on every rank).
std::map<std::string, int64_t> unit_numels(const UnitModule& root) {
  std::map<std::string, int64_t> numels;
  for (const auto& shard : param_shards(root)) {
    int64_t n = 1;
    for (int64_t d : shard.full_shape) n *= d;
    numels[shard.unit] += n;
  }
  return numels;
}

// Parameters per unit, keyed like unit_numels.
std::map<std::string, int64_t> unit_param_counts(const UnitModule& root) {
  std::map<std::string, int64_t> counts;
  for (const auto& shard : param_shards(root)) ++counts[shard.unit];
  return counts;
}

int64_t reference_param_bytes(const torch::nn::Module& reference) {
  int64_t total = 0;
  for (const auto& p : reference.parameters()) total += p.numel() * p.element_size();
  return total;
}

// What memory_stats must report, from the units' shapes alone.
struct ExpectedBytes {
  int64_t units = 0;
  int64_t root_gathered = 0;
  int64_t largest_block = 0;       // gathered
  int64_t all_units_gathered = 0;  // the whole model gathered at once
  int64_t padded_shards = 0;       // this rank's shard of every unit
  int64_t largest_reduce = 0;      // one reduction's buffer
  int64_t all_reduces = 0;         // every unit's buffer at once
};

ExpectedBytes expected_bytes(const UnitModule& model) {
  ExpectedBytes e;
  const auto numels = unit_numels(model);
  e.units = static_cast<int64_t>(numels.size());
  for (const auto& [unit, n] : numels) {
    const int64_t gathered = padded(n, kWorld) * kFloat;
    e.all_units_gathered += gathered;
    if (!unit.empty()) e.largest_block = std::max(e.largest_block, gathered);
    e.padded_shards += padded(n, kWorld) / kWorld * kFloat;
  }
  e.root_gathered = padded(numels.at(""), kWorld) * kFloat;
  // A reduction's buffer: a row per rank plus the result row, each a shard
  // plus one used-flag per parameter.
  for (const auto& [unit, count] : unit_param_counts(model)) {
    const int64_t row = padded(numels.at(unit), kWorld) / kWorld + count;
    const int64_t buffer = (kWorld + 1) * row * kFloat;
    e.largest_reduce = std::max(e.largest_reduce, buffer);
    e.all_reduces += buffer;
  }
  return e;
}

// Forward: the root keeps its parameters for backward; every block is freed,
// and at most two are gathered at once (one running, one prefetched).
void expect_forward_bytes(const MemoryStats& s, const ExpectedBytes& e, int64_t n_layer,
                          const std::string& where) {
  EXPECT_EQ(s.gathered_param_bytes, e.root_gathered) << where;
  EXPECT_LE(s.peak_gathered_param_bytes, e.root_gathered + 2 * e.largest_block)
      << where << ": forward gathered more than the root + 2 units";
  EXPECT_GE(s.peak_gathered_param_bytes, e.root_gathered + e.largest_block)
      << where << ": a block must be gathered while it runs";
  if (n_layer >= 3) {
    EXPECT_LT(s.peak_gathered_param_bytes, e.all_units_gathered)
        << where << ": the whole model was gathered at once in forward";
  }
}

// Backward: the same bound on gathers, at most two reductions' buffers
// alive at once, and nothing left gathered or in flight at the end.
void expect_backward_bytes(const MemoryStats& s, const ExpectedBytes& e, int64_t n_layer,
                           const std::string& where) {
  EXPECT_LE(s.peak_gathered_param_bytes, e.root_gathered + 2 * e.largest_block)
      << where << ": backward gathered more than the root + 2 units";
  EXPECT_GE(s.peak_gathered_param_bytes, e.root_gathered + e.largest_block) << where;
  EXPECT_EQ(s.gathered_param_bytes, 0) << where << ": parameters still gathered after backward";
  EXPECT_LE(s.peak_grad_reduce_units, 2) << where;
  EXPECT_LE(s.peak_grad_reduce_bytes, 2 * e.largest_reduce)
      << where << ": more than two reductions' buffers alive at once";
  EXPECT_GE(s.peak_grad_reduce_bytes, e.largest_reduce)
      << where << ": every unit reduces, so one buffer must be counted";
  if (n_layer >= 3) {
    EXPECT_LT(s.peak_gathered_param_bytes, e.all_units_gathered)
        << where << ": the whole model was gathered at once in backward";
    EXPECT_LT(s.peak_grad_reduce_bytes, e.all_reduces)
        << where << ": every unit's full gradient was alive at once";
  }
  EXPECT_EQ(s.grad_reduce_bytes, 0) << where << ": reductions still in flight after backward";
}

// Persistent state after a step: sharded params, sharded grads and AdamW
// moments. Each category holds ceil(unit / 4) elements per unit at most,
// under one element of padding per unit over a quarter.
void expect_persistent_bytes(const UnitModule& model, const torch::optim::AdamW& opt,
                             const ExpectedBytes& e, int64_t unsharded_param_bytes,
                             const std::string& who) {
  const MemoryStats stats = memory_stats(model);
  const int64_t optimizer_bytes = optimizer_state_bytes(opt);
  // AdamW's moments, counted here from its own state: two per parameter
  // shard, each the shard's size.
  int64_t expected_optimizer_bytes = 0;
  for (const auto& p : model.parameters()) expected_optimizer_bytes += 2 * p.numel() * kFloat;
  EXPECT_EQ(optimizer_bytes, expected_optimizer_bytes) << who;
  EXPECT_EQ(stats.sharded_grad_bytes, e.padded_shards) << who;
  const int64_t persistent = stats.sharded_param_bytes + stats.sharded_grad_bytes + optimizer_bytes;
  const int64_t unsharded_total = 4 * unsharded_param_bytes;  // params, grads, 2 moments
  const int64_t padding_allowance = 4 * e.units * kFloat;
  EXPECT_LE(persistent, unsharded_total / kWorld + padding_allowance)
      << who << ": persistent bytes " << persistent << " of an unsharded total "
      << unsharded_total;
  const double ratio = static_cast<double>(persistent) / static_cast<double>(unsharded_total);
  EXPECT_LE(ratio, 0.26) << who;
  EXPECT_GT(ratio, 0.2) << who << ": less than a quarter is not possible; accounting is off";
}

class MemoryAccounting : public ::testing::TestWithParam<int> {};

TEST_P(MemoryAccounting, FullShardAdamWAtWorldSizeFour) {
  const int64_t n_layer = GetParam();
  const auto config = memory_config(n_layer);
  at::manual_seed(11);
  models::GPT reference(memory_config(n_layer));
  const int64_t unsharded_param_bytes = reference_param_bytes(*reference);
  at::Tensor tokens = at::randint(0, config.vocab_size, {3, 8, config.context});

  run_ranks(kWorld, [&](RankContext& ctx) {
    models::GPT local(config);
    copy_state(*local, *reference);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
    const std::string who = "rank " + std::to_string(ctx.rank);

    const ExpectedBytes expected = expected_bytes(*model);
    ASSERT_EQ(expected.units, n_layer + 1) << who << ": root + one unit per block";
    const MemoryStats built = memory_stats(*model);
    EXPECT_EQ(built.unsharded_param_bytes, unsharded_param_bytes) << who;
    EXPECT_EQ(built.root_unit_bytes, expected.root_gathered) << who;
    EXPECT_EQ(built.largest_unit_bytes, expected.largest_block) << who;
    EXPECT_EQ(built.sharded_param_bytes, expected.padded_shards) << who;
    EXPECT_EQ(built.gathered_param_bytes, 0) << who << ": nothing gathered before the first step";

    for (int step = 0; step < 3; ++step) {
      const std::string where = who + " step " + std::to_string(step);
      at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
      reset_peak_memory_stats(*model);
      at::Tensor loss = models::lm_loss(model->forward(x), x);
      expect_forward_bytes(memory_stats(*model), expected, n_layer, where);
      opt.zero_grad();
      reset_peak_memory_stats(*model);
      loss.backward();
      expect_backward_bytes(memory_stats(*model), expected, n_layer, where);
      opt.step();
    }
    expect_persistent_bytes(*model, opt, expected, unsharded_param_bytes, who);
  });
}

INSTANTIATE_TEST_SUITE_P(Core, MemoryAccounting, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "layers" + std::to_string(info.param);
                         });

// Without prefetch a unit is gathered only while it runs: the peak is the
// root plus one unit.
TEST(MemoryAccountingNoPrefetch, PeakIsRootPlusOneUnit) {
  const auto config = memory_config(3);
  at::manual_seed(11);
  models::GPT reference(config);
  at::Tensor tokens = at::randint(0, config.vocab_size, {2, 8, config.context});
  run_ranks(kWorld, [&](RankContext& ctx) {
    models::GPT local(config);
    copy_state(*local, *reference);
    auto model =
        fully_shard(local, FullyShardOptions(ctx.group).prefetch(false));
    for (int step = 0; step < 2; ++step) {
      at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
      const MemoryStats stats = memory_stats(*model);
      reset_peak_memory_stats(*model);
      at::Tensor loss = models::lm_loss(model->forward(x), x);
      EXPECT_EQ(memory_stats(*model).peak_gathered_param_bytes,
                stats.root_unit_bytes + stats.largest_unit_bytes)
          << "rank " << ctx.rank << " forward, step " << step;
      reset_peak_memory_stats(*model);
      loss.backward();
      EXPECT_EQ(memory_stats(*model).peak_gathered_param_bytes,
                stats.root_unit_bytes + stats.largest_unit_bytes)
          << "rank " << ctx.rank << " backward, step " << step;
    }
  });
}

// reshard_after_forward(false) keeps every unit gathered from forward to
// backward: the peak is then the whole model, as documented.
TEST(MemoryAccountingNoReshard, KeepsTheWholeModelGathered) {
  const auto config = memory_config(3);
  at::manual_seed(11);
  models::GPT reference(config);
  at::Tensor tokens = at::randint(0, config.vocab_size, {1, 8, config.context});
  run_ranks(kWorld, [&](RankContext& ctx) {
    models::GPT local(config);
    copy_state(*local, *reference);
    auto model = fully_shard(
        local, FullyShardOptions(ctx.group).reshard_after_forward(false));
    int64_t all_units = 0;
    for (const auto& [unit, n] : unit_numels(*model)) all_units += padded(n, kWorld) * kFloat;
    at::Tensor x = local_rows(tokens[0], ctx.rank, ctx.world_size);
    at::Tensor loss = models::lm_loss(model->forward(x), x);
    EXPECT_EQ(memory_stats(*model).gathered_param_bytes, all_units) << "rank " << ctx.rank;
    loss.backward();
    EXPECT_EQ(memory_stats(*model).gathered_param_bytes, 0) << "rank " << ctx.rank;
  });
}

}  // namespace
}  // namespace fsdp::testing
