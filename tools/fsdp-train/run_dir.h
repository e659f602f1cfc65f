#pragma once
// The run directory: where a run writes metrics, the plot, its config and
// its checkpoints, and how ranks agree on it.
//
//   <run-dir>/config.json                 the options and the derived sizes
//   <run-dir>/metrics.jsonl               one JSON object per step
//   <run-dir>/plot.png, plot.gp, plot.tsv the plot and what made it
//   <run-dir>/checkpoint/                 the final training state
//   <run-dir>/checkpoints/step-NNNNNNNN/  --save-every checkpoints

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdp {
class ProcessGroup;
}

namespace fsdp_train {

// Whether the run dir `dir` exists and is writable, or could be created:
// its nearest existing ancestor is a writable directory. Creates nothing.
// Returns "" when fine, else a message naming the path, the reason and the
// fix.
std::string check_run_dir(const std::string& dir);

// Creates `dir` (and its parents) if needed and writes and removes a probe
// file in it. Returns "" on success, else a message naming the directory,
// the system's reason and the fix. Safe to call from every rank at once.
std::string probe_writable_dir(const std::string& dir, const std::string& what);

// The run dir every rank uses: `requested` if not empty, else a fresh
// runs/<YYYYmmdd-HHMMSS> created by rank 0. Collective; throws on every rank
// if any rank cannot create or write it.
std::string agree_on_run_dir(fsdp::ProcessGroup& world, const std::string& requested);

// The directory the final checkpoint goes to, and the --save-every ones.
std::string final_checkpoint_dir(const std::string& run_dir);
std::string step_checkpoint_dir(const std::string& run_dir, int64_t step);

// --keep-last: removes all but the newest `keep_last` step checkpoints
// (<run-dir>/checkpoints/step-*); the final checkpoint/ is never removed.
// Returns the removed directories. keep_last <= 0 keeps everything.
std::vector<std::string> prune_step_checkpoints(const std::string& run_dir, int64_t keep_last);

// What --resume points at: a checkpoint directory (it holds index.json),
// taken as it is, or a run dir, whose newest checkpoint that verifies is
// taken (fsdp::ckpt::latest_verified_checkpoint: checkpoint/ and
// checkpoints/step-*). Throws std::runtime_error naming the path and why
// each candidate was rejected.
struct ResumeChoice {
  std::string dir;
  std::vector<std::string> rejected;  // newer candidates that did not verify, with why
};
ResumeChoice resolve_resume_dir(const std::string& path);

// --resume auto: the newest checkpoint of `run_dir` that verifies, or
// nothing when the run dir is new or holds no checkpoint (a fresh start), so
// the same command line starts a run and resumes it after a restart. Throws
// naming the fix when `run_dir` is "" (a fresh runs/<timestamp> would never
// resume) or when it holds checkpoints and none verifies.
std::optional<ResumeChoice> resolve_auto_resume(const std::string& run_dir);

// Collective: every rank passes its own error ("" for none). If any rank has
// one, every rank throws std::runtime_error naming the failing ranks and
// their messages, so all exit together.
void fail_together(fsdp::ProcessGroup& world, const std::string& my_error);

}  // namespace fsdp_train
