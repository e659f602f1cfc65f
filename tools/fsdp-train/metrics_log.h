#pragma once
// metrics.jsonl: one JSON object per optimizer step, written by rank 0 and
// flushed as it goes, so a killed run keeps what it measured.
//
//   {"step":12,"loss":4.0913848876953125,"lr":0.0012,"grad_norm":0.84,
//    "tokens_per_s":14210.5,"ms":288.2,"elapsed_s":3.6,
//    "sharded_param_bytes":[...per rank],"peak_gathered_param_bytes":[...],
//    "peak_tensor_bytes":[...],"peak_resident_bytes":[...],
//    "val_loss":4.02}                       (val_loss only on evaluation steps)
//
// peak_tensor_bytes is each rank's peak during this step; peak_resident_bytes
// its high-water mark since it started ([Note: what the trainer's memory
// figures cover] in peak_memory.h). With --device cuda, also
// peak_device_allocated_bytes and peak_device_reserved_bytes: the CUDA
// caching allocator's peaks during this step. With --hook-times, also
// hook_us (per rank: the wall time inside FSDP's hooks during this step, in
// microseconds) and hook_us_by_range (rank 0's, by hook: {"pre_forward":
// 812.5, ...}; see fsdp/hook_timer.h).
//
// `loss` is the mean over the whole global batch, written with full
// precision, so runs can be compared bit for bit.
//
// A start of the job that follows a restart (TORCHELASTIC_RESTART_COUNT > 0)
// first writes a restart marker, with no "step" key:
//
//   {"restart":2,"after_step":4,"redone_steps":3,"redone_s":0.41,
//    "total_redone_steps":4,"total_redone_s":0.55}
//
// See [Note: redone work across restarts] in metrics_log.cpp.

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "output_file.h"

namespace fsdp_train {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double ms = 0;         // wall time of this step
  double elapsed_s = 0;  // wall time since training started
  std::vector<int64_t> sharded_param_bytes;        // per rank
  std::vector<int64_t> peak_gathered_param_bytes;  // per rank, during this step
  std::vector<int64_t> peak_tensor_bytes;          // per rank, during this step
  std::vector<int64_t> peak_resident_bytes;        // per rank, since it started
  std::vector<int64_t> peak_device_allocated_bytes;  // per rank, this step; CUDA only
  std::vector<int64_t> peak_device_reserved_bytes;   // per rank, this step; CUDA only
  std::vector<int64_t> hook_us;  // per rank, this step; --hook-times only
  std::vector<std::pair<std::string, double>> hook_us_by_range;  // rank 0's; --hook-times only
  std::optional<double> val_loss;

  // One line of metrics.jsonl (a JSON object, no newline).
  std::string to_json_line() const;
  // The record of a line, or nothing for a line that is no complete record
  // (e.g. one cut by a kill).
  static std::optional<StepRecord> from_json_line(const std::string& line);
};

// Where a restarted start of the job began, and the work the restarts
// threw away: the steps recorded after the checkpoint it resumed from.
struct RestartMarker {
  int restart = 0;                 // its TORCHELASTIC_RESTART_COUNT
  int64_t after_step = 0;          // the checkpoint's step; 0 for a fresh start
  int64_t redone_steps = 0;        // recorded steps this restart must do again
  double redone_s = 0;             // their step time, seconds
  int64_t total_redone_steps = 0;  // over every restart of the run so far
  double total_redone_s = 0;

  std::string to_json_line() const;
  static std::optional<RestartMarker> from_json_line(const std::string& line);
  // "2 (redone 6 steps, 0.6 s)": the restarts so far and the work they redid,
  // for the progress line and the summary.
  std::string summary() const;
};

class MetricsLog {
 public:
  // Opens <run_dir>/metrics.jsonl. A fresh run truncates it; a run resumed
  // at `resumed_step` > 0 keeps the lines of steps <= resumed_step (the same
  // run dir continued) and drops later ones (they were not checkpointed).
  // `restart_count` > 0 (a start after a restart) also reads what it drops,
  // and writes a restart marker counting it.
  MetricsLog(const std::string& run_dir, int64_t resumed_step, int restart_count = 0);

  void append(const StepRecord& record);
  const std::vector<StepRecord>& records() const { return records_; }
  // The markers kept and this start's, oldest first.
  const std::vector<RestartMarker>& restarts() const { return restarts_; }
  const std::string& path() const { return path_; }

 private:
  // The lines kept, in order. Adds what it drops to `dropped`'s redone work,
  // and takes `dropped`'s totals from the newest marker read, kept or not.
  std::vector<std::string> read_previous(int64_t resumed_step, RestartMarker& dropped);

  std::string path_;
  std::vector<StepRecord> records_;
  std::vector<RestartMarker> restarts_;
  std::optional<LineFile> out_;  // opened once the kept records are read
};

}  // namespace fsdp_train
