// fsdp-train across interruptions, as a real program (as in
// test_trainer.cpp): --resume, restarts under fsdp-run --max-restarts, and
// --async-save.

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/run_dir.h"
#include "harness/fsdp_run.h"
#include "harness/trainer_runs.h"

namespace {

namespace fs = std::filesystem;

using TempDir = fsdp::testing::TrainerTempDir;
using namespace fsdp::testing;  // tiny, run_alone, read_metrics...

// Model and optimizer tensors of two checkpoints, compared exactly.
void expect_same_checkpoint(const std::string& a_dir, const std::string& b_dir) {
  const auto a = fsdp::ckpt::Reader::open(a_dir), b = fsdp::ckpt::Reader::open(b_dir);
  ASSERT_EQ(a.names(), b.names());
  for (const auto& name : a.names()) {
    EXPECT_TRUE(at::equal(a.read_full(name), b.read_full(name))) << name;
  }
}

TEST(TrainerResume, ResumeContinuesBitwiseOnTheSameWorldSizeAndCloselyOnAnother) {
  TempDir tmp;
  const auto common = tiny({"--steps", "6", "--sample-bytes", "0", "--eval-every", "0"});
  // Uninterrupted, 2 ranks.
  expect_all_ok(run_trainer_ranks(concat(common, {"--run-dir", tmp / "straight"}), 2));
  // The same run, checkpointing at step 3.
  expect_all_ok(
      run_trainer_ranks(concat(common, {"--run-dir", tmp / "saved", "--save-every", "3"}), 2));
  const std::string step3 = tmp / "saved" + "/checkpoints/step-00000003";
  ASSERT_TRUE(fs::exists(step3 + "/index.json"));

  // Resume from step 3 on 2 ranks. The model shape, batch, seed and schedule
  // come from the checkpoint.
  const auto resumed =
      run_trainer_ranks({"--resume", step3, "--run-dir", tmp / "resumed", "--sample-bytes", "0",
                         "--eval-every", "0", "--eval-batches", "1"},
                        2);
  expect_all_ok(resumed);
  EXPECT_NE(resumed[0].output.find("at step 3"), std::string::npos) << describe(resumed);

  const auto straight = by_step(read_metrics(tmp / "straight"));
  const auto again = by_step(read_metrics(tmp / "resumed"));
  ASSERT_EQ(again.size(), 3u);
  for (int64_t step = 4; step <= 6; ++step) {
    ASSERT_TRUE(again.count(step)) << step;
    EXPECT_EQ(again.at(step).at("loss").get<double>(), straight.at(step).at("loss").get<double>())
        << "step " << step;
    EXPECT_EQ(again.at(step).at("grad_norm").get<double>(),
              straight.at(step).at("grad_norm").get<double>())
        << "step " << step;
  }
  EXPECT_EQ(again.at(6).at("val_loss").get<double>(), straight.at(6).at("val_loss").get<double>());
  expect_same_checkpoint(tmp / "straight" + "/checkpoint", tmp / "resumed" + "/checkpoint");

  // Resume the 2-rank checkpoint on 1 rank.
  const auto alone = run_alone({"--resume", step3, "--run-dir", tmp / "alone", "--sample-bytes",
                                "0", "--eval-every", "0", "--eval-batches", "1"});
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  const auto single = by_step(read_metrics(tmp / "alone"));
  ASSERT_EQ(single.size(), 3u);
  for (int64_t step = 4; step <= 6; ++step) {
    expect_close(single.at(step).at("loss"), straight.at(step).at("loss"), 1e-4,
                 "step " + std::to_string(step) + " loss after resuming on 1 rank");
  }

  // Continuing in the same run dir keeps its metrics up to the checkpoint.
  expect_all_ok(run_trainer_ranks({"--resume", step3, "--run-dir", tmp / "saved", "--sample-bytes",
                                   "0", "--eval-every", "0", "--eval-batches", "1"},
                                  2));
  const auto continued = read_metrics(tmp / "saved");
  ASSERT_EQ(continued.size(), 6u);
  for (size_t i = 0; i < continued.size(); ++i) EXPECT_EQ(continued[i].at("step"), i + 1);

  // A checkpoint of another model shape is refused, naming the option.
  const auto conflict = run_trainer_ranks(
      {"--resume", step3, "--width", "64", "--heads", "2", "--run-dir", tmp / "conflict"}, 2);
  for (const auto& r : conflict) {
    EXPECT_EQ(r.exit_code, 2) << describe(conflict);
    EXPECT_NE(r.output.find("--width 64 differs from the checkpoint's 32"), std::string::npos)
        << describe(conflict);
  }
  // Nothing left to train.
  const auto done =
      run_alone({"--resume", tmp / "saved" + "/checkpoint", "--run-dir", tmp / "done"});
  EXPECT_EQ(done.exit_code, 2) << done.output;
  EXPECT_NE(done.output.find("is at step 6, and --steps is 6"), std::string::npos) << done.output;
}

// ---------------------------------------------------------------------------
// Restarts (issue #33): fsdp-run --max-restarts with fsdp-train --resume auto,
// the failures made by the FSDP_TRAIN_TEST_SIGKILL_AT seam.

// fsdp-run --max-restarts 3 over 2 ranks of fsdp-train `args`, with
// FSDP_TRAIN_TEST_SIGKILL_AT=`kills`. Its output goes to files in `dir`.
ChildResult run_with_restarts(const TempDir& dir, const std::vector<std::string>& args,
                              const std::string& kills) {
  ChildProcess job(dir, kLauncher,
                   concat({"--standalone", "--nproc-per-node", "2", "--max-restarts", "3", "--",
                           FSDP_BIN_DIR "/fsdp-train"},
                          args),
                   {"FSDP_TRAIN_TEST_SIGKILL_AT=" + kills, "OMP_NUM_THREADS=1"});
  return job.wait(kTrainerRunLimit);
}

// metrics.jsonl split into its step lines and its restart markers.
std::pair<std::vector<JsonValue>, std::vector<JsonValue>> steps_and_restarts(
    const std::string& run_dir) {
  std::pair<std::vector<JsonValue>, std::vector<JsonValue>> split;
  for (auto& line : read_metrics(run_dir)) {
    (line.contains("restart") ? split.second : split.first).push_back(std::move(line));
  }
  return split;
}

// Rank 0 dies at the start of step 4 (its line of step 3 written, the last
// checkpoint at step 2), then rank 1 at the start of step 7 (just after the
// step-6 checkpoint). Each restart resumes the newest checkpoint, exactly:
// the run ends where and as the uninterrupted one did, bit for bit.
TEST(TrainerResume, RestartsAfterTwoKillsFinishWithTheUninterruptedLossBitwise) {
  TempDir tmp;
  const auto common =
      tiny({"--steps", "8", "--save-every", "2", "--sample-bytes", "0", "--eval-every", "0"});
  expect_all_ok(run_trainer_ranks(concat(common, {"--run-dir", tmp / "straight"}), 2));
  const std::string run = tmp / "restarted";
  const ChildResult r =
      run_with_restarts(tmp, concat(common, {"--resume", "auto", "--run-dir", run}), "0:4:0,1:7:1");
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  for (const std::string& text : std::vector<std::string>{
           "fsdp-run: restart 1 of 3: rank 0 was killed by signal 9 (SIGKILL) during step 4;",
           "fsdp-run: restart 2 of 3: rank 1 was killed by signal 9 (SIGKILL) during step 7;",
           "resume    " + run + "/checkpoints/step-00000002 at step 2",
           "resume    " + run + "/checkpoints/step-00000006 at step 6", "restart 2: first step ",
           "restarts        2 (redone 1 step, "}) {
    EXPECT_TRUE(contains(r.out + r.err, text)) << text << "\n" << r.describe();
  }
  EXPECT_FALSE(contains(r.err, "restart 3")) << r.describe();

  const auto straight = by_step(read_metrics(tmp / "straight"));
  const auto [lines, restarts] = steps_and_restarts(run);
  const auto again = by_step(lines);
  ASSERT_EQ(lines.size(), 8u) << "each step once";
  for (int64_t step = 1; step <= 8; ++step) {
    ASSERT_TRUE(again.count(step)) << step;
    EXPECT_EQ(again.at(step).at("loss").get<double>(), straight.at(step).at("loss").get<double>())
        << "step " << step;
  }
  expect_same_checkpoint(tmp / "straight" + "/checkpoint", run + "/checkpoint");
  ASSERT_EQ(restarts.size(), 2u);
  EXPECT_EQ(restarts[0].at("after_step"), 2);
  EXPECT_EQ(restarts[0].at("redone_steps"), 1);  // step 3
  EXPECT_EQ(restarts[1].at("after_step"), 6);
  EXPECT_EQ(restarts[1].at("total_redone_steps"), 1);
  // The plot marks both restarts with a dashed line.
  const std::string script = read_text(run + "/plot.gp");
  for (const char* at : {"set arrow from first 2, graph 0", "set arrow from first 6, graph 0"}) {
    EXPECT_TRUE(contains(script, at)) << at << "\n" << script;
  }
}

// [Note: restarts]: a fault that comes back at the same step would use up
// every restart; the second time, fsdp-run stops naming the step.
TEST(TrainerResume, AFaultAtTheSameStepEveryTimeStopsTheRestartsNamingTheStep) {
  TempDir tmp;
  const auto args = tiny({"--steps", "6", "--save-every", "2", "--sample-bytes", "0",
                          "--eval-every", "0", "--resume", "auto", "--run-dir", tmp / "run"});
  const ChildResult r = run_with_restarts(tmp, args, "1:3:0,1:3:1,1:3:2,1:3:3");
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_TRUE(r.exited_with(128 + 9)) << r.describe();
  for (const char* text :
       {"fsdp-run: restart 1 of 3: rank 1 was killed by signal 9 (SIGKILL) during step 3;",
        "fsdp-run: rank 1 was killed by signal 9 (SIGKILL) during step 3 again, as the previous "
        "start did: restarting made no progress, so fsdp-run stops with 2 restart(s) left",
        "fix what fails at step 3"}) {
    EXPECT_TRUE(contains(r.err, text)) << text << "\n" << r.describe();
  }
  EXPECT_FALSE(contains(r.err, "restart 2 of 3")) << r.describe();
}

// ---------------------------------------------------------------------------
// --async-save (issue #33, point 4): step checkpoints written in the
// background. See [Note: saving while training] in fsdp/checkpoint/async_save.h.

// The same checkpoints as synchronous saves, and the training bit for bit
// the same: the shards are copied before the next step changes them.
TEST(TrainerResume, AsyncSavesWriteTheSameCheckpointsAndChangeNoStep) {
  TempDir tmp;
  const auto common =
      tiny({"--steps", "6", "--save-every", "2", "--sample-bytes", "0", "--eval-every", "0"});
  expect_all_ok(run_trainer_ranks(concat(common, {"--run-dir", tmp / "sync"}), 2));
  const auto async =
      run_trainer_ranks(concat(common, {"--run-dir", tmp / "async", "--async-save"}), 2);
  expect_all_ok(async);
  const auto a = read_metrics(tmp / "sync"), b = read_metrics(tmp / "async");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].at("loss"), b[i].at("loss")) << "step " << i + 1;
  for (const std::string step : {"step-00000002", "step-00000004", "step-00000006"}) {
    const std::string dir = tmp / "async" + "/checkpoints/" + step;
    fsdp::ckpt::Reader::open(dir).verify_all();
    expect_same_checkpoint(tmp / "sync" + "/checkpoints/" + step, dir);
    EXPECT_TRUE(contains(async[0].output, "saved " + dir + " (")) << async[0].output;
  }
  expect_same_checkpoint(tmp / "sync" + "/checkpoint", tmp / "async" + "/checkpoint");
  EXPECT_TRUE(contains(async[0].output, "s in the background after ")) << async[0].output;
}

