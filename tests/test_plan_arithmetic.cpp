// fsdp-plan's arithmetic against cases computed by hand (docs/planner.md has
// the formulas): shard padding, each memory term, the ring costs, the step
// time's parts, the fit search's order, the published anchors (ZeRO's 16
// bytes per parameter, DeepSpeed's estimator), and the errors bad input gets.
// Pure arithmetic: the planner's sources are compiled in, no ranks run.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "collective_cost.h"
#include "fit_search.h"
#include "fsdp/file_tree.h"
#include "fsdp/models/gpt.h"
#include "fsdp/models/gpt_size.h"
#include "hardware_profile.h"
#include "median_profile.h"
#include "memory_plan.h"
#include "model_spec.h"
#include "published_anchors.h"
#include "time_plan.h"
#include "training_setup.h"

namespace fsdp_plan {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// A root of 10 elements (2 parameters) and two units of 7 (3 parameters),
// with per-token activations small enough to add up by hand.
ModelSpec hand_model() {
  ModelSpec m;
  m.name = "hand";
  m.tokens_per_sample = 4;
  m.logits_per_token = 1;           // the loss keeps 8 bytes a token, its backward makes 8 more
  m.boundary_bytes_per_token = 2;   // the gradient between units
  UnitSpec root;
  root.name = "root";
  root.root = true;
  root.param_numels = {6, 4};
  root.activation_bytes_per_token = 8;
  root.forward_flops_per_token = 10;
  UnitSpec block;
  block.param_numels = {3, 2, 2};
  block.activation_bytes_per_token = 100;
  block.checkpointed_bytes_per_token = 4;
  block.backward_workspace_bytes_per_token = 20;
  block.forward_flops_per_token = 1000;
  m.units = {root, block, block};
  m.units[1].name = "block1";
  m.units[2].name = "block2";
  return m;
}

TrainingSetup two_ranks() {
  TrainingSetup s;
  s.nproc_per_node = 2;
  return s;
}

TEST(PlanMemory, ShardsArePaddedLikeTheLibrary) {
  EXPECT_EQ(shard_numel(10, 2), 5);
  EXPECT_EQ(shard_numel(7, 2), 4);
  EXPECT_EQ(shard_numel(7, 4), 2);
  EXPECT_EQ(shard_numel(7, 1), 7);  // nothing sharded: the unit, unpadded
  // The library's own function: an empty unit still holds one element per rank.
  EXPECT_EQ(shard_numel(0, 4), 1);
}

// 12 tokens at 2 ranks, fp32, prefetch 2. Per unit (bytes):
//   root:  gathered 40, reduce 3 rows x (5 + 2) x 4 = 84, full grads 40, kept 96
//   block: gathered 32, reduce 3 x (4 + 3) x 4 = 84, full grads 28, kept 1200,
//          workspace 240
//   loss: kept 96, gradients 96; gradient between units 24
// Phases:
//   loss backward     gathered 40, grads 40, acts 96 + 2400 + 96, head 96 = 2768
//   block2 backward   gathered 40 + 32 + 32 (block1 prefetched), grads 40,
//                     acts 1200 (block1) + 1200 + 240 + 24 = 2808  <- the peak
//   block2 reduction  104 + reduce 84 + grads 68 + acts 1224 = 1480
//   block1 backward   72 + reduce 84 (block2's) + grads 40 + acts 1464 = 1660
TEST(PlanMemory, EveryTermOfAHandModelAtTwoRanks) {
  TrainingSetup s = two_ranks();
  s.micro_batch = 3;
  const MemoryPlan p = plan_memory(hand_model(), s);
  EXPECT_DOUBLE_EQ(p.sharded_params, 13 * 4);  // shards of 5 + 4 + 4
  EXPECT_DOUBLE_EQ(p.sharded_grads, 13 * 4);
  EXPECT_DOUBLE_EQ(p.optimizer_state, 2 * 13 * 4);  // AdamW: two moments
  EXPECT_DOUBLE_EQ(p.comm_buffers, 7 * 4);          // one shard row of the largest reduction
  EXPECT_EQ(p.peak_phase, "backward of block2");
  EXPECT_DOUBLE_EQ(p.gathered_params, 104);
  EXPECT_DOUBLE_EQ(p.reduce_buffers, 0);
  EXPECT_DOUBLE_EQ(p.unsharded_grads, 40);
  EXPECT_DOUBLE_EQ(p.activations, 2664);
  EXPECT_DOUBLE_EQ(p.head_transient, 0);
  EXPECT_DOUBLE_EQ(p.device_peak, 208 + 28 + 2808);
  EXPECT_DOUBLE_EQ(p.host_bytes, 0);
  EXPECT_DOUBLE_EQ(p.build_peak, 24 * 4 + 13 * 4);  // the full model, then its shards
}

// 4 tokens: root kept 32, block kept 400 and workspace 80, loss 32 + 32,
// gradient between units 8.
TEST(PlanMemory, StrategiesChangeWhatIsGatheredAndKept) {
  TrainingSetup s = two_ranks();
  s.prefetch = false;  // block2's backward: the root and block2 only
  MemoryPlan p = plan_memory(hand_model(), s);
  EXPECT_EQ(p.peak_phase, "backward of block2");
  EXPECT_DOUBLE_EQ(p.gathered_params, (10 + 8) * 4);
  EXPECT_DOUBLE_EQ(p.device_peak, 208 + 28 + 72 + 40 + (400 + 400 + 80 + 8));

  s.strategy = Strategy::kShardGradOp;  // nothing resharded after forward: all gathered
  p = plan_memory(hand_model(), s);
  EXPECT_EQ(p.peak_phase, "loss backward");
  EXPECT_DOUBLE_EQ(p.gathered_params, (10 + 8 + 8) * 4);
  EXPECT_DOUBLE_EQ(p.head_transient, 32);

  s.strategy = Strategy::kNoShard;  // parameters are their own shards, replicas all-reduce
  p = plan_memory(hand_model(), s);
  EXPECT_DOUBLE_EQ(p.sharded_params, 24 * 4);
  EXPECT_DOUBLE_EQ(p.gathered_params, 0);
  EXPECT_DOUBLE_EQ(p.comm_buffers, 6 * 4);  // half of the root's row (10 + 2 flags)
  EXPECT_EQ(p.peak_phase, "loss backward");
  EXPECT_DOUBLE_EQ(p.device_peak, 4 * 96 + 24 + 40 + (32 + 800 + 32) + 32);

  s.strategy = Strategy::kFullShard;
  s.offload = true;  // persistent state on the host
  p = plan_memory(hand_model(), s);
  EXPECT_DOUBLE_EQ(p.host_bytes, 13 * 4 * 4);
  EXPECT_DOUBLE_EQ(p.device_peak, p.comm_buffers + p.gathered_params + p.reduce_buffers +
                                      p.unsharded_grads + p.activations + p.head_transient);
}

TEST(PlanMemory, NoShardKeepsTwoUnitsGradientsUntilTheyAreReduced) {
  TrainingSetup s = two_ranks();
  s.strategy = Strategy::kNoShard;
  s.micro_batch = 0;  // no activations: the gradients alone decide the peak
  const MemoryPlan p = plan_memory(hand_model(), s);
  // block1's reduction: root's and both blocks' full gradients, both
  // blocks' one-row buffers (7 + 3 flags).
  EXPECT_EQ(p.peak_phase, "reduction of block1");
  EXPECT_DOUBLE_EQ(p.unsharded_grads, (10 + 7 + 7) * 4);
  EXPECT_DOUBLE_EQ(p.reduce_buffers, 2 * (7 + 3) * 4);
}

// 4 tokens. Without checkpointing block2's backward holds both blocks'
// activations (400 each); checkpointed blocks keep their input (16) and
// rebuild theirs (400) in their own backward, so the peak moves to block1's
// backward, where block2's reduction (84) is still in flight.
TEST(PlanMemory, CheckpointingKeepsInputsAndRecomputesOneUnit) {
  TrainingSetup s = two_ranks();
  MemoryPlan p = plan_memory(hand_model(), s);
  EXPECT_EQ(p.peak_phase, "backward of block2");
  EXPECT_DOUBLE_EQ(p.activations, 400 + 400 + 80 + 8);
  for (int every : {1, 2}) {  // every-2 checkpoints block1 only
    s.checkpoint_every = every;
    p = plan_memory(hand_model(), s);
    EXPECT_EQ(p.peak_phase, "backward of block1") << every;
    EXPECT_DOUBLE_EQ(p.activations, 400 + 80 + 8) << every;
    EXPECT_DOUBLE_EQ(p.device_peak, 208 + 28 + 72 + 84 + 40 + 488) << every;
  }
  s.bf16 = true;  // activations in the compute dtype
  EXPECT_DOUBLE_EQ(plan_memory(hand_model(), s).activations, (400 + 80 + 8) / 2);
}

TEST(PlanMemory, DeferredInitNeverHoldsTheWholeModel) {
  const MemoryPlan p = plan_memory(hand_model(), two_ranks(), PlanOptions{true});
  EXPECT_DOUBLE_EQ(p.build_peak, 13 * 4 + 7 * 4);  // shards plus one unit's full parameters
}

TEST(PlanMemory, ModelStatesAreSixteenBytesAParameterOverTheRanks) {
  ModelSpec m;
  m.units = {UnitSpec{"all", false, {int64_t{1} << 30}}};
  for (int ranks : {1, 8, 64, 4096}) {
    TrainingSetup s;
    s.nproc_per_node = ranks;
    const MemoryPlan p = plan_memory(m, s);
    const double states = p.sharded_params + p.sharded_grads + p.optimizer_state;
    EXPECT_NEAR(states, 16.0 * (int64_t{1} << 30) / ranks, 16.0) << ranks << " ranks";
  }
}

TEST(PlanMemory, TheGptSpecHasTheGptsParameters) {
  const GptSizes sizes{6, 96, 4, 32, 256};
  const ModelSpec m = gpt_model_spec(sizes);
  EXPECT_EQ(m.numel(), fsdp::models::gpt_parameter_count<int64_t>(256, 32, 96, 6));
  EXPECT_EQ(m.units.size(), 7u);
  EXPECT_TRUE(m.units[0].root);
}

TEST(PlanTime, RingCostsAreTheAlphaBetaFormulas) {
  const Link link{1e-5, 1e9};
  EXPECT_DOUBLE_EQ(ring_all_gather_s(1e6, 4, link), 3e-5 + 0.75e-3);
  EXPECT_DOUBLE_EQ(ring_reduce_scatter_s(1e6, 4, link), 3e-5 + 0.75e-3);
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(1e6, 4, link), 2 * (3e-5 + 0.75e-3));
  EXPECT_DOUBLE_EQ(ring_all_gather_s(1e6, 1, link), 0);
  HardwareProfile hw;
  hw.intra_node = Link{1, 1};
  hw.inter_node = Link{2, 2};
  EXPECT_EQ(&ring_link(8, 8, hw), &hw.intra_node);
  EXPECT_EQ(&ring_link(16, 8, hw), &hw.inter_node);
}

