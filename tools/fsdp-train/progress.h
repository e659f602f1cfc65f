#pragma once
// The live progress line on rank 0:
//
//   step  120/600  loss 2.8123  lr 2.9e-03  12.3k tok/s  ETA 2m05s  shard/rank 422K|422K  peak gathered 903K|903K
//
// With --device cuda it ends with the step's CUDA peaks, allocated and
// reserved: "  cuda peak 1.2G (reserved 1.5G)".
//
// On a terminal it rewrites one line with '\r'; otherwise (a pipe, a file,
// fsdp-run's rank prefixer) it prints a whole line every `log_every` steps,
// plus the first and the last step.

#include <cstdint>
#include <optional>
#include <string>

#include "metrics_log.h"

namespace fsdp_train {

struct ProgressConfig {
  bool enabled = true;     // false with --quiet, and on ranks other than 0
  bool terminal = false;   // stdout is a TTY
  int64_t total_steps = 0;
  int64_t log_every = 1;   // non-terminal output: one line per this many steps
  double time_budget = 0;  // seconds; 0 = none (bounds the ETA)
  // The newest restart marker, if any: the line then ends with
  // "  restarts 2 (redone 6 steps, 0.6 s)".
  std::optional<RestartMarker> restarts;
};

class Progress {
 public:
  explicit Progress(ProgressConfig config) : config_(config) {}

  // Reports a finished step. `eta_s` is the estimated time left.
  void step(const StepRecord& record, double eta_s, bool last);
  // Prints a full line (an evaluation result, a checkpoint note) without
  // garbling a '\r' line in progress.
  void note(const std::string& line);
  // Ends a '\r' line, if one is open.
  void finish();

 private:
  ProgressConfig config_;
  bool line_open_ = false;
  bool printed_any_ = false;
};

// Per-rank byte counts, compact: "422K|422K" (up to 4 ranks) or
// "min 422K max 430K" (more).
std::string per_rank_bytes(const std::vector<int64_t>& bytes);

}  // namespace fsdp_train
