// fsdp-ckpt's commands on run directories: which checkpoint a run dir
// means, and cleaning up after killed saves.

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "commands.h"
#include "fsdp/checkpoint/run_dir.h"
#include "run_dir_lock.h"

namespace fsdp_ckpt {

// The checkpoint a command works on: `dir` itself, or, for a run dir, its
// newest checkpoint that verifies (as fsdp-train --resume takes it), said on
// stderr so that stdout stays the command's output.
std::string checkpoint_of(const std::string& dir) {
  if (fsdp::ckpt::is_checkpoint_dir(dir) || !fsdp::ckpt::is_run_dir(dir)) return dir;
  const fsdp::ckpt::LatestCheckpoint latest = fsdp::ckpt::latest_verified_checkpoint(dir);
  for (const auto& rejected : latest.rejected) {
    fmt::print(stderr, "fsdp-ckpt: skipped (did not verify) {}\n", rejected);
  }
  if (!latest.chosen) {
    throw std::runtime_error(fmt::format(
        "'{}' is a run dir, but none of its checkpoints verifies (see above); nothing to read",
        dir));
  }
  fmt::print(stderr, "fsdp-ckpt: '{}' is a run dir; using its newest checkpoint that verifies, "
                     "'{}' (step {})\n",
             dir, latest.chosen->dir, latest.chosen->step);
  return latest.chosen->dir;
}

int clean(const std::string& dir) {
  // "0 partial checkpoints removed" would read as a clean run dir.
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    throw std::runtime_error(fmt::format(
        "run dir '{}' does not exist; give the directory fsdp-train wrote (its --run-dir)", dir));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    throw std::runtime_error(
        fmt::format("'{}' is not a directory; give a run dir (fsdp-train's --run-dir), which holds "
                    "checkpoint/ and checkpoints/",
                    dir));
  }
  if (fsdp::tools::RunDirLock::held_elsewhere(dir)) {
    throw std::runtime_error(fmt::format(
        "an fsdp-train run is using '{}' now; its partial save may be in progress. Run clean "
        "after it ends",
        dir));
  }
  const fsdp::ckpt::CleanReport report = fsdp::ckpt::clean_partial_checkpoints(dir);
  for (const auto& removed : report.removed) fmt::print("removed {}\n", removed);
  fmt::print("{} partial checkpoint{} removed, {} freed\n", report.removed.size(),
             report.removed.size() == 1 ? "" : "s", human_bytes(report.bytes));
  return 0;
}

}  // namespace fsdp_ckpt
