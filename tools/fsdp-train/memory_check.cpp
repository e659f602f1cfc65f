#include "memory_check.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>

#include "fsdp/models/gpt_size.h"
#include "text_format.h"

namespace fsdp_train {
namespace {

constexpr double kFloatBytes = 4;
constexpr double kVocab = 256;  // bytes

// In double: absurd options give a large number, not a wrapped one.
double parameter_count(const TrainOptions& o) {
  return fsdp::models::gpt_parameter_count<double>(kVocab, static_cast<double>(o.context),
                                                   static_cast<double>(o.width),
                                                   static_cast<double>(o.layers));
}

// Activations kept for backward by one micro-batch: per block about 20
// width-sized values and the attention scores per position, plus the logits.
// A checkpointed block keeps only its input, and backward needs one block's
// internals again while it recomputes.
double activation_bytes(const TrainOptions& o, const BatchLayout& layout) {
  const double tokens = static_cast<double>(layout.micro_batch) * static_cast<double>(o.context);
  const double per_token_per_block = 20 * static_cast<double>(o.width) +
                                     2 * static_cast<double>(o.heads) * static_cast<double>(o.context);
  const int64_t every = checkpoint_every(o).value_or(0);
  const int64_t checkpointed = every > 0 ? (o.layers + every - 1) / every : 0;
  const double kept_per_token = static_cast<double>(o.layers - checkpointed) * per_token_per_block +
                                static_cast<double>(checkpointed) * static_cast<double>(o.width) +
                                (checkpointed > 0 ? per_token_per_block : 0.0);
  return kFloatBytes * tokens * (kept_per_token + 2 * kVocab);
}

std::string human(double bytes) {
  if (bytes < 1e18) return human_bytes(static_cast<int64_t>(bytes));
  return fmt::format("{:.3g} bytes", bytes);
}

}  // namespace

double estimated_rank_bytes(const TrainOptions& o, const BatchLayout& layout) {
  const double full_model = kFloatBytes * parameter_count(o);
  const double shards = 4 * full_model / std::max(1, layout.world_size);  // params, grads, 2 moments
  // Deferred, a rank builds one module at a time: a block's parameters.
  const double w = static_cast<double>(o.width);
  const double built = o.deferred_init ? kFloatBytes * (12 * w * w + 13 * w) : full_model;
  return built + shards + activation_bytes(o, layout);
}

std::string check_fits_in_memory(const TrainOptions& o, const BatchLayout& layout,
                                 int ranks_on_node, std::optional<int64_t> available_bytes,
                                 std::optional<int64_t> rank_limit_bytes) {
  const double per_rank = estimated_rank_bytes(o, layout);
  if (rank_limit_bytes && per_rank > static_cast<double>(*rank_limit_bytes)) {
    return fmt::format(
        "the model does not fit in this rank's memory limit: --layers {} --width {} --context {} "
        "is {:.3g} parameters; each rank needs at least {} ({}its shards of the parameters, "
        "gradients and AdamW state, and one micro-batch's activations), but its limit is {} "
        "(RLIMIT_DATA, e.g. fsdp-run --memory-limit). Run more ranks (each holds 1/{} of the "
        "state now){}, or pass a smaller model or --micro-batch; `fsdp-plan --fit` lists "
        "settings that fit",
        o.layers, o.width, o.context, parameter_count(o), human(per_rank),
        o.deferred_init ? "" : "the full model while it is built, then ", human(static_cast<double>(*rank_limit_bytes)),
        layout.world_size, o.deferred_init ? "" : ", pass --deferred-init");
  }
  if (!available_bytes) return "";
  const double needed = per_rank * std::max(1, ranks_on_node);
  if (needed <= static_cast<double>(*available_bytes)) return "";
  return fmt::format(
      "the model does not fit: --layers {} --width {} --context {} is {:.3g} parameters; each "
      "rank needs at least {} (the full model while it is built, then its shards, gradients "
      "and AdamW state, and one micro-batch's activations), {} for the {} rank{} on this node, "
      "but only {} is available. Pass a smaller --layers, --width, --context or --micro-batch",
      o.layers, o.width, o.context, parameter_count(o), human(per_rank), human(needed),
      ranks_on_node, ranks_on_node == 1 ? "" : "s", human(static_cast<double>(*available_bytes)));
}

std::string check_corpus_fits(const std::string& data_path, int ranks_on_node,
                              std::optional<int64_t> available_bytes) {
  std::error_code ec;
  if (data_path.empty() || !available_bytes) return "";
  const auto size = std::filesystem::file_size(data_path, ec);
  if (ec) return "";  // missing or not a file: the corpus loader says which
  const double needed = 2.0 * static_cast<double>(size) * std::max(1, ranks_on_node);
  if (needed <= static_cast<double>(*available_bytes)) return "";
  return fmt::format(
      "data file '{}' is {}; fsdp-train holds the corpus in memory on every rank (twice while "
      "reading it), so the {} rank{} on this node need {}, but only {} is available. Pass a "
      "smaller --data file (a slice of this one trains the same way)",
      data_path, human(static_cast<double>(size)), ranks_on_node, ranks_on_node == 1 ? "" : "s",
      human(needed), human(static_cast<double>(*available_bytes)));
}

std::string out_of_memory_hint(const std::exception& e) {
  const bool out_of_memory = dynamic_cast<const std::bad_alloc*>(&e) != nullptr ||
                             std::string(e.what()).find("can't allocate memory") != std::string::npos;
  if (!out_of_memory) return "";
  const auto limit = rank_memory_limit_bytes();
  return fmt::format(
      "this rank ran out of memory{}. Plan the run with fsdp-plan (the same model flags and "
      "--world-size; --fit lists what fits), then run more ranks, --activation-checkpointing "
      "all, a smaller --micro-batch{}",
      limit ? fmt::format(" (its limit is {} per rank, RLIMIT_DATA)", human(static_cast<double>(*limit))) : "",
      limit ? ", or raise fsdp-run --memory-limit" : "");
}

std::optional<int64_t> rank_memory_limit_bytes() {
  rlimit limit{};
  if (getrlimit(RLIMIT_DATA, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<int64_t>(limit.rlim_cur);
}

std::optional<int64_t> proc_kib_field_bytes(const char* path, const char* field) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream fields(line);
    std::string name;
    int64_t kib = 0;
    if (fields >> name >> kib && name == field) return kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> available_memory_bytes() {
  return proc_kib_field_bytes("/proc/meminfo", "MemAvailable:");
}

}  // namespace fsdp_train