HardwareProfile hand_profile() {
  HardwareProfile hw;
  hw.name = "hand";
  hw.peak_flops_fp32 = 1e6;
  hw.peak_flops_bf16 = 2e6;
  hw.memory_bytes_per_s = 1e6;
  hw.memory_bytes = 1e6;
  hw.host_memory_bytes = 1e9;
  hw.ranks_per_node = 8;
  hw.intra_node = Link{1e-3, 1e4};
  hw.inter_node = Link{1e-2, 1e3};
  return hw;
}

TEST(PlanTime, ComputeCommunicationAndWhatIsExposed) {
  TrainingSetup s = two_ranks();
  s.micro_batch = 1;  // 4 tokens
  s.prefetch = false;
  const TimePlan t = plan_time(hand_model(), s, hand_profile());
  // Forward: (10 + 1000 + 1000) flops/token x 4 tokens at 1e6 flop/s; backward twice that.
  EXPECT_DOUBLE_EQ(t.compute_s, 3 * 2010 * 4 / 1e6);
  // Gathers: the root (40 B) once, each unit (32 B) in forward and again in
  // backward; reduce-scatters of 40, 32, 32 B. Each ring step costs alpha,
  // and half of each buffer crosses the link.
  const auto ring = [](double bytes) { return 1e-3 + 0.5 * bytes / 1e4; };
  EXPECT_DOUBLE_EQ(t.communication_s, ring(40) + 4 * ring(32) + ring(40) + 2 * ring(32));
  // Without prefetch every gather is waited for. Backward runs block2, block,
  // root: block2's reduction hides behind block's backward (8 ms), block's
  // behind the root's (80 us, too short), and the root's is waited for.
  const double block_backward = 2 * 1000 * 4 / 1e6, root_backward = 2 * 10 * 4 / 1e6;
  EXPECT_DOUBLE_EQ(t.exposed_comm_s, ring(40) + 4 * ring(32) +
                                         std::max(0.0, ring(32) - block_backward) +
                                         (ring(32) - root_backward) + ring(40));
  EXPECT_DOUBLE_EQ(t.bytes_sent, 0.5 * (40 + 2 * 32 + 2 * 32) + 0.5 * (40 + 32 + 32));
  EXPECT_DOUBLE_EQ(t.step_s, t.compute_s + t.exposed_comm_s + t.optimizer_s);
  EXPECT_DOUBLE_EQ(t.tokens_per_s, 8 / t.step_s);
}

