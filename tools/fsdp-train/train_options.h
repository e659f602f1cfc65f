#pragma once
// What the user asked fsdp-train to do: every command-line option, its
// default, and the checks that run on every rank before any heavy work.
//
// Checks are deterministic functions of the arguments and the world size, so
// every rank reaches the same verdict and all of them exit non-zero together
// (no rank is left waiting in a collective for a peer that quit).

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fsdp/options.h"

namespace fsdp_train {

// The default corpus: Debian's `fortunes` package.
constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

struct TrainOptions {
  // Model: a byte-level GPT; each block is its own FSDP unit.
  int64_t layers = 4;     // transformer blocks
  int64_t width = 128;    // d_model
  int64_t heads = 4;      // attention heads; must divide width
  int64_t context = 128;  // bytes per training window (and generation window)
  std::string preset;     // "" or a model_presets() name: the four sizes above, unless given

  // Data and batch.
  std::string data;        // text file; "" = every plain-text file of kFortunesDir
  int64_t batch = 32;      // global batch: sequences per optimizer step, all ranks together
  int64_t micro_batch = 0; // sequences per rank per forward/backward; 0 = derive
  int64_t grad_accum = 0;  // micro-batches per step; 0 = derive (1 if micro_batch unset)

  // Optimizer and schedule: AdamW, linear warmup, cosine decay to min_lr.
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup = 50;  // capped at steps/10 unless given
  double weight_decay = 0.1;
  double clip = 1.0;  // max global gradient norm; 0 disables clipping
  int64_t steps = 500;
  double time_budget = 0;  // seconds of training; 0 = none
  uint64_t seed = 1337;

  // Where and how it runs.
  std::string device = "cpu";             // cpu | cuda (training_device.h)
  std::string backend;                    // "" (cpu: gloo, cuda: nccl) | gloo | nccl
  std::string strategy = "full";          // full | grad-op | none | hybrid
  std::string mixed_precision = "fp32";   // fp32 | bf16
  bool offload = false;
  bool no_prefetch = false;
  bool deferred_init = false;  // build without parameter storage; fully_shard initializes
  std::string activation_checkpointing = "none";  // none | all | every-N
  std::string compress_weights = "none";  // none | bf16 | int8: the parameter all-gathers
  std::string compress_grads = "none";    // none | bf16 | int8: the gradient reductions
  std::string compress_scope = "all";     // all | inter-node (hybrid: the replica all-reduce only)
  int64_t compress_block_size = 256;      // int8: values per fp32 scale
  double timeout = 0;  // seconds a rank may wait for a peer; 0 = FSDP_COMM_TIMEOUT, else 300

  // Evaluation and generation.
  int64_t eval_every = 100;  // steps; 0 = only at the end
  int64_t eval_batches = 4;  // global batches of held-out bytes per evaluation
  int64_t sample_bytes = 256;
  double temperature = 0.8;  // 0 = greedy
  std::string prompt = "The ";

  // Output and checkpoints.
  std::string run_dir;  // "" = runs/<timestamp>
  int64_t save_every = 0;  // steps; 0 = only the final checkpoint
  int64_t keep_last = 0;   // step checkpoints kept; 0 = all
  bool async_save = false;  // write the step checkpoints while training goes on
  std::string resume;      // checkpoint directory (or a run dir holding one)
  int64_t log_every = 0;   // progress lines when stdout is not a terminal; 0 = auto
  bool quiet = false;
  bool hook_times = false;  // time inside FSDP's hooks per step (fsdp::HookTimer)
  bool phase_times = false;  // each step phase's time, the device synchronized (phase_times.h)

  // Options given explicitly on the command line (long names without "--"),
  // so a resumed run can adopt the rest from the checkpoint.
  std::set<std::string> given;
  bool was_given(const std::string& name) const { return given.count(name) > 0; }
};

// How one step's global batch is split: world_size ranks, each running
// grad_accum micro-batches of micro_batch sequences.
struct BatchLayout {
  int world_size = 1;
  int64_t per_rank = 0;     // batch / world_size
  int64_t micro_batch = 0;  // sequences per forward/backward
  int64_t grad_accum = 0;   // micro-batches per step
};

// The result of parsing: options to run with, or an exit code to return at
// once (help printed: 0; bad usage, message printed: 2).
struct ParseResult {
  std::optional<TrainOptions> options;
  int exit_code = 0;
};

ParseResult parse_train_options(int argc, char** argv);

// What follows from the options given (`given` filled): the sizes --preset
// names, and a warmup capped at --steps/10 unless --warmup was given. For a
// program that parses its own subset of fsdp-train's options.
void complete_options(TrainOptions& options);

// Problems with the options themselves and with the batch split at this
// world size; each message names the option, the value and the fix. Empty
// when all is well. `layout` is filled when the batch split is valid.
std::vector<std::string> check_options(const TrainOptions& options, int world_size,
                                       BatchLayout* layout);

fsdp::ShardingStrategy sharding_strategy(const TrainOptions& options);
fsdp::MixedPrecisionPolicy mixed_precision_policy(const TrainOptions& options);
fsdp::CommCompression comm_compression(const TrainOptions& options);
// --activation-checkpointing as GPTConfig::checkpoint_every: none 0, all 1,
// every-N N; nullopt when the value is none of these.
std::optional<int64_t> checkpoint_every(const TrainOptions& options);
// Appends what is wrong with the compression options (compression_options.cpp).
void validate_compression(const TrainOptions& options, std::vector<std::string>& errors);
// "none", "bf16" or "int8" as a wire format; nullopt for anything else.
std::optional<fsdp::WireFormat> wire_format(const std::string& name);

}  // namespace fsdp_train