// A rank killed at the start of step 5, when the step-4 save has just begun
// in the background: the restart resumes from the newest checkpoint that
// committed, the run ends as the uninterrupted one did, and no partial save
// is left.
TEST(TrainerResume, AKillBesideAnAsyncSaveRestartsFromACommittedCheckpoint) {
  TempDir tmp;
  const auto common =
      tiny({"--steps", "6", "--save-every", "2", "--sample-bytes", "0", "--eval-every", "0"});
  expect_all_ok(run_trainer_ranks(concat(common, {"--run-dir", tmp / "straight"}), 2));
  const std::string run = tmp / "restarted";
  const ChildResult r = run_with_restarts(
      tmp, concat(common, {"--async-save", "--resume", "auto", "--run-dir", run}), "1:5:0");
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.err,
                       "fsdp-run: restart 1 of 3: rank 1 was killed by signal 9 (SIGKILL) "
                       "during step 5;"))
      << r.describe();
  const auto straight = by_step(read_metrics(tmp / "straight"));
  const auto again = by_step(steps_and_restarts(run).first);
  for (int64_t step = 1; step <= 6; ++step) {
    ASSERT_TRUE(again.count(step)) << step;
    EXPECT_EQ(again.at(step).at("loss").get<double>(), straight.at(step).at("loss").get<double>())
        << "step " << step;
  }
  expect_same_checkpoint(tmp / "straight" + "/checkpoint", run + "/checkpoint");
  EXPECT_TRUE(fsdp::ckpt::partial_checkpoints_in_run_dir(run).empty());
  for (const auto& found : fsdp::ckpt::checkpoints_in_run_dir(run)) {
    fsdp::ckpt::Reader::open(found.dir).verify_all();
  }
}

}  // namespace
