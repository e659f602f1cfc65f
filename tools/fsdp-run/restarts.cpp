// See [Note: restarts] in restarts.h.

#include "restarts.h"

#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "line_prefixer.h"
#include "signal_pipe.h"

namespace fsdp_run {
namespace {

std::string describe_failure(const WorkerFailure& failure, std::optional<int64_t> step) {
  std::string text = fmt::format("rank {} {}", failure.rank, failure.how);
  if (step) text += fmt::format(" during step {}", *step);
  return text;
}

}  // namespace

ProgressFiles::ProgressFiles() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/fsdp-run-progress-XXXXXX";
  if (::mkdtemp(pattern.data()) != nullptr) {
    dir_ = pattern;
  } else {
    say(
        fmt::format("cannot create '{}' for the workers' progress ({}); restarting without "
                    "the same-step rule (set TMPDIR to a writable directory)",
                    pattern, std::strerror(errno)));
  }
}

ProgressFiles::~ProgressFiles() {
  if (dir_.empty()) return;
  for (const std::string& file : written_) std::remove(file.c_str());
  ::rmdir(dir_.c_str());
}

std::string ProgressFiles::path(int restart_count) {
  if (dir_.empty()) return "";
  written_.push_back(fmt::format("{}/start-{}", dir_, restart_count));
  written_.push_back(written_.back() + ".tmp");  // where a worker may have left one
  return written_[written_.size() - 2];
}

std::optional<int64_t> ProgressFiles::failed_in_step(int restart_count) const {
  if (dir_.empty()) return std::nullopt;
  std::ifstream in(fmt::format("{}/start-{}", dir_, restart_count));
  int64_t last_completed = 0;
  if (!(in >> last_completed) || last_completed < 0) return std::nullopt;
  return last_completed + 1;
}

std::string epoch_seconds(std::chrono::system_clock::time_point at) {
  return fmt::format("{:.6f}", std::chrono::duration<double>(at.time_since_epoch()).count());
}

int pending_stop_signal() {
  int stop_signal = 0;
  for (int signo : SignalPipe::drain()) {
    if (signo != SIGCHLD && stop_signal == 0) stop_signal = signo;
  }
  return stop_signal;
}

RestartPolicy::Decision RestartPolicy::after_failure(const JobOutcome& outcome,
                                                     std::optional<int64_t> failed_in_step) {
  Decision decision;
  if (max_restarts_ == 0 || !outcome.failure) return decision;
  const std::string cause = describe_failure(*outcome.failure, failed_in_step);
  const int left = max_restarts_ - restarts_done_;
  if (outcome.interrupted) {
    decision.message = fmt::format(
        "{}; not restarting: fsdp-run itself was told to stop (SIGINT, SIGTERM or SIGHUP)", cause);
  } else if (outcome.start_failed) {
    decision.message =
        fmt::format("{}; not restarting: it would not start the next time either", cause);
  } else if (failed_in_step && previous_failed_step_ == failed_in_step) {
    decision.message = fmt::format(
        "{} again, as the previous start did: restarting made no progress, so fsdp-run stops "
        "with {} restart(s) left instead of using them up; fix what fails at step {} (see the "
        "rank's output above), then run the job again",
        cause, left, *failed_in_step);
  } else if (left == 0) {
    decision.message =
        fmt::format("{}; no restarts left (--max-restarts {} used up)", cause, max_restarts_);
  } else {
    ++restarts_done_;
    decision.restart = true;
    decision.message =
        fmt::format("restart {} of {}: {}; the group stopped in {:.2f} s; starting it again",
                    restarts_done_, max_restarts_, cause, outcome.stop_seconds);
  }
  previous_failed_step_ = failed_in_step;
  return decision;
}

JobOutcome supervise_with_restarts(const LaunchOptions& opts, const std::string& program_path) {
  std::optional<ProgressFiles> progress;
  if (opts.max_restarts > 0) progress.emplace();
  RestartPolicy policy(opts.max_restarts);
  AttemptInfo attempt;
  while (true) {
    if (progress) attempt.progress_file = progress->path(attempt.restart_count);
    JobOutcome outcome = supervise_workers(opts, program_path, attempt);
    if (!outcome.failure) return outcome;  // done, or stopped by a signal
    const std::optional<int64_t> step =
        progress ? progress->failed_in_step(attempt.restart_count) : std::nullopt;
    const RestartPolicy::Decision decision = policy.after_failure(outcome, step);
    if (!decision.message.empty()) say(decision.message);
    if (!decision.restart) return outcome;
    if (const int signo = pending_stop_signal(); signo != 0) {
      say("got a stop signal while restarting; not starting the group again");
      outcome.launcher_signal = signo;
      return outcome;
    }
    attempt.restart_count = policy.restarts_done();
    attempt.failure_time = epoch_seconds(outcome.failure->at);
  }
}

}  // namespace fsdp_run
