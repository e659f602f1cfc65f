// fsdp-train --device cuda (label "gpu"): the trainer on the GPU at world
// size 1 (NCCL cannot put two ranks on one GPU) against the same run on the
// CPU, and the CUDA memory figures it reports.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "harness/trainer_runs.h"

namespace fsdp::testing {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Both runs draw the same batches from the same seed; fp32 on the GPU differs
// from the CPU by rounding only (LibTorch leaves TF32 matmuls off).
TEST(GpuTrainer, CudaRunTracksTheCpuRunAndReportsCudaMemory) {
  TrainerTempDir tmp;
  const auto common = tiny({"--steps", "6", "--eval-every", "3", "--sample-bytes", "16"});
  const auto cpu = run_alone(concat(common, {"--run-dir", tmp / "cpu"}));
  const auto gpu = run_alone(concat(common, {"--device", "cuda", "--run-dir", tmp / "gpu"}));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  const auto on_cpu = read_metrics(tmp / "cpu");
  const auto on_gpu = read_metrics(tmp / "gpu");
  ASSERT_EQ(on_cpu.size(), 6u);
  ASSERT_EQ(on_gpu.size(), 6u);
  for (size_t i = 0; i < on_gpu.size(); ++i) {
    const std::string step = "step " + std::to_string(i + 1);
    expect_close(on_gpu[i]["loss"].get<double>(), on_cpu[i]["loss"].get<double>(), 1e-4, step);
    const int64_t allocated = on_gpu[i]["peak_device_allocated_bytes"][0].get<int64_t>();
    const int64_t reserved = on_gpu[i]["peak_device_reserved_bytes"][0].get<int64_t>();
    EXPECT_GT(allocated, 0) << step;
    EXPECT_GE(reserved, allocated) << step;
    EXPECT_FALSE(on_cpu[i].contains("peak_device_allocated_bytes")) << step;
  }
  EXPECT_LT(on_gpu.back()["loss"].get<double>(), on_gpu.front()["loss"].get<double>());
  for (const char* text : {"one GPU (NCCL)", "cuda peak", "peak CUDA allocated"}) {
    EXPECT_TRUE(contains(gpu.output, text)) << text << "\n" << gpu.output;
  }
}

// The flags of a GPU run: bf16 compute, recomputed blocks, pinned offload.
TEST(GpuTrainer, Bf16CheckpointingAndOffloadTrainOnCuda) {
  TrainerTempDir tmp;
  const auto common = tiny({"--steps", "6", "--eval-every", "0", "--sample-bytes", "0",
                            "--mixed-precision", "bf16"});
  const auto cpu = run_alone(concat(common, {"--run-dir", tmp / "cpu"}));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  const auto on_cpu = read_metrics(tmp / "cpu");
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--activation-checkpointing", "all"},
        std::vector<std::string>{"--offload"}}) {
    const std::string name = extra[0];
    const auto gpu = run_alone(concat(concat(common, extra),
                                      {"--device", "cuda", "--run-dir", tmp / name.substr(2)}));
    ASSERT_EQ(gpu.exit_code, 0) << name << "\n" << gpu.output;
    const auto on_gpu = read_metrics(tmp / name.substr(2));
    ASSERT_EQ(on_gpu.size(), on_cpu.size()) << name;
    for (size_t i = 0; i < on_gpu.size(); ++i) {
      // bf16 rounds differently on the two devices' kernels.
      expect_close(on_gpu[i]["loss"].get<double>(), on_cpu[i]["loss"].get<double>(), 2e-2,
                   name + " step " + std::to_string(i + 1));
    }
  }
}

// Two ranks on the one GPU, through Gloo with host staging (--backend gloo),
// train as the same two ranks do on the CPU.
TEST(GpuTrainer, TwoRanksShareTheGpuThroughGlooAndTrackTheCpuRun) {
  TrainerTempDir tmp;
  const auto common = tiny({"--steps", "6", "--eval-every", "0", "--sample-bytes", "0"});
  const auto cpu = run_trainer_ranks(concat(common, {"--run-dir", tmp / "cpu"}), 2);
  expect_all_ok(cpu);
  const auto gpu = run_trainer_ranks(
      concat(common, {"--device", "cuda", "--backend", "gloo", "--run-dir", tmp / "gpu"}), 2);
  expect_all_ok(gpu);
  const auto on_cpu = read_metrics(tmp / "cpu");
  const auto on_gpu = read_metrics(tmp / "gpu");
  ASSERT_EQ(on_cpu.size(), 6u);
  ASSERT_EQ(on_gpu.size(), 6u);
  for (size_t i = 0; i < on_gpu.size(); ++i) {
    expect_close(on_gpu[i]["loss"], on_cpu[i]["loss"], 1e-4, "step " + std::to_string(i + 1));
  }
  EXPECT_TRUE(contains(gpu[0].output, "a GPU (Gloo through host memory)")) << gpu[0].output;
}

}  // namespace
}  // namespace fsdp::testing
