#pragma once
// What the launcher tells this start of the job about restarts, and what the
// trainer tells it back. See [Note: restarts] in tools/fsdp-run/restarts.h.
//
//   TORCHELASTIC_RESTART_COUNT  0 for the first start, then 1, 2, ... (torchrun's name)
//   FSDP_RUN_FAILURE_TIME       when the failure before this start was seen, in
//                               seconds since the epoch: the restart's latency
//                               is measured from it
//   FSDP_RUN_PROGRESS_FILE      where this start writes its last completed step,
//                               so fsdp-run can tell a restart that made no
//                               progress (its same-step rule)

#include <cstdint>
#include <optional>
#include <string>

namespace fsdp_train {

struct RestartEnv {
  int restart_count = 0;
  std::optional<double> failure_time;  // epoch seconds
  std::string progress_file;           // "" = none asked for
};

// Reads the variables above. A value that is not a number reads as unset.
RestartEnv read_restart_env();

// Wall-clock seconds since the epoch: comparable with FSDP_RUN_FAILURE_TIME,
// which another process took.
double epoch_seconds_now();

// Replaces the progress file with `last_completed_step`, atomically (a write
// then a rename), so fsdp-run never reads half a number. Does nothing when
// `path` is "". A failure to write is ignored: the file only sharpens
// fsdp-run's restart decisions and must never stop training.
void write_progress(const std::string& path, int64_t last_completed_step);

// When this start's phases ended, in epoch seconds, for the restart latency
// line: from the failure to the first step after it.
struct StartTimeline {
  double process_start = 0;   // main() began
  double inputs_checked = 0;  // options, checkpoint metadata and corpus checked
  double world_ready = 0;     // the ranks met and the process group exists
};

}  // namespace fsdp_train
