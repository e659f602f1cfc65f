// The checks on fsdp-train's options, before any heavy work, and what the
// checked options mean for the library (strategy, precision, checkpointing).
// See train_options.h.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model_presets.h"
#include "train_options.h"
#include "training_device.h"

namespace fsdp_train {
namespace {

// [Note: option checks]
// check_options runs in two parts: validate_options looks at each option's
// value on its own, and derive_batch_layout works out how the global batch
// splits at this world size (which can fail too, for a valid --batch). Both
// append to one list, so a user sees every problem at once, and each
// message names the option, the value and the fix.

void require_positive(std::vector<std::string>& errors, const char* name, int64_t value,
                      const char* example) {
  if (value <= 0) {
    errors.push_back(fmt::format("--{} is {}; it must be a positive integer (e.g. --{} {})", name,
                                 value, name, example));
  }
}

// `meaning` says what 0 does, e.g. "0 turns it off".
template <class Number>
void require_non_negative(std::vector<std::string>& errors, const char* name, Number value,
                          const char* meaning) {
  if (!(value >= 0) || !std::isfinite(static_cast<double>(value))) {
    errors.push_back(fmt::format("--{} is {}; it must be >= 0 ({})", name, value, meaning));
  }
}

// Suggests the head counts that divide the width closest to the asked one.
std::string heads_do_not_divide_width(const TrainOptions& o) {
  std::vector<int64_t> divisors;
  for (int64_t h = 1; h <= o.width; ++h) {
    if (o.width % h == 0) divisors.push_back(h);
  }
  std::stable_sort(divisors.begin(), divisors.end(), [&o](int64_t a, int64_t b) {
    return std::llabs(a - o.heads) < std::llabs(b - o.heads);
  });
  divisors.resize(std::min<size_t>(divisors.size(), 4));
  std::sort(divisors.begin(), divisors.end());
  return fmt::format(
      "--heads {} does not divide --width {}: each head needs width/heads channels; pick "
      "--heads from {{{}}} or a --width that is a multiple of {}",
      o.heads, o.width, fmt::join(divisors, ", "), o.heads);
}

void validate_sizes(const TrainOptions& o, std::vector<std::string>& errors) {
  require_positive(errors, "layers", o.layers, "4");
  require_positive(errors, "width", o.width, "128");
  require_positive(errors, "heads", o.heads, "4");
  require_positive(errors, "context", o.context, "128");
  require_positive(errors, "batch", o.batch, "32");
  require_positive(errors, "steps", o.steps, "500");
  require_positive(errors, "eval-batches", o.eval_batches, "4");
  if (o.width > 0 && o.heads > 0 && o.width % o.heads != 0) {
    errors.push_back(heads_do_not_divide_width(o));
  }
}

void validate_optimizer(const TrainOptions& o, std::vector<std::string>& errors) {
  if (!(o.lr > 0) || !std::isfinite(o.lr)) {
    errors.push_back(fmt::format("--lr is {}; it must be > 0 (e.g. --lr 3e-3)", o.lr));
  }
  require_non_negative(errors, "min-lr", o.min_lr, "the learning rate the cosine decays to");
  if (o.lr > 0 && o.min_lr > o.lr) {
    errors.push_back(
        fmt::format("--min-lr {} is above --lr {}; the cosine decays from --lr down "
                    "to --min-lr, so pass a smaller --min-lr",
                    o.min_lr, o.lr));
  }
  if (o.warmup < 0)
    errors.push_back(fmt::format("--warmup is {}; it must be >= 0 steps", o.warmup));
  require_non_negative(errors, "weight-decay", o.weight_decay, "0 turns it off");
  require_non_negative(errors, "clip", o.clip, "0 turns clipping off");
  require_non_negative(errors, "time-budget", o.time_budget, "seconds; 0 means no limit");
}

void validate_sampling_and_output(const TrainOptions& o, std::vector<std::string>& errors) {
  require_non_negative(errors, "temperature", o.temperature, "0 samples greedily");
  require_non_negative(errors, "save-every", o.save_every, "0: final checkpoint only");
  require_non_negative(errors, "keep-last", o.keep_last, "0: keep every step checkpoint");
  if (o.async_save && o.save_every == 0) {
    errors.push_back(
        "--async-save writes the --save-every checkpoints in the background, and "
        "--save-every is 0; pass --save-every N, or drop --async-save (the final "
        "checkpoint is always written before the run ends)");
  }
  require_non_negative(errors, "eval-every", o.eval_every, "0: at the end only");
  require_non_negative(errors, "sample-bytes", o.sample_bytes, "0: no sample");
  require_non_negative(errors, "log-every", o.log_every, "0: automatic");
  if (o.sample_bytes > 0 && o.prompt.empty()) {
    errors.push_back(
        "--prompt is empty; generation needs at least one byte to start from (e.g. "
        "--prompt 'The ')");
  }
}

// The FSDP and launch options: strategy, precision, timeout.
void validate_choices(const TrainOptions& o, std::vector<std::string>& errors) {
  if (o.strategy != "full" && o.strategy != "grad-op" && o.strategy != "none" &&
      o.strategy != "hybrid") {
    errors.push_back(
        fmt::format("--strategy '{}' is not one of: full (ZeRO-3), grad-op (ZeRO-2), "
                    "none (replicated, like DDP), hybrid (ZeRO-3 within a node, "
                    "replicated across nodes)",
                    o.strategy));
  }
  if (o.mixed_precision != "fp32" && o.mixed_precision != "bf16") {
    errors.push_back(
        fmt::format("--mixed-precision '{}' is not one of: fp32, bf16", o.mixed_precision));
  }
  if (!checkpoint_every(o)) {
    errors.push_back(
        fmt::format("--activation-checkpointing '{}' is not one of: none, all, every-N "
                    "with N a positive integer (e.g. every-2 for every other block)",
                    o.activation_checkpointing));
  }
  if (!(o.timeout >= 0 && o.timeout <= 86400)) {
    errors.push_back(
        fmt::format("--timeout is {}; give seconds from 0 to 86400 (0: "
                    "FSDP_COMM_TIMEOUT if set, else 300)",
                    o.timeout));
  }
}

// Each option's value on its own. See [Note: option checks].
void validate_options(const TrainOptions& o, std::vector<std::string>& errors) {
  validate_sizes(o, errors);
  validate_optimizer(o, errors);
  validate_sampling_and_output(o, errors);
  validate_choices(o, errors);
  validate_compression(o, errors);
  validate_device(o, errors);
  validate_preset(o, errors);
}

// Every rank takes an equal, non-empty slice of the global batch: "" when
// --batch splits over `world_size` ranks, else why not and the fix.
std::string batch_over_ranks_error(const TrainOptions& o, int world_size) {
  if (world_size > o.batch) {
    return fmt::format(
        "world size {} is larger than the global batch {}: every rank needs at least one "
        "sequence per step; pass --batch {} (or more) or run at most {} ranks",
        world_size, o.batch, world_size, o.batch);
  }
  if (o.batch % world_size != 0) {
    const int64_t up = (o.batch / world_size + 1) * world_size;
    return fmt::format(
        "--batch {} is not divisible by the world size {}: each rank takes an equal slice of "
        "the global batch; pass --batch {} or --batch {}",
        o.batch, world_size, up, up - world_size);
  }
  return "";
}

// --micro-batch given: grad_accum follows (and must agree if given too).
std::string split_by_micro_batch(const TrainOptions& o, BatchLayout& split) {
  if (split.per_rank % o.micro_batch != 0) {
    return fmt::format(
        "--micro-batch {} does not divide the per-rank batch {} (--batch {} over {} "
        "ranks); pass a --micro-batch that divides {}",
        o.micro_batch, split.per_rank, o.batch, split.world_size, split.per_rank);
  }
  split.micro_batch = o.micro_batch;
  split.grad_accum = split.per_rank / o.micro_batch;
  if (o.grad_accum > 0 && o.grad_accum != split.grad_accum) {
    return fmt::format(
        "--grad-accum {} disagrees with --micro-batch {}: --batch {} over {} ranks is {} "
        "sequences per rank, i.e. {} micro-batches; pass only one of the two",
        o.grad_accum, o.micro_batch, o.batch, split.world_size, split.per_rank, split.grad_accum);
  }
  return "";
}

// --micro-batch left out: it follows from --grad-accum (default 1).
std::string split_by_grad_accum(const TrainOptions& o, BatchLayout& split) {
  split.grad_accum = o.grad_accum > 0 ? o.grad_accum : 1;
  if (split.per_rank % split.grad_accum != 0) {
    return fmt::format(
        "--grad-accum {} does not divide the per-rank batch {} (--batch {} over {} ranks); "
        "pass a --grad-accum that divides {}",
        split.grad_accum, split.per_rank, o.batch, split.world_size, split.per_rank);
  }
  split.micro_batch = split.per_rank / split.grad_accum;
  return "";
}

// How the global batch splits over `world_size` ranks, or nullopt (and the
// reason appended to `errors`) when it does not. Nothing when --batch or the
// world size is not positive: validate_options reports that.
// See [Note: option checks].
std::optional<BatchLayout> derive_batch_layout(const TrainOptions& o, int world_size,
                                               std::vector<std::string>& errors) {
  if (o.batch <= 0 || world_size <= 0) return std::nullopt;
  std::string error = batch_over_ranks_error(o, world_size);
  if (!error.empty()) {
    errors.push_back(std::move(error));
    return std::nullopt;
  }
  BatchLayout split;
  split.world_size = world_size;
  split.per_rank = o.batch / world_size;
  if (o.micro_batch < 0 || o.grad_accum < 0) {
    errors.push_back(
        fmt::format("--micro-batch {} / --grad-accum {}: both must be positive "
                    "(or left out)",
                    o.micro_batch, o.grad_accum));
    return std::nullopt;
  }
  error = o.micro_batch > 0 ? split_by_micro_batch(o, split) : split_by_grad_accum(o, split);
  if (!error.empty()) {
    errors.push_back(std::move(error));
    return std::nullopt;
  }
  return split;
}

}  // namespace

std::vector<std::string> check_options(const TrainOptions& o, int world_size, BatchLayout* layout) {
  std::vector<std::string> errors;
  validate_options(o, errors);
  const std::optional<BatchLayout> split = derive_batch_layout(o, world_size, errors);
  if (split && layout != nullptr) *layout = *split;
  return errors;
}

fsdp::ShardingStrategy sharding_strategy(const TrainOptions& o) {
  if (o.strategy == "grad-op") return fsdp::ShardingStrategy::kShardGradOp;
  if (o.strategy == "none") return fsdp::ShardingStrategy::kNoShard;
  if (o.strategy == "hybrid") return fsdp::ShardingStrategy::kHybridShard;
  return fsdp::ShardingStrategy::kFullShard;
}

fsdp::MixedPrecisionPolicy mixed_precision_policy(const TrainOptions& o) {
  fsdp::MixedPrecisionPolicy policy;
  if (o.mixed_precision == "bf16") policy.param_dtype(at::kBFloat16).reduce_dtype(at::kFloat);
  return policy;
}

std::optional<int64_t> checkpoint_every(const TrainOptions& o) {
  const std::string& value = o.activation_checkpointing;
  if (value == "none") return 0;
  if (value == "all") return 1;
  const std::string prefix = "every-";
  if (value.size() <= prefix.size() || value.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  const std::string digits = value.substr(prefix.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const int64_t n = std::stoll(digits);
  if (n <= 0) return std::nullopt;
  return n;
}

}  // namespace fsdp_train