TEST(PlanTime, TheOptimizerStreamsItsPassesOverTheShardAtMemoryBandwidth) {
  // The hand model's shards at two ranks: 5 + 4 + 4 = 13 elements of 4
  // bytes, at 1e6 bytes/s; AdamW 16 copy-passes, SGD with momentum 5, SGD 2.
  TrainingSetup s = two_ranks();
  EXPECT_DOUBLE_EQ(plan_time(hand_model(), s, hand_profile()).optimizer_s, 16 * 13 * 4 / 1e6);
  s.optimizer = Optimizer::kSgdMomentum;
  EXPECT_DOUBLE_EQ(plan_time(hand_model(), s, hand_profile()).optimizer_s, 5 * 13 * 4 / 1e6);
  s.optimizer = Optimizer::kSgd;
  EXPECT_DOUBLE_EQ(plan_time(hand_model(), s, hand_profile()).optimizer_s, 2 * 13 * 4 / 1e6);
  // Offloaded, the step runs on the host at its own bandwidth.
  s.offload = true;
  HardwareProfile hw = hand_profile();
  hw.host_memory_bytes_per_s = 4e6;
  EXPECT_DOUBLE_EQ(plan_time(hand_model(), s, hw).optimizer_s, 2 * 13 * 4 / 4e6);
}

