// local-gpt (bench/peers/local_gpt.cpp), the baseline without FSDP that
// head_to_head.py measures libfsdp against at world size 1, run for real: it
// must train fsdp-train's GPT from the same weights on the same batches with
// the same optimizer, or the ratio means nothing. At world size 1 FSDP
// changes where the parameters live, not the arithmetic: float32 losses
// agree to 1e-6 relative (bit for bit on LibTorch 1.13 and 2.6 when this
// was written), bfloat16 ones to 1e-4 (equal for two steps, then about 1e-5
// apart on 1.13: bfloat16 rounding somewhere in the step, not traced).

#include <gtest/gtest.h>

#include <string>

#include "harness/child_process.h"
#include "harness/shell_command.h"
#include "harness/temp_dir.h"
#include "harness/trainer_runs.h"

namespace {

using fsdp::testing::CommandRun;
using fsdp::testing::contains;
using fsdp::testing::run_command;

const std::string kModel = " --data " FSDP_SOURCE_DIR
                           "/tests/data/corpus.txt --layers 2 --width 32 --heads 2 --context 32"
                           " --batch 8 --steps 5 --warmup 2 --lr 1e-2";

// The step losses of local-gpt and of fsdp-train alone, given the same extra flags.
void expect_same_losses(const std::string& flags, double rel) {
  fsdp::testing::TempDir work("local-gpt");
  const std::string metrics = work.path() + "/metrics.jsonl";  // read_metrics's name
  const CommandRun local = run_command("OMP_NUM_THREADS=1 " FSDP_BIN_DIR "/local-gpt" + kModel +
                                       flags + " --metrics " + metrics);
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const CommandRun fsdp =
      run_command("OMP_NUM_THREADS=1 " FSDP_BIN_DIR "/fsdp-train" + kModel + flags +
                  " --eval-every 0 --sample-bytes 0 --quiet --run-dir " + work.path() + "/run");
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.output;
  const auto ours = fsdp::testing::read_metrics(work.path());
  const auto theirs = fsdp::testing::read_metrics(work.path() + "/run");
  ASSERT_EQ(ours.size(), 5u);
  ASSERT_EQ(theirs.size(), 5u);
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
    EXPECT_GT(ours[i]["ms"].get<double>(), 0);
    fsdp::testing::expect_close(ours[i]["loss"], theirs[i]["loss"], rel,
                                "local-gpt" + flags + ", loss of step " + std::to_string(i + 1));
  }
}

TEST(LocalGpt, TrainsLikeFsdpTrainAtWorldSizeOneInFloat32) { expect_same_losses("", 1e-6); }

TEST(LocalGpt, TrainsLikeFsdpTrainInBfloat16WithCheckpointing) {
  expect_same_losses(" --mixed-precision bf16 --activation-checkpointing all", 1e-4);
}

// Bad input is checked as fsdp-train checks it, every problem named at once.
TEST(LocalGpt, BadInputNamesTheValueAndTheFix) {
  const CommandRun r = run_command(FSDP_BIN_DIR "/local-gpt --batch 0 --mixed-precision fp16");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "local-gpt: --batch is 0; it must be a positive integer"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "--mixed-precision 'fp16' is not one of: fp32, bf16")) << r.output;
  // fsdp-train's FSDP options have no meaning here, and are refused.
  const CommandRun fsdp_option = run_command(FSDP_BIN_DIR "/local-gpt --strategy grad-op");
  EXPECT_EQ(fsdp_option.exit_code, 2) << fsdp_option.output;
  EXPECT_TRUE(contains(fsdp_option.output, "local-gpt: error: The following argument"))
      << fsdp_option.output;
}

}  // namespace
