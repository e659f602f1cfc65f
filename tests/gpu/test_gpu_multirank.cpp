// The multi-rank GPU lane (label "gpu"): FSDP on CUDA at world sizes 2-4,
// every rank a process on the one GPU, its groups Gloo with host staging
// (NCCL cannot put two ranks on one GPU; see [Note: collectives of CUDA
// tensors through host memory]). A staged group takes CUDA tensors only, as
// NCCL does, so a tensor handed to a group on the wrong device fails here
// as it would on a multi-GPU NCCL job. Each case trains against one process
// on CUDA with TF32 off: fp32 gradients within 1e-6 (relative to the
// tensor's largest element), losses and parameters within 1e-5.

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "fsdp/checkpoint/training_state.h"
#include "fsdp/clip_grad.h"
#include "fsdp/fsdp.h"
#include "fsdp/introspection.h"
#include "fsdp/state_dict.h"
#include "fsdp/summon_full_params.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"
#include "harness/rank_processes.h"
#include "harness/temp_dir.h"

namespace fsdp::testing {
namespace {

using models::GPT;
constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 12;  // divisible by world sizes 2-4

RankRunOptions gpu_lane() {
  RankRunOptions options;
  options.host_staging = true;
  options.timeout = std::chrono::milliseconds(180000);
  options.comm_timeout = std::chrono::milliseconds(60000);
  return options;
}

struct LaneCase {
  std::string what;
  int world_size = 2;
  // This rank's options beyond the lane's group (strategy, mesh, policies).
  std::function<void(FullyShardOptions&, RankContext&)> configure = nullptr;
  bool checkpoint_activations = false;  // every block recomputed in backward
  bool accumulate = false;              // two micro-batches, the first under NoSyncGuard
  double clip_norm_type = 0;            // > 0: clip_grad_norm_tensor_ to 0.5 with this p
  bool bf16 = false;                    // bf16 compute: losses within 3e-2, no gradient bound
};

// Largest |actual - expected| over the largest |expected|, in float64 on the CPU.
double tensor_relative(const at::Tensor& actual, const at::Tensor& expected) {
  const at::Tensor a = actual.detach().to(at::kCPU, at::kDouble);
  const at::Tensor e = expected.detach().to(at::kCPU, at::kDouble);
  const double scale = std::max(e.abs().max().item<double>(), 1e-12);
  return (a - e).abs().max().item<double>() / scale;
}

// Each rank's gradient shards against the same slices of the reference's.
void expect_grad_shards_match(const UnitModule& root, torch::nn::Module& reference, double rtol,
                              const std::string& context) {
  auto ref_params = reference.named_parameters();
  for (const auto& shard : param_shards(root)) {
    const at::Tensor* ref = ref_params.find(shard.name);
    ASSERT_NE(ref, nullptr) << context << ": " << shard.name;
    if (shard.numel == 0) continue;
    ASSERT_TRUE(shard.param.grad().defined()) << context << ": no gradient for " << shard.name;
    const at::Tensor expected = ref->grad().reshape(-1).narrow(0, shard.flat_begin, shard.numel);
    EXPECT_LE(tensor_relative(shard.param.grad().reshape(-1), expected), rtol)
        << context << ": gradient of " << shard.name;
  }
}

// The one-process reference: SGD with momentum on CUDA, clipped like the
// case; returns each step's loss and leaves the model trained.
std::vector<double> train_reference(const LaneCase& c, GPT& reference, const at::Tensor& tokens) {
  torch::optim::SGD opt(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    at::Tensor loss = models::lm_loss(reference->forward(tokens[s]), tokens[s]);
    loss.backward();
    if (c.clip_norm_type > 0) {
      torch::nn::utils::clip_grad_norm_(reference->parameters(), 0.5, c.clip_norm_type);
    }
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// One rank's forward and backward of its rows of `tokens` (two micro-batches
// when accumulating); returns the local loss.
at::Tensor rank_forward_backward(const LaneCase& c, Sharded<GPT>& model, const at::Tensor& rows) {
  if (!c.accumulate) {
    at::Tensor loss = models::lm_loss(model->forward(rows).to(at::kFloat), rows);
    loss.backward();
    return loss.detach();
  }
  const int64_t half = rows.size(0) / 2;
  at::Tensor total = at::zeros({}, rows.options().dtype(at::kFloat));
  for (int m = 0; m < 2; ++m) {
    const at::Tensor micro = rows.narrow(0, m * half, half);
    std::optional<NoSyncGuard> no_sync;
    if (m == 0) no_sync.emplace(*model);
    at::Tensor loss = models::lm_loss(model->forward(micro).to(at::kFloat), micro);
    (loss / 2).backward();
    total += loss.detach() / 2;
  }
  return total;
}

void run_lane(const LaneCase& c) {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::manual_seed(7);
  auto config = tiny_gpt_config(true);
  if (c.checkpoint_activations) config.checkpoint_every = 1;
  const at::Tensor tokens =
      at::randint(0, config.vocab_size, {kSteps, kGlobalBatch, config.context}).cuda();
  GPT initial(config);
  GPT reference(config);
  copy_state(*reference, *initial);
  reference->to(at::kCUDA);
  const std::vector<double> ref_losses = train_reference(c, reference, tokens);
  // The reference's (clipped) gradients of the first step, on a copy.
  GPT first_step(config);
  copy_state(*first_step, *initial);
  first_step->to(at::kCUDA);
  models::lm_loss(first_step->forward(tokens[0]), tokens[0]).backward();
  if (c.clip_norm_type > 0) {
    torch::nn::utils::clip_grad_norm_(first_step->parameters(), 0.5, c.clip_norm_type);
  }
  run_rank_processes(
      c.world_size,
      [&](RankContext& ctx) {
        const std::string who =
            c.what + " ws" + std::to_string(ctx.world_size) + " " + rank_str(ctx);
        GPT local(config);
        copy_state(*local, *initial);
        local->to(at::kCUDA);
        FullyShardOptions options(ctx.group);
        if (c.bf16) {
          options.mp(MixedPrecisionPolicy().param_dtype(at::kBFloat16).reduce_dtype(at::kFloat));
        }
        if (c.configure) c.configure(options, ctx);
        auto model = fully_shard(local, options);
        torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
        for (int s = 0; s < kSteps; ++s) {
          const at::Tensor rows = local_rows(tokens[s], ctx.rank, ctx.world_size);
          opt.zero_grad();
          const at::Tensor loss = rank_forward_backward(c, model, rows);
          if (c.clip_norm_type > 0) {
            const at::Tensor norm = clip_grad_norm_tensor_(*model, 0.5, c.clip_norm_type);
            EXPECT_TRUE(norm.is_cuda()) << who << ": the norm stays on the GPU";
          }
          if (s == 0 && !c.bf16) expect_grad_shards_match(*model, *first_step, 1e-6, who);
          opt.step();
          const double global = global_mean(*ctx.group, loss.item<double>());
          EXPECT_LE(relative_diff(global, ref_losses[s]), c.bf16 ? 3e-2 : 1e-5)
              << who << " step " << s << ": " << global << " vs " << ref_losses[s];
        }
        if (!c.bf16) expect_shards_match(*model, *reference, 1e-5, 1e-5, who);
      },
      gpu_lane());  // one process per rank: see harness/rank_processes.h
}

class GpuLane : public ::testing::TestWithParam<LaneCase> {};

TEST_P(GpuLane, MatchesOneProcessOnCuda) {
  ASSERT_TRUE(at::hasCUDA()) << "this test needs a CUDA device";
  run_lane(GetParam());
}

std::function<void(FullyShardOptions&, RankContext&)> strategy(ShardingStrategy s) {
  return [s](FullyShardOptions& o, RankContext&) { o.strategy(s); };
}

std::vector<LaneCase> lane_cases() {
  std::vector<LaneCase> cases;
  for (int ws : {2, 3, 4}) {
    cases.push_back({"full", ws, strategy(ShardingStrategy::kFullShard)});
    cases.push_back({"grad_op", ws, strategy(ShardingStrategy::kShardGradOp)});
    cases.push_back({"no_shard", ws, strategy(ShardingStrategy::kNoShard)});
  }
  cases.push_back({"hybrid_2x2", 4, [](FullyShardOptions& o, RankContext& ctx) {
                     o.strategy(ShardingStrategy::kHybridShard)
                         .mesh(std::make_shared<DeviceMesh>(make_hybrid_mesh(ctx.group, 2)));
                   }});
  cases.push_back({"reshard_after_forward_2", 4, [](FullyShardOptions& o, RankContext&) {
                     o.reshard_after_forward_group_size(2);
                   }});
  LaneCase bf16{"bf16", 2};
  bf16.bf16 = true;
  cases.push_back(bf16);
  cases.push_back({"offload", 2, [](FullyShardOptions& o, RankContext&) {
                     o.offload(OffloadPolicy().offload_params(true));
                   }});
  LaneCase recompute{"activation_checkpointing", 3};
  recompute.checkpoint_activations = true;
  cases.push_back(recompute);
  LaneCase accumulate{"no_sync_accumulation", 2};
  accumulate.accumulate = true;
  cases.push_back(accumulate);
  for (int ws : {2, 3}) {
    LaneCase clip2{"clip_2norm", ws};
    clip2.clip_norm_type = 2;
    cases.push_back(clip2);
    LaneCase clip_inf{"clip_infnorm", ws};
    clip_inf.clip_norm_type = INFINITY;
    cases.push_back(clip_inf);
  }
  return cases;
}

std::string lane_name(const ::testing::TestParamInfo<LaneCase>& info) {
  return info.param.what + "_ws" + std::to_string(info.param.world_size);
}
void PrintTo(const LaneCase& c, std::ostream* os) { *os << c.what << " ws" << c.world_size; }

INSTANTIATE_TEST_SUITE_P(MultiRank, GpuLane, ::testing::ValuesIn(lane_cases()), lane_name);

// A sharded checkpoint saved by 2 ranks on CUDA loads at 3 ranks on CUDA and
// in one process on the CPU, equal to the full parameters that were saved.
TEST(GpuLaneCheckpoint, SavedOnCudaLoadsAtAnotherWorldSizeAndOnTheCpu) {
  ASSERT_TRUE(at::hasCUDA());
  TempDir tmp("gpu-lane-ckpt");
  const std::string dir = tmp / "ckpt";
  const auto config = tiny_gpt_config(true);
  at::manual_seed(3);
  GPT source(config);
  StateDict saved;
  run_ranks(
      2,
      [&](RankContext& ctx) {
        GPT local(config);
        copy_state(*local, *source);
        local->to(at::kCUDA);
        auto model = fully_shard(local, FullyShardOptions(ctx.group));
        ckpt::save_training_state(*ctx.group, dir, *model, nullptr);
        StateDict full = full_state_dict(*model);
        if (ctx.rank == 0) saved = full;
      },
      gpu_lane());
  ASSERT_FALSE(saved.is_empty());
  const auto expect_same = [&](const StateDict& got, const std::string& where) {
    for (const auto& item : saved) {
      const at::Tensor* t = got.find(item.key());
      ASSERT_NE(t, nullptr) << where << ": " << item.key();
      EXPECT_TRUE(at::equal(t->cpu(), item.value().cpu())) << where << ": " << item.key();
    }
  };
  run_ranks(
      3,
      [&](RankContext& ctx) {
        GPT local(config);
        local->to(at::kCUDA);
        auto model = fully_shard(local, FullyShardOptions(ctx.group));
        ckpt::load_training_state(*ctx.group, dir, *model, nullptr);
        const StateDict full = full_state_dict(*model);
        if (ctx.rank == 0) expect_same(full, "3 ranks on CUDA");
        SummonFullParams summoned(*model);
        for (const auto& p : model->named_parameters()) {
          EXPECT_TRUE(p.value().is_cuda()) << p.key();
        }
      },
      gpu_lane());
  GPT alone(config);
  const ProcessGroupPtr one = make_single_process_group();
  auto model = fully_shard(alone, FullyShardOptions(one));
  ckpt::load_training_state(*one, dir, *model, nullptr);
  expect_same(full_state_dict(*model), "1 process on the CPU");
}

}  // namespace
}  // namespace fsdp::testing