TEST(PlanTime, PrefetchHidesGathersBehindCompute) {
  TrainingSetup s = two_ranks();
  HardwareProfile hw = hand_profile();
  const double without = [&] { s.prefetch = false; return plan_time(hand_model(), s, hw).exposed_comm_s; }();
  s.prefetch = true;
  const TimePlan with = plan_time(hand_model(), s, hw);
  EXPECT_LT(with.exposed_comm_s, without);
  EXPECT_DOUBLE_EQ(with.communication_s, plan_time(hand_model(), s, hw).communication_s);
}

TEST(PlanTime, SynchronizationIsChargedPerRingStep) {
  HardwareProfile hw = hand_profile();
  hw.sync_per_ring_step_s = 1e-3;
  TrainingSetup s;
  s.nproc_per_node = 4;
  // full: the root gathers once and reduce-scatters (3 + 3 ring steps); each
  // block gathers in forward and backward and reduce-scatters (3 x 3).
  TimePlan t = plan_time(hand_model(), s, hw);
  EXPECT_DOUBLE_EQ(t.ring_steps, 6 + 2 * 9);
  EXPECT_DOUBLE_EQ(t.sync_overhead_s, 24e-3);
  EXPECT_DOUBLE_EQ(t.step_s, t.compute_s + t.exposed_comm_s + t.sync_overhead_s + t.optimizer_s);
  s.strategy = Strategy::kShardGradOp;  // no gather in backward
  EXPECT_DOUBLE_EQ(plan_time(hand_model(), s, hw).ring_steps, 3 * 6);
  s.strategy = Strategy::kNoShard;  // one all-reduce per unit: 2 x 3 steps
  EXPECT_DOUBLE_EQ(plan_time(hand_model(), s, hw).ring_steps, 3 * 6);
  s.strategy = Strategy::kFullShard;
  s.grad_accum = 2;  // gathers every micro-batch, reductions once a step
  EXPECT_DOUBLE_EQ(plan_time(hand_model(), s, hw).ring_steps, (2 * 3 + 3) + 2 * (2 * 6 + 3));
  s.grad_accum = 1;
  s.bf16 = true;  // bf16 steps pay the bf16 figure
  hw.bf16_sync_per_ring_step_s = 0.5e-3;
  EXPECT_DOUBLE_EQ(plan_time(hand_model(), s, hw).sync_overhead_s, 12e-3);
  s.bf16 = false;
  s.nproc_per_node = 1;  // nothing to synchronize
  t = plan_time(hand_model(), s, hw);
  EXPECT_DOUBLE_EQ(t.ring_steps, 0);
  EXPECT_DOUBLE_EQ(t.sync_overhead_s, 0);
}

