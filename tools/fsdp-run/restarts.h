#pragma once
// --max-restarts: starting the whole group again after a worker fails, and
// when not to.
//
// [Note: restarts]
// fsdp-run restarts the whole group, never one worker: a collective job
// cannot take a rank back mid-step (its peers hold a group that lost a
// member), so every worker is stopped by the stop policy (supervisor.h),
// then all of them start again with TORCHELASTIC_RESTART_COUNT one higher,
// and the program resumes from its own checkpoints (fsdp-train --resume
// auto). This is torchrun's --max-restarts.
// - Restarted: a worker that exits non-zero, dies from a signal, or stays
//   stopped past the timeout, while restarts are left.
// - Never restarted: SIGINT/SIGTERM/SIGHUP sent to fsdp-run, even one that
//   arrives while a failed group is being stopped (whoever sent it wants the
//   job to end), and a program that cannot be started at all (it would not
//   start the next time either).
// - Same step: each start gets its own FSDP_RUN_PROGRESS_FILE, where the
//   workers write their last completed step. A failure during the same step
//   as the previous failure means the restart made no progress: a fault that
//   follows the step (a bad batch, a NaN, running out of memory there) would
//   hit every restart again, so fsdp-run stops and names the step instead of
//   using up the restarts left. Starts that report no step (any program but
//   fsdp-train) are not compared.
// - Latency: a restarted worker gets FSDP_RUN_FAILURE_TIME, when the failure
//   was seen, so it can measure the time from the failure to its first step;
//   fsdp-run logs the part it sees, how long stopping the group took.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launch_options.h"
#include "supervisor.h"

namespace fsdp_run {

// Whether a failed start is followed by another. One per job: it counts the
// restarts and remembers the step of the previous failure.
class RestartPolicy {
 public:
  explicit RestartPolicy(int max_restarts) : max_restarts_(max_restarts) {}

  struct Decision {
    bool restart = false;
    std::string message;  // for stderr; "" when there is nothing to say
  };

  // `outcome` ended with a failure. `failed_in_step`: the step that was
  // running when it failed, if the workers reported their progress.
  Decision after_failure(const JobOutcome& outcome, std::optional<int64_t> failed_in_step);

  int restarts_done() const { return restarts_done_; }

 private:
  int max_restarts_;
  int restarts_done_ = 0;
  std::optional<int64_t> previous_failed_step_;
};

// A private directory holding one progress file per start of the group, so a
// worker of an earlier start can never overwrite a later start's progress.
class ProgressFiles {
 public:
  ProgressFiles();  // says so on stderr when it cannot make the directory
  ~ProgressFiles();
  ProgressFiles(const ProgressFiles&) = delete;
  ProgressFiles& operator=(const ProgressFiles&) = delete;

  // Start `restart_count`'s file; "" when there is no directory: the
  // workers then get no file to write.
  std::string path(int restart_count);
  // The step running when start `restart_count` failed: one after the last
  // completed step its workers wrote; nothing if they wrote none.
  std::optional<int64_t> failed_in_step(int restart_count) const;

 private:
  std::string dir_;
  std::vector<std::string> written_;
};

// `at` as seconds since the epoch, for FSDP_RUN_FAILURE_TIME.
std::string epoch_seconds(std::chrono::system_clock::time_point at);

// A stop signal that reached fsdp-run after the last group ended (0 if
// none): it must stop the job, not be found by the next group's supervisor.
int pending_stop_signal();

// Runs the group with opts.max_restarts restarts. Returns the last start's
// outcome. SignalPipe::install() must have been called.
JobOutcome supervise_with_restarts(const LaunchOptions& opts, const std::string& program_path);

}  // namespace fsdp_run
