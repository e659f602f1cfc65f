#pragma once
// Runs the local workers to the end: starts them, pumps their output, reaps
// them, and applies the stop policy.
//
// [Note: stop policy]
// - All workers exit 0: the job succeeded (exit 0).
// - A worker exits non-zero or dies from a signal (the first one, while the
//   job is still running): fsdp-run names it, sends SIGTERM to every other
//   worker's process group, SIGKILL to those still alive after the grace
//   period, and exits with that worker's code (128+N for signal N).
// - fsdp-run gets SIGINT/SIGTERM/SIGHUP: the same signal goes to every
//   worker's group, then SIGKILL after the grace period; a second signal sends
//   SIGKILL at once. fsdp-run then dies from the signal it got, as a shell
//   expects of an interrupted command.
// - A worker stopped (SIGSTOP, SIGTSTP...) for longer than the communication
//   timeout: see [Note: a stopped worker] in supervisor.cpp.
// - Whenever a worker exits, whatever is left in its process group is
//   SIGKILLed (its leftover children are orphans of a finished rank). The
//   group is killed while the worker is still an unreaped zombie, so the
//   group id cannot have been reused by an unrelated process.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launch_options.h"
#include "worker_env.h"

namespace fsdp_run {

// The failure that ended a group: the first worker to fail, and how.
struct WorkerFailure {
  int rank = 0;
  std::string how;  // "exited with code 3", "was killed by signal 9 (SIGKILL)", ...
  std::chrono::system_clock::time_point at;  // when fsdp-run saw it
};

// What the job ended with. Exactly one of the two is non-zero when it failed.
struct JobOutcome {
  int exit_code = 0;         // the code fsdp-run should exit with
  int launcher_signal = 0;   // a signal fsdp-run received and should die from
  std::optional<WorkerFailure> failure;  // set when a worker failed first
  bool start_failed = false;             // a worker could not be started at all
  bool interrupted = false;              // fsdp-run got SIGINT/SIGTERM/SIGHUP, even while stopping
  double stop_seconds = 0;               // from the failure until every worker was reaped
  std::string stopped_from_outside;      // why a GroupWatcher stopped the group; "" if none did
};

// Something besides this node's workers that can end the group early: in an
// elastic job, the other nodes (see [Note: elastic membership] in
// elastic.h). The supervisor polls fds() beside its own and calls check()
// when one is readable.
class GroupWatcher {
 public:
  virtual ~GroupWatcher() = default;
  virtual std::vector<int> fds() const = 0;
  // Takes in what arrived. Returns why the group must stop, or "" to go on.
  virtual std::string check() = 0;
};

// Starts opts.nproc_per_node workers of `program_path` once (`attempt` says
// which start it is) and supervises them to the end, stopping them early if
// `watcher` (optional) says so. SignalPipe::install() must have been called.
JobOutcome supervise_workers(const LaunchOptions& opts, const std::string& program_path,
                             const AttemptInfo& attempt, GroupWatcher* watcher = nullptr);

}  // namespace fsdp_run