TEST(PlanTime, ProfilesKeepTheSyncCostAndRefuseANegativeOne) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("plan_profile_" + std::to_string(::getpid()) + ".json");
  HardwareProfile hw = hand_profile();
  hw.sync_per_ring_step_s = 2.5e-4;
  hw.bf16_sync_per_ring_step_s = 1.5e-4;
  save_profile(hw, path.string());
  EXPECT_DOUBLE_EQ(load_profile(path.string()).sync_per_ring_step_s, 2.5e-4);
  EXPECT_DOUBLE_EQ(load_profile(path.string()).bf16_sync_per_ring_step_s, 1.5e-4);
  for (const std::string key : {"sync_per_ring_step_s", "bf16_sync_per_ring_step_s"}) {
    HardwareProfile bad = hw;
    (key == "sync_per_ring_step_s" ? bad.sync_per_ring_step_s : bad.bf16_sync_per_ring_step_s) = -1;
    save_profile(bad, path.string());
    try {
      load_profile(path.string());
      FAIL() << "a negative " << key << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(key + " is -1"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
}

TEST(PlanTime, AProfileWithoutABf16SyncCostUsesTheFp32One) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("plan_profile_old_" + std::to_string(::getpid()) + ".json");
  HardwareProfile hw = hand_profile();
  hw.sync_per_ring_step_s = 2.5e-4;
  save_profile(hw, path.string());
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const std::string key = "\"bf16_sync_per_ring_step_s\"";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, key.size(), "\"unused_key\"");  // a profile from before the bf16 figure
  std::ofstream(path) << text;
  EXPECT_DOUBLE_EQ(load_profile(path.string()).bf16_sync_per_ring_step_s, 2.5e-4);
  std::filesystem::remove(path);
}

