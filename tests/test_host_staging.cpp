// GroupOptions::host_staging on the CPU: where a group's tensors live
// ([Note: a group's device]), the option's refusals, and the staging itself
// (copy in at issue, Gloo on host tensors, copy back in wait) at world sizes
// 2-4, sub-groups included, run on CPU tensors through the class's test seam.
// Its CUDA path runs in tests/gpu/test_gpu_multirank.cpp.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "comm/backends.h"
#include "comm/host_staged_group.h"
#include "fsdp/comm/process_group.h"
#include "harness/assertions.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

TEST(HostStaging, IsAGlooOptionOnly) {
  GroupOptions options;
  options.backend = CommBackend::kNccl;
  options.host_staging = true;
  options.name = "gpu";
  EXPECT_THROWS_WITH(make_single_process_group(options),
                     "fsdp: group 'gpu' asks for host_staging with the nccl backend; host staging "
                     "is a Gloo option (NCCL moves CUDA tensors itself): use CommBackend::kGloo "
                     "with it, or drop it");
}

TEST(HostStaging, TakesCudaTensorsOnlyAsNcclDoes) {
  GroupOptions options;
  options.host_staging = true;
  const auto staged = make_single_process_group(options);
  const auto plain = make_single_process_group();
  const at::Device gpu1(at::kCUDA, 1);
  EXPECT_EQ(collective_device(*staged, gpu1), gpu1);
  EXPECT_EQ(collective_device(*staged, at::Device(at::kCPU)), at::Device(at::kCUDA));
  EXPECT_EQ(collective_device(*plain, gpu1), at::Device(at::kCPU));
  EXPECT_EQ(collective_device(*plain, at::Device(at::kCPU)), at::Device(at::kCPU));
  // A CPU scalar handed to a staged group fails as it would on NCCL.
  at::Tensor cpu_scalar = at::zeros({1}, at::kDouble);
  EXPECT_THROWS_WITH(staged->all_reduce(cpu_scalar, ReduceOp::kSum),
                     "all_reduce on group 'world' (rank 0 of 1): a tensor is on cpu but a "
                     "host-staged Gloo group takes cuda tensors only, as NCCL does");
}

TEST(HostStaging, PlainGlooNamesStagingAsAFixForGpuTensors) {
  const auto gloo = make_single_process_group();
  at::Tensor meta = at::empty({4}, at::TensorOptions().device(at::kMeta));
  EXPECT_THROWS_WITH(gloo->all_reduce(meta, ReduceOp::kSum),
                     "or set GroupOptions::host_staging to move CUDA tensors through host memory");
}

// The staging logic on CPU tensors: this rank's group from `ctx`'s store,
// staged with kCPU in place of CUDA.
ProcessGroupPtr cpu_staged_group(RankContext& ctx) {
  GroupOptions options;
  options.host_staging = true;
  options.name = "staged";
  std::vector<int> ranks(ctx.world_size);
  for (int r = 0; r < ctx.world_size; ++r) ranks[r] = r;
  auto gloo =
      comm::make_gloo_group(ctx.store, "fsdp/staged", ctx.rank, ctx.world_size, options, ranks);
  return std::make_shared<comm::HostStagedGroup>(gloo, c10::DeviceType::CPU);
}

TEST(HostStaging, EveryCollectiveCopiesInAndBackAtWorldSizesTwoToFour) {
  for (int ws : {2, 3, 4}) {
    run_ranks(
        ws,
        [](RankContext& ctx) {
          const int n = ctx.world_size;
          const ProcessGroupPtr group = cpu_staged_group(ctx);
          ProcessGroup& g = *group;
          at::Tensor gathered = at::zeros({2 * n});
          WorkPtr work = g.all_gather(gathered, at::full({2}, static_cast<float>(ctx.rank)));
          work->wait();
          EXPECT_TRUE(at::equal(gathered, at::arange(n).to(at::kFloat).repeat_interleave(2)));
          gathered.zero_();
          work->wait();  // waiting twice copies back once
          EXPECT_EQ(gathered.abs().sum().item<float>(), 0.0f);
          at::Tensor mine = at::empty({3});
          g.reduce_scatter(mine, at::arange(3 * n).to(at::kFloat), ReduceOp::kSum)->wait();
          EXPECT_TRUE(at::equal(mine, (at::arange(3) + 3 * ctx.rank).to(at::kFloat) * n));
          at::Tensor largest = at::full({5}, static_cast<double>(ctx.rank + 1), at::kDouble);
          g.all_reduce(largest, ReduceOp::kMax)->wait();
          EXPECT_TRUE(at::equal(largest, at::full({5}, static_cast<double>(n), at::kDouble)));
          at::Tensor received = at::empty({n}, at::kLong);
          g.all_to_all(received, at::full({n}, ctx.rank, at::kLong))->wait();
          EXPECT_TRUE(at::equal(received, at::arange(n, at::kLong)));
          at::Tensor from_last = at::full({2}, ctx.rank, at::kInt);
          g.broadcast(from_last, n - 1)->wait();
          EXPECT_TRUE(at::equal(from_last, at::full({2}, n - 1, at::kInt)));
        },
        quick());
  }
}

TEST(HostStaging, SubgroupsOfAStagedGroupAreStaged) {
  run_ranks(
      4,
      [](RankContext& ctx) {
        const DeviceMesh mesh = make_hybrid_mesh(cpu_staged_group(ctx), 2);
        EXPECT_NE(dynamic_cast<comm::HostStagedGroup*>(mesh.shard.get()), nullptr);
        EXPECT_NE(dynamic_cast<comm::HostStagedGroup*>(mesh.replicate.get()), nullptr);
        at::Tensor t = at::full({1}, static_cast<float>(ctx.rank));
        mesh.replicate->all_reduce(t, ReduceOp::kSum)->wait();
        EXPECT_EQ(t.item<float>(), static_cast<float>(2 * (ctx.rank % 2) + 2));
      },
      quick());
}

}  // namespace
}  // namespace fsdp::testing
