// fsdp-train and its run dir under faults (issue #13): a second run into a
// dir in use, a full disk under the metrics, and resuming after a crash
// (by hand, with --resume auto as restarts do, and at a smaller world size
// after an elastic job lost a node).
// Run as a real program, as in test_trainer.cpp.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fsdp/checkpoint/reader.h"
#include "fsdp/file_tree.h"
#include "harness/child_process.h"
#include "harness/file_damage.h"
#include "harness/fsdp_run.h"
#include "harness/trainer_runs.h"

namespace {

namespace fs = std::filesystem;
using TempDir = fsdp::testing::TrainerTempDir;
using namespace fsdp::testing;  // tiny, run_alone, read_metrics...

// Issue #13, point 4 ([Note: one run per run dir]): a second run into a run
// dir in use is refused before it writes anything there, naming the holder.
TEST(TrainerRunDir, ASecondRunIntoABusyRunDirIsRefusedNamingTheHolder) {
  TempDir tmp;
  const std::string run_dir = tmp / "run";
  fs::create_directories(run_dir);
  // Stands in for a run in progress: holds the lock as fsdp-train does.
  const std::string lock_file = run_dir + "/.fsdp-train.lock";
  const int fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string holder = "pid 4242 on elsewhere\n";
  ASSERT_EQ(::write(fd, holder.data(), holder.size()), static_cast<ssize_t>(holder.size()));

  const auto args = tiny({"--steps", "2", "--run-dir", run_dir});
  const auto busy = run_alone(args);
  EXPECT_EQ(busy.exit_code, 1) << busy.output;
  EXPECT_NE(busy.output.find("run dir '" + run_dir +
                             "' is in use by another fsdp-train run (pid 4242 on elsewhere)"),
            std::string::npos)
      << busy.output;
  EXPECT_FALSE(fs::exists(run_dir + "/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(run_dir + "/checkpoint"));

  ::close(fd);  // that run ended: the lock goes with it, however it ended
  const auto after = run_alone(args);
  EXPECT_EQ(after.exit_code, 0) << after.output;
  EXPECT_EQ(read_metrics(run_dir).size(), 2u);
}

// Issue #13, point 10 ([Note: a failed write is an error]): a run output
// that cannot be written stops the run, naming the file and the reason, and
// never leaves a cut line behind while training goes on. /dev/full fails
// every write with ENOSPC, as a full disk does.
TEST(TrainerRunDir, AFullDiskUnderTheMetricsStopsTheRunNamingTheFile) {
  ASSERT_TRUE(fs::exists("/dev/full")) << "Linux provides /dev/full; this test needs it";
  TempDir tmp;
  const std::string run_dir = tmp / "run";
  fs::create_directories(run_dir);
  fs::create_symlink("/dev/full", run_dir + "/metrics.jsonl");
  const auto r = run_alone(tiny({"--steps", "3", "--run-dir", run_dir}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("writing '" + run_dir + "/metrics.jsonl' failed: No space left on device"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(run_dir + "/checkpoint")) << "the run went on after the failed write";
}

// Files this process and its children write may grow to `bytes` only, and
// a write past that fails with EFBIG instead of raising SIGXFSZ: a disk
// that fills part-way through a write, for the children started meanwhile.
class ScopedFileSizeLimit {
 public:
  explicit ScopedFileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_limit_);
    rlimit limit = saved_limit_;
    limit.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGXFSZ, &ignore, &saved_action_);
  }
  ~ScopedFileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_limit_);
    ::sigaction(SIGXFSZ, &saved_action_, nullptr);
  }
  bool ok() const { return ok_; }

 private:
  rlimit saved_limit_{};
  struct sigaction saved_action_ {};
  bool ok_ = false;
};

// Issue #35, point 2 ([Note: a metrics line is written whole or not at
// all]): a disk that fills in the middle of a line leaves metrics.jsonl
// with whole lines only. Every file of the run may grow to 8 KiB: far more
// than config.json, and reached by metrics.jsonl within a few dozen steps,
// in the middle of some line.
TEST(TrainerRunDir, ADiskFullMidLineLeavesOnlyWholeMetricsLines) {
  TempDir tmp;
  const std::string run_dir = tmp / "run";
  fs::create_directories(run_dir);
  const auto args =
      tiny({"--steps", "200", "--eval-every", "0", "--sample-bytes", "0", "--run-dir", run_dir});
  ProcessResult r;
  {
    ScopedFileSizeLimit limit(8192);
    ASSERT_TRUE(limit.ok());
    r = run_alone(args);
  }
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("writing '" + run_dir + "/metrics.jsonl' failed: File too large"),
            std::string::npos)
      << r.output;
  const std::string text = read_text(run_dir + "/metrics.jsonl");
  ASSERT_FALSE(text.empty()) << "no step was logged before the disk filled";
  EXPECT_EQ(text.back(), '\n') << "metrics.jsonl ends mid-line: ..."
                               << text.substr(text.size() - 40);
  EXPECT_NO_THROW(read_metrics(run_dir));
}