TEST(PlanProfiles, MedianKeepsFiguresFittedTogetherTogether) {
  // Achieved fp32 rates 50, 80 and 135 flop/s; per-figure medians would
  // pair pass c's peak (150) with pass a's fraction (0.5): 75, no pass's.
  std::vector<HardwareProfile> passes(3, hand_profile());
  const double peaks[] = {100, 200, 150}, fractions[] = {0.5, 0.4, 0.9};
  const double bandwidths[] = {3e6, 1e6, 2e6}, alphas[] = {5e-3, 1e-3, 9e-3};
  for (int i = 0; i < 3; ++i) {
    passes[i].peak_flops_fp32 = peaks[i];
    passes[i].achieved_fraction = fractions[i];
    passes[i].unit_overhead_s = 1e-3 * (i + 1);
    passes[i].memory_bytes_per_s = bandwidths[i];
    passes[i].intra_node = Link{alphas[i], 1e4 * (i + 1)};
    passes[i].runtime_bytes = 1e6 * (i + 1);
  }
  const HardwareProfile m = median_profile(passes);
  EXPECT_DOUBLE_EQ(m.peak_flops_fp32, 200);  // pass b: the median compute
  EXPECT_DOUBLE_EQ(m.achieved_fraction, 0.4);
  EXPECT_DOUBLE_EQ(m.unit_overhead_s, 2e-3);
  EXPECT_DOUBLE_EQ(m.memory_bytes_per_s, 2e6);  // a figure of its own: its median
  // A 1 MiB gather (alpha + 1 MiB / bandwidth): a 105 s, b 52 s, c 35 s; b is the median.
  EXPECT_DOUBLE_EQ(m.intra_node.latency_s, 1e-3);
  EXPECT_DOUBLE_EQ(m.intra_node.bytes_per_s, 2e4);
  EXPECT_DOUBLE_EQ(m.runtime_bytes, 1e6);  // memory figures: the first pass's
}

TEST(PlanFit, FastestFirstAndOnlyWhatFits) {
  const ModelSpec gpt = gpt_model_spec(GptSizes{24, 2048, 16, 2048, 50304});
  TrainingSetup base;
  base.nproc_per_node = 8;
  base.micro_batch = 4;
  const HardwareProfile h100 = load_profile("h100-sxm");
  const auto fits = search_fits(gpt, base, h100, {}, 0.1);
  ASSERT_FALSE(fits.empty());
  for (size_t i = 1; i < fits.size(); ++i) {
    EXPECT_LE(fits[i - 1].time.step_s, 1.0101 * fits[i].time.step_s) << i;
    if (fits[i - 1].time.step_s > fits[i].time.step_s) {  // a tie within 1%: less memory first
      EXPECT_LE(fits[i - 1].memory.device_peak, fits[i].memory.device_peak) << i;
    }
  }
  for (const auto& c : fits) {
    EXPECT_LE(h100.resident_bytes(c.memory.device_peak), 0.9 * h100.memory_bytes) << c.setup.micro_batch;
    EXPECT_EQ(c.setup.micro_batch * c.setup.grad_accum, 4);  // the batch is kept
  }
  // NO_SHARD (DDP) at micro-batch 4 without checkpointing or offload is
  // listed exactly when its own plan fits. With the explicit attention
  // (LibTorch 1.13) it keeps ~58 GB of activations beside 21 GB of unsharded
  // AdamW state, over 72 GB; SDPA (2.x) keeps no scores, and it fits.
  TrainingSetup ddp = base;
  ddp.strategy = Strategy::kNoShard;
  const bool ddp_fits = fits_in(plan_memory(gpt, ddp), ddp, h100, 0.1);
  EXPECT_EQ(ddp_fits, !fsdp::models::CausalSelfAttentionImpl::keeps_attention_scores());
  const bool ddp_listed = std::any_of(fits.begin(), fits.end(), [](const Candidate& c) {
    return c.setup.strategy == Strategy::kNoShard && c.setup.micro_batch == 4 &&
           c.setup.checkpoint_every == 0 && !c.setup.offload;
  });
  EXPECT_EQ(ddp_listed, ddp_fits);
  TrainingSetup one = base;
  one.nproc_per_node = 1;
  HardwareProfile small = h100;
  small.memory_bytes = 1 * kGiB;
  EXPECT_TRUE(search_fits(gpt, one, small, {}, 0.1).empty());
}

