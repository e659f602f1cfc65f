#pragma once
// The checkpoints of a training run, found in its run directory.
//
// A run dir holds its final checkpoint in <run>/checkpoint and periodic ones
// in <run>/checkpoints/step-NNNNNNNN (fsdp-train's layout; any program may
// follow it). A save that was killed leaves "<dir>.partial-<id>" beside where
// the checkpoint would have been, and no checkpoint: the commit is one rename
// (see [Note: checkpoint commit protocol]). After a crash, the run dir may
// hold several complete checkpoints, partial ones, or a complete one whose
// files were damaged since; resuming takes the newest that verifies.
//
//   const auto latest = fsdp::ckpt::latest_verified_checkpoint("runs/exp1");
//   if (latest.chosen) resume_from(latest.chosen->dir);

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdp::ckpt {

struct FoundCheckpoint {
  std::string dir;
  int64_t step = 0;
};

struct LatestCheckpoint {
  std::optional<FoundCheckpoint> chosen;  // none if no candidate verified
  // "<dir>: <why>" for each newer candidate that did not verify, newest first.
  std::vector<std::string> rejected;
};

// Whether `dir` holds a checkpoint's index.json (not whether it verifies).
bool is_checkpoint_dir(const std::string& dir);

// Whether `dir` looks like a run dir: it holds checkpoint/ or checkpoints/.
bool is_run_dir(const std::string& dir);

// The run dir's checkpoints that have an index.json: checkpoint/ and
// checkpoints/*/, newest step first (at equal steps, checkpoint/ first).
// Candidates whose index cannot be read are listed with step -1, last.
std::vector<FoundCheckpoint> checkpoints_in_run_dir(const std::string& run_dir);

// The newest of checkpoints_in_run_dir() whose index and every data block
// verify (Reader::verify_all). Reads every byte of each candidate it tries.
LatestCheckpoint latest_verified_checkpoint(const std::string& run_dir);

// The "*.partial-*" directories that killed saves left in the run dir and
// its checkpoints/: what clean_partial_checkpoints removes.
std::vector<std::string> partial_checkpoints_in_run_dir(const std::string& run_dir);

// Removes every partial_checkpoints_in_run_dir() and returns what it removed
// with their total size in bytes. Only safe when no save into `run_dir` is
// running: fsdp-train calls it while it holds the run dir's lock.
struct CleanReport {
  std::vector<std::string> removed;
  int64_t bytes = 0;
};
CleanReport clean_partial_checkpoints(const std::string& run_dir);

}  // namespace fsdp::ckpt
