#pragma once
// What rank 0 prints around training: the header that says what is about to
// run, and the summary table at the end.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "corpus.h"
#include "fsdp/checkpoint/run_dir.h"
#include "metrics_log.h"
#include "train_options.h"

namespace fsdp_train {

struct RunHeader {
  const TrainOptions* options = nullptr;
  const BatchLayout* layout = nullptr;
  const ByteCorpus* corpus = nullptr;
  std::string launcher;
  int threads = 1;
  int64_t num_params = 0;
  int64_t unsharded_param_bytes = 0;
  std::string run_dir;
  std::string resume_dir;  // "" unless resuming
  std::vector<std::string> resume_rejected;  // skipped newer checkpoints, with why
  fsdp::ckpt::CleanReport cleaned;           // partial saves removed at start
  int64_t start_step = 0;
  int64_t rank_memory_limit = 0;  // RLIMIT_DATA, 0 when unlimited
};

void print_header(const RunHeader& header);

// One rank's tensor bytes at the end of training.
struct RankMemory {
  int64_t sharded_params = 0;
  int64_t sharded_grads = 0;
  int64_t optimizer_state = 0;
  int64_t peak_gathered = 0;  // most gathered parameter bytes at once, over the run
  int64_t peak_tensors = 0;   // most tensor bytes at once in a step, over the run
  int64_t peak_resident = 0;  // VmHWM: the process's resident high-water mark
  int64_t peak_device_allocated = 0;  // --device cuda: the caching allocator's peaks
  int64_t peak_device_reserved = 0;
};

// --hook-times: the framework's own time, per unit and forward-backward.
struct HookSummary {
  int64_t units = 0;          // blocks and the root
  int64_t micro_batches = 0;  // forward-backwards per step
  double us_per_unit = 0;     // median over steps of the slowest rank's hook time
  std::vector<std::pair<std::string, double>> by_range;  // rank 0's medians, per unit
  bool includes_waits = false;  // a CPU process group: the hooks wait for collectives
};

// The hook times of `records` (none when they carry none), per unit and
// forward-backward. `includes_waits`: they were taken on a CPU process group.
std::optional<HookSummary> summarize_hook_times(const std::vector<StepRecord>& records,
                                                int64_t units, int64_t micro_batches,
                                                bool includes_waits);

struct RunSummary {
  int64_t start_step = 0;  // steps done before this run (resume), else 0
  int64_t last_step = 0;
  int64_t total_steps = 0;
  bool stopped_by_time_budget = false;
  double train_seconds = 0;
  double first_loss = 0;  // of this run's first step
  double final_loss = 0;  // mean of the last few steps
  std::optional<double> final_val_loss;
  double mean_tokens_per_s = 0;
  int64_t unsharded_param_bytes = 0;
  std::vector<RankMemory> ranks;
  bool on_cuda = false;  // --device cuda: the ranks' CUDA peaks are shown
  std::optional<HookSummary> hooks;
  std::string run_dir;
  std::string metrics;
  std::string plot;        // the PNG, or "" when it could not be drawn
  std::string plot_error;  // why not
  std::string checkpoint;
  std::string sample_file;  // "" when no sample was generated
  std::optional<RestartMarker> restarts;  // the newest restart marker, if any
};

void print_summary(const RunSummary& summary);

}  // namespace fsdp_train