TEST(PlanAnchors, ZeroPaperFigures) {
  const double psi = 7.5e9;
  EXPECT_NEAR(zero_paper_bytes(0, psi, 64) / 1e9, 120, 0.05);
  EXPECT_NEAR(zero_paper_bytes(1, psi, 64) / 1e9, 31.4, 0.05);
  EXPECT_NEAR(zero_paper_bytes(2, psi, 64) / 1e9, 16.6, 0.05);
  EXPECT_NEAR(zero_paper_bytes(3, psi, 64) / 1e9, 1.875, 1e-9);
}

TEST(PlanAnchors, DeepSpeedDocumentedEstimates) {
  // deepspeed.readthedocs.io "Memory Requirements", t5-3b on 8 GPUs, GiB.
  auto e = deepspeed_zero3_estimate(2851e6, 32e6, 8, 1, true, true, true);
  EXPECT_NEAR(e.gpu_bytes / kGiB, 0.12, 0.005);
  EXPECT_NEAR(e.cpu_bytes / kGiB, 71.69, 0.005);
  e = deepspeed_zero3_estimate(2851e6, 32e6, 8, 1, false, false, true);
  EXPECT_NEAR(e.gpu_bytes / kGiB, 6.09, 0.005);
  EXPECT_NEAR(e.cpu_bytes / kGiB, 1.43, 0.005);
  // Hugging Face's DeepSpeed guide, T0_3B on 1 GPU (counts truncated to 1M).
  e = deepspeed_zero3_estimate(2783e6, 65e6, 1, 1, false, false, false);
  EXPECT_NEAR(e.gpu_bytes / kGiB, 46.91, 0.02);
  EXPECT_NEAR(e.cpu_bytes / kGiB, 15.56, 0.02);
}

TEST(PlanInput, BadSetupsNameTheValueAndTheFix) {
  TrainingSetup s = two_ranks();
  s.strategy = Strategy::kHybridShard;
  EXPECT_NE(setup_problem(s).find("--nnodes is 1"), std::string::npos) << setup_problem(s);
  s = two_ranks();
  s.reshard_group = 3;
  EXPECT_NE(setup_problem(s).find("--reshard-group 3"), std::string::npos) << setup_problem(s);
  EXPECT_THROW(parse_strategy("zero3"), std::runtime_error);
  EXPECT_THROW(parse_checkpointing("every-0"), std::runtime_error);
  EXPECT_EQ(parse_checkpointing("every-3"), 3);
  try {
    load_profile("b200");
    FAIL() << "an unknown profile was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("h100-sxm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("calibrate"), std::string::npos) << e.what();
  }
}

TEST(PlanInput, ModelFilesAndTheirErrors) {
  const auto dir = std::filesystem::temp_directory_path() / ("plan_model_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream((dir / name).string()) << text;
    return (dir / name).string();
  };
  const ModelSpec m = model_spec_from_json(write("ok.json", R"({"name": "m", "tokens_per_sample": 16,
      "units": [{"name": "layer", "repeat": 3, "params": [[4, 8], [8]]},
                {"name": "embed", "root": true, "params": [[100, 4]]}]})"));
  ASSERT_EQ(m.units.size(), 4u);
  EXPECT_TRUE(m.units[0].root) << "the root is moved first";
  EXPECT_EQ(m.numel(), 400 + 3 * 40);
  EXPECT_EQ(m.units[1].name, "layer.0");
  EXPECT_DOUBLE_EQ(m.units[1].forward_flops_per_token, 80);
  try {
    model_spec_from_json(write("bad.json", R"({"units": [{"name": "x", "params": [[4, -1]]}]})"));
    FAIL() << "a negative size was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("unit 'x'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("-1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model_spec_from_json(write("empty.json", "{}")), std::runtime_error);
  EXPECT_THROW(model_spec_from_json((dir / "missing.json").string()), std::runtime_error);
  fsdp::remove_tree_or_throw(dir.string());
}

}  // namespace
}  // namespace fsdp_plan
