// GPU tests (label "gpu"): run only where LibTorch has CUDA. Several NCCL
// ranks cannot share one GPU, so NCCL runs at world size 1 here and
// multi-rank logic is covered by the Gloo tests (docs/design.md section 8, "GPU").

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"

namespace fsdp::testing {
namespace {

ProcessGroupPtr nccl_world() {
  GroupOptions options;
  options.backend = CommBackend::kNccl;
  options.name = "nccl";
  return make_single_process_group(options);
}

TEST(Gpu, NcclCollectivesAtWorldSizeOne) {
  ASSERT_TRUE(at::hasCUDA()) << "this test needs a CUDA device";
  auto group = nccl_world();
  auto opts = at::TensorOptions().device(at::kCUDA);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
    at::Tensor shard = at::arange(5, opts.dtype(dtype));
    at::Tensor full = at::empty({5}, opts.dtype(dtype));
    group->all_gather(full, shard)->wait();
    EXPECT_TRUE(at::equal(full.cpu(), shard.cpu()));
    at::Tensor out = at::empty({5}, opts.dtype(dtype));
    at::Tensor in = at::arange(5, opts.dtype(dtype)) * 2;
    group->reduce_scatter(out, in.clone(), ReduceOp::kSum)->wait();
    EXPECT_TRUE(at::equal(out.cpu(), in.cpu()));
    at::Tensor t = at::ones({3}, opts.dtype(dtype));
    group->all_reduce(t, ReduceOp::kAvg)->wait();
    EXPECT_TRUE(at::equal(t.cpu(), at::ones({3}, at::TensorOptions().dtype(dtype))));
    group->broadcast(t, 0)->wait();
  }
  group->barrier()->wait();
  EXPECT_GE(group->counters().all_gather, 3);
}

// FSDP on CUDA at world size 1 against the same model trained plainly on CUDA.
void cuda_parity(const FullyShardOptions& extra, double loss_rtol, const char* what) {
  const int steps = 4;
  auto config = tiny_gpt_config(true);
  at::manual_seed(1);
  at::Tensor tokens = at::randint(0, config.vocab_size, {steps, 8, config.context}).cuda();
  models::GPT reference(config);
  models::GPT init(config);
  copy_state(*init, *reference);
  reference->to(at::kCUDA);
  auto ref_opt = make_optimizer(OptimizerKind::kAdamW, reference->parameters());
  std::vector<double> ref_losses;
  for (int s = 0; s < steps; ++s) {
    at::Tensor loss = models::lm_loss(reference->forward(tokens[s]).to(at::kFloat), tokens[s]);
    ref_opt->zero_grad();
    loss.backward();
    ref_opt->step();
    ref_losses.push_back(loss.item<double>());
  }
  models::GPT local(config);
  copy_state(*local, *init);
  local->to(at::kCUDA);
  FullyShardOptions options = extra;
  auto model = fully_shard(local, options.process_group(nccl_world()));
  auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
  for (int s = 0; s < steps; ++s) {
    at::Tensor logits = model->forward(tokens[s]);
    EXPECT_TRUE(logits.is_cuda()) << what;
    at::Tensor loss = models::lm_loss(logits.to(at::kFloat), tokens[s]);
    opt->zero_grad();
    loss.backward();
    opt->step();
    EXPECT_LE(relative_diff(loss.item<double>(), ref_losses[s]), loss_rtol)
        << what << " step " << s << ": " << loss.item<double>() << " vs " << ref_losses[s];
  }
  // Every parameter is used on every step, so a unit copies its
  // used-parameter flags to the GPU once, not once per step (each copy makes
  // the host wait for the GPU).
  for (const auto& info : unit_infos(*model)) {
    EXPECT_LE(info.flag_transfers, 1) << what << " unit '" << info.name << "'";
  }
}

TEST(Gpu, NcclGroupsTurnOffRecordStream) {
  ASSERT_TRUE(at::hasCUDA());
  auto group = nccl_world();
  const char* value = std::getenv("TORCH_NCCL_AVOID_RECORD_STREAMS");
  ASSERT_NE(value, nullptr) << "the NCCL adapter sets it unless the user did";
  EXPECT_STREQ(value, "1");
}

TEST(Gpu, FsdpOnCudaMatchesPlainTraining) {
  ASSERT_TRUE(at::hasCUDA());
  cuda_parity(FullyShardOptions(), 1e-5, "fp32");
}

TEST(Gpu, Bf16MixedPrecisionOnCudaTracksFp32) {
  ASSERT_TRUE(at::hasCUDA());
  // bf16 compute against an fp32 reference: within a few bf16 ulps (2^-8).
  cuda_parity(FullyShardOptions().mp(
                  MixedPrecisionPolicy().param_dtype(at::kBFloat16).reduce_dtype(at::kFloat)),
              3e-2, "bf16");
}

TEST(Gpu, CpuOffloadWithPinnedMemoryMatchesPlainTraining) {
  ASSERT_TRUE(at::hasCUDA());
  cuda_parity(FullyShardOptions().offload(OffloadPolicy().offload_params(true)), 1e-5, "offload");
  models::GPT gpt(tiny_gpt_config(true));
  gpt->to(at::kCUDA);
  auto model = fully_shard(gpt, FullyShardOptions(nccl_world())
                                    .offload(OffloadPolicy().offload_params(true)));
  for (const auto& p : model->parameters()) {
    EXPECT_TRUE(p.device().is_cpu()) << "offloaded shards live on the host";
    EXPECT_TRUE(p.is_pinned()) << "and in pinned memory, for non-blocking copies";
  }
}

// [Note: no host sync in a training step]
// A step of FSDP on CUDA queues its work and returns: the hooks, the
// collectives, clipping (clip_grad_norm_tensor_) and the optimizer never wait
// for the GPU, so the host runs ahead and the GPU never idles between
// kernels. CUDA's sync-debug mode set to error turns any synchronizing call
// (a .item(), a blocking copy, a stream sync) into an exception. The first
// steps may sync (the allocator warms up, a unit copies its used-parameter
// flags once); the steps after them must not.
TEST(Gpu, SteadyStateStepsMakeNoHostSync) {
  ASSERT_TRUE(at::hasCUDA());
  auto config = tiny_gpt_config(true);
  at::manual_seed(5);
  const at::Tensor tokens = at::randint(0, config.vocab_size, {6, 8, config.context}).cuda();
  models::GPT gpt(config);
  gpt->to(at::kCUDA);
  auto model = fully_shard(gpt, FullyShardOptions(nccl_world()));
  ASSERT_TRUE(FusedAdamW::fused_kernel_available()) << "a CUDA build is LibTorch 2.x";
  FusedAdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  const auto step = [&](int s) {
    opt.zero_grad();
    models::lm_loss(model->forward(tokens[s]), tokens[s]).backward();
    clip_grad_norm_tensor_(*model, 1.0);
    opt.step();
  };
  for (int s = 0; s < 2; ++s) step(s);
  auto& sync_debug = c10::cuda::warning_state();
  sync_debug.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  std::string error;
  try {
    for (int s = 2; s < 6; ++s) step(s);
  } catch (const std::exception& e) {
    error = e.what();
  }
  sync_debug.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  EXPECT_EQ(error, "") << "a steady-state step synchronized with the GPU";
}

}  // namespace
}  // namespace fsdp::testing
