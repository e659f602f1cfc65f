// A rank SIGKILLed in the middle of a real multi-process save (after its data
// file, before the index) must leave the previous checkpoint loadable and the
// interrupted one refused with a clear message. See
// [Note: checkpoint commit protocol] in src/checkpoint/save.cpp.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>

#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/run_dir.h"
#include "harness/assertions.h"
#include "harness/multiprocess.h"
#include "harness/temp_dir.h"

namespace fs = std::filesystem;
using fsdp::ckpt::Reader;
using fsdp::testing::run_processes;

namespace {

// Each file's directories carry its own prefix, to tell leftovers apart.
class TempDir : public fsdp::testing::TempDir {
 public:
  TempDir() : fsdp::testing::TempDir("fsdp-ckpt-kill") {}
};

const std::string kSaver = std::string(FSDP_BIN_DIR) + "/ckpt_saver";

std::string outputs(const std::vector<fsdp::testing::ProcessResult>& results) {
  std::string all;
  for (const auto& r : results)
    all += "--- rank " + std::to_string(r.rank) + " (exit " + std::to_string(r.exit_code) + ", signal " +
           std::to_string(r.term_signal) + ")\n" + r.output;
  return all;
}

std::vector<std::string> partial_dirs(const std::string& parent) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(parent))
    if (e.path().filename().string().find(".partial-") != std::string::npos) found.push_back(e.path().string());
  return found;
}

void expect_checkpoint_at_step(const std::string& dir, int64_t step) {
  const Reader reader = Reader::open(dir);
  EXPECT_EQ(reader.step(), step);
  reader.verify_all();
  EXPECT_TRUE(at::equal(reader.read_full("layer.1.weight"), at::full({1024, 3072}, static_cast<float>(step))));
  EXPECT_EQ(reader.read_full("step").item<int64_t>(), step);
}

}  // namespace

TEST(CheckpointKill, KilledOverwriteLeavesThePreviousCheckpointLoadable) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  const auto first = run_processes(kSaver, {dir, "1"}, 2, std::chrono::seconds(120));
  for (const auto& r : first) ASSERT_EQ(r.exit_code, 0) << outputs(first);
  expect_checkpoint_at_step(dir, 1);

  const auto killed = run_processes(kSaver, {dir, "2", "--overwrite"}, 2, std::chrono::seconds(120),
                                    {{"FSDP_TEST_KILL_RANK", "1"}});
  ASSERT_EQ(killed[1].term_signal, SIGKILL) << outputs(killed);
  EXPECT_NE(killed[0].exit_code, 0) << "rank 0 must fail, not hang or succeed\n" << outputs(killed);
  EXPECT_NE(killed[1].output.find("now SIGKILLing myself"), std::string::npos) << outputs(killed);
  EXPECT_NE(killed[0].output.find("checkpoint save to '" + dir + "' failed while writing data files"),
            std::string::npos) << outputs(killed);

  // The previous checkpoint is whole and still at step 1.
  expect_checkpoint_at_step(dir, 1);
  // The interrupted save is a staging directory with data but no index.
  const auto partial = partial_dirs(tmp.path());
  ASSERT_EQ(partial.size(), 1u);
  EXPECT_TRUE(fs::exists(partial[0] + "/rank-00001-of-00002.safetensors"));
  EXPECT_THROWS_WITH(Reader::open(partial[0]), "has no index.json: the save did not complete (was a rank killed?)");
}

TEST(CheckpointKill, KilledFirstSaveIsRefusedByName) {
  TempDir tmp;
  const std::string dir = tmp / "step-7";
  const auto killed =
      run_processes(kSaver, {dir, "7"}, 2, std::chrono::seconds(120), {{"FSDP_TEST_KILL_RANK", "0"}});
  ASSERT_EQ(killed[0].term_signal, SIGKILL) << outputs(killed);
  EXPECT_NE(killed[1].exit_code, 0) << outputs(killed);
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_THROWS_WITH(Reader::open(dir), "left by a save that did not complete (was a rank killed?)");
  // The next save to the same path works and ignores the leftover.
  const auto again = run_processes(kSaver, {dir, "8"}, 2, std::chrono::seconds(120));
  for (const auto& r : again) ASSERT_EQ(r.exit_code, 0) << outputs(again);
  expect_checkpoint_at_step(dir, 8);
}

// The same kill in an asynchronous save (fsdp::ckpt::AsyncSaver), from its
// background thread while the main thread goes on with collectives: the
// previous checkpoint is whole, a run dir resumes from it, and cleaning
// the run dir at the next start leaves no partial save.
TEST(CheckpointKill, KilledAsyncSaveLeavesThePreviousCheckpointToResumeFrom) {
  TempDir tmp;
  const std::string run = tmp / "run";
  const std::string dir = run + "/checkpoint";
  fs::create_directories(run);
  const auto first = run_processes(kSaver, {dir, "1", "--async"}, 2, std::chrono::seconds(120));
  for (const auto& r : first) ASSERT_EQ(r.exit_code, 0) << outputs(first);
  expect_checkpoint_at_step(dir, 1);

  const auto killed = run_processes(kSaver, {dir, "2", "--overwrite", "--async"}, 2,
                                    std::chrono::seconds(120), {{"FSDP_TEST_KILL_RANK", "1"}});
  ASSERT_EQ(killed[1].term_signal, SIGKILL) << outputs(killed);
  EXPECT_NE(killed[0].exit_code, 0) << "rank 0 must fail, not hang or succeed\n" << outputs(killed);
  EXPECT_NE(killed[1].output.find("now SIGKILLing myself"), std::string::npos) << outputs(killed);

  expect_checkpoint_at_step(dir, 1);
  const auto latest = fsdp::ckpt::latest_verified_checkpoint(run);
  ASSERT_TRUE(latest.chosen);
  EXPECT_EQ(latest.chosen->dir, dir);
  EXPECT_EQ(latest.chosen->step, 1);
  ASSERT_EQ(partial_dirs(run).size(), 1u);
  const auto cleaned = fsdp::ckpt::clean_partial_checkpoints(run);
  EXPECT_EQ(cleaned.removed.size(), 1u);
  EXPECT_TRUE(partial_dirs(run).empty());
  expect_checkpoint_at_step(dir, 1);
}