// Issue #13, point 14: after a crash, --resume <run dir> takes the newest
// checkpoint that verifies across checkpoint/ and checkpoints/step-*, says
// which and why it skipped newer ones, removes what killed saves left, and
// --keep-last bounds the step checkpoints kept.
TEST(TrainerRunDir, ResumeFromACrashedRunDirTakesTheNewestCheckpointThatVerifies) {
  TempDir tmp;
  const std::string run = tmp / "run";
  const auto common = tiny({"--sample-bytes", "0", "--eval-every", "0"});
  ASSERT_EQ(run_alone(concat(common, {"--steps", "6", "--save-every", "2", "--run-dir", run})).exit_code, 0);
  // The crash: no final checkpoint, the newest step checkpoint damaged, and a
  // save that never completed.
  fsdp::remove_tree_or_throw(run + "/checkpoint");
  fsdp::testing::flip_byte(run + "/checkpoints/step-00000006/rank-00000-of-00001.safetensors", -1);
  const std::string partial = run + "/checkpoints/step-00000008.partial-99-ab";
  fs::create_directories(partial);
  std::ofstream(partial + "/rank-00000-of-00001.safetensors") << std::string(4096, 'x');

  const auto resumed = run_alone(concat(common, {"--steps", "10", "--save-every", "2",
                                                 "--keep-last", "2", "--resume", run,
                                                 "--run-dir", run}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resume    " + run + "/checkpoints/step-00000004 at step 4"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("skipped (did not verify) " + run + "/checkpoints/step-00000006"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("cleaned   " + partial), std::string::npos) << resumed.output;
  EXPECT_FALSE(fs::exists(partial));
  // --keep-last 2: the two newest step checkpoints, and the final one.
  std::vector<std::string> kept;
  for (const auto& entry : fs::directory_iterator(run + "/checkpoints")) {
    kept.push_back(entry.path().filename().string());
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"step-00000008", "step-00000010"}));
  EXPECT_EQ(fsdp::ckpt::Reader::open(run + "/checkpoint").step(), 10);
  EXPECT_EQ(by_step(read_metrics(run)).size(), 10u);
}

// Issue #33, point 3: --resume auto starts afresh where there is nothing to
// resume, continues from the newest checkpoint that verifies, and refuses a
// run dir whose checkpoints all fail to verify instead of training over them.
TEST(TrainerRunDir, ResumeAutoStartsAfreshResumesTheNewestAndRefusesOnlyDamagedCheckpoints) {
  TempDir tmp;
  const std::string run = tmp / "run";
  const auto common = tiny({"--sample-bytes", "0", "--eval-every", "0", "--save-every", "2",
                            "--resume", "auto", "--run-dir", run});
  const auto fresh = run_alone(concat(common, {"--steps", "4"}));
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_EQ(fresh.output.find("resume "), std::string::npos) << fresh.output;

  const auto resumed = run_alone(concat(common, {"--steps", "6"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resume    " + run + "/checkpoint at step 4"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(by_step(read_metrics(run)).size(), 6u);

  for (const std::string dir : {"/checkpoint", "/checkpoints/step-00000002",
                                "/checkpoints/step-00000004", "/checkpoints/step-00000006"}) {
    fsdp::testing::flip_byte(run + dir + "/rank-00000-of-00001.safetensors", -1);
  }
  const auto refused = run_alone(concat(common, {"--steps", "8"}));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--resume auto: run dir '" + run +
                                "' holds checkpoints but none verifies"),
            std::string::npos)
      << refused.output;
}

// A restart after the final save (a rank failed in the sample or the
// report) finds the run dir at --steps: under --resume auto the training is
// complete, so every rank exits 0 and says so, training nothing, and fsdp-run
// ends the job instead of restarting it until its restarts run out. [Note: a
// finished run under --resume auto] in tools/fsdp-train/main.cpp.
TEST(TrainerRunDir, ResumeAutoAtTheFinalStepSaysTheTrainingIsCompleteAndExitsZero) {
  TempDir tmp;
  const std::string run = tmp / "run";
  const auto common = tiny({"--sample-bytes", "0", "--eval-every", "0", "--save-every", "2",
                            "--steps", "4", "--run-dir", run});
  const auto auto_resume = concat(common, {"--resume", "auto"});
  ASSERT_EQ(run_alone(auto_resume).exit_code, 0);
  const std::string metrics = read_text(run + "/metrics.jsonl");
  const auto says_complete = [&](const std::string& output, const std::string& checkpoint) {
    return output.find("the training in run dir '" + run +
                       "' is complete: its newest "
                       "checkpoint that verifies, '" +
                       run + checkpoint + "', is at step 4 of --steps 4") != std::string::npos;
  };

  const auto again = run_alone(auto_resume);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(says_complete(again.output, "/checkpoint")) << again.output;
  EXPECT_EQ(read_text(run + "/metrics.jsonl"), metrics);  // no step trained again

  // Killed while saving checkpoint/: the step-4 checkpoint is the newest.
  fsdp::remove_tree_or_throw(run + "/checkpoint");
  const auto ranks = run_trainer_ranks(auto_resume, 2);
  for (const auto& r : ranks) EXPECT_EQ(r.exit_code, 0) << describe(ranks);
  EXPECT_TRUE(says_complete(ranks[0].output, "/checkpoints/step-00000004")) << describe(ranks);
  EXPECT_EQ(read_text(run + "/metrics.jsonl"), metrics);

  // A checkpoint named by the user is asked to train on: still an error.
  const auto named = run_alone(concat(common, {"--resume", run}));
  EXPECT_EQ(named.exit_code, 2) << named.output;
  EXPECT_NE(named.output.find("nothing is left to train"), std::string::npos) << named.output;
}

// The final step is --steps, not the final checkpoint/: a run stopped by
// --time-budget saves checkpoint/ before --steps, and --resume auto
// continues it.
TEST(TrainerRunDir, ResumeAutoContinuesARunStoppedByItsTimeBudget) {
  TempDir tmp;
  const std::string run = tmp / "run";
  const auto common = tiny({"--sample-bytes", "0", "--eval-every", "0", "--steps", "4", "--resume",
                            "auto", "--run-dir", run});
  // Any step takes longer than a microsecond: it stops after step 1.
  const auto stopped = run_alone(concat(common, {"--time-budget", "0.000001"}));
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  ASSERT_EQ(fsdp::ckpt::Reader::open(run + "/checkpoint").step(), 1);

  const auto continued = run_alone(common);
  ASSERT_EQ(continued.exit_code, 0) << continued.output;
  EXPECT_EQ(continued.output.find("is complete"), std::string::npos) << continued.output;
  EXPECT_EQ(fsdp::ckpt::Reader::open(run + "/checkpoint").step(), 4);
  EXPECT_EQ(by_step(read_metrics(run)).size(), 4u);
}

// Issue #33, point 2 ([Note: elastic membership] in tools/fsdp-run): two
// fsdp-run agents on this machine, --nnodes 1:2, 2 ranks each. Rank 2 kills
// its node's fsdp-run and itself at the start of step 5 (the seam's
// ":launcher"), so node 1 is lost whole, its other rank with it. Node 0
// restarts the job alone, at world size 2, from the step-4 checkpoint, with
// the global batch kept. Every step after it matches a run resumed from that
// checkpoint at world size 2 by hand.
TEST(TrainerRunDir, AnElasticJobThatLosesANodeFinishesOnTheNodeLeft) {
  TempDir tmp;
  const int port = free_tcp_ports(2);  // --nnodes: the rendezvous, then the store
  const auto common =
      tiny({"--steps", "8", "--save-every", "2", "--sample-bytes", "0", "--eval-every", "0"});
  const std::string run = tmp / "elastic";
  const auto node = [&](int rank, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "--nnodes", "1:2",           "--node-rank",        std::to_string(rank), "--nproc-per-node",
        "2",        "--master-port", std::to_string(port), "--rdzv-last-call",   "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return concat(
        args,
        concat({"--", FSDP_BIN_DIR "/fsdp-train", "--resume", "auto", "--run-dir", run}, common));
  };
  const std::vector<std::string> env = {"FSDP_TRAIN_TEST_SIGKILL_AT=2:5:0:launcher",
                                        "OMP_NUM_THREADS=1"};
  TempDir logs0, logs1;
  ChildProcess node0(logs0, kLauncher, node(0, {"--max-restarts", "2"}), env);
  ChildProcess node1(logs1, kLauncher, node(1, {}), env);
  const ChildResult r = node0.wait(kTrainerRunLimit);
  const ChildResult lost = node1.wait(kTrainerRunLimit);
  ASSERT_TRUE(r.exited_with(0)) << r.describe() << lost.describe();
  EXPECT_TRUE(lost.killed_by(SIGKILL)) << lost.describe();
  const std::string checkpoint = run + "/checkpoints/step-00000004";
  for (const std::string& text : {std::string("fsdp-run: round 1: 2 node(s), world size 4"),
                                  std::string("fsdp-run: restart 1 of 2: "),
                                  std::string("fsdp-run: round 2: 1 node(s), world size 2"),
                                  "resume    " + checkpoint + " at step 4"}) {
    EXPECT_TRUE(contains(r.out + r.err, text)) << text << "\n" << r.describe();
  }
  const std::string by_hand = tmp / "by_hand";
  expect_all_ok(
      run_trainer_ranks(concat(common, {"--resume", checkpoint, "--run-dir", by_hand}), 2));
  std::vector<JsonValue> steps, restarts;
  for (auto& line : read_metrics(run))
    (line.contains("restart") ? restarts : steps).push_back(line);
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0].at("after_step"), 4);
  const auto elastic = by_step(steps);
  const auto reference = by_step(read_metrics(by_hand));
  for (int64_t step = 5; step <= 8; ++step) {
    ASSERT_TRUE(elastic.count(step) && reference.count(step)) << "step " << step;
    expect_close(elastic.at(step).at("loss"), reference.at(step).at("loss"), 1e-4,
                 "loss at step " + std::to_string(step));
  }
}

}  // namespace
