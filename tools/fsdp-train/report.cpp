#include "report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "text_format.h"
#include "training_device.h"

namespace fsdp_train {

void print_header(const RunHeader& h) {
  const TrainOptions& o = *h.options;
  const BatchLayout& b = *h.layout;
  fmt::print("fsdp-train: GPT over bytes, {} layers x {} wide, {} heads, context {}: {:.2f} M "
             "parameters ({})\n",
             o.layers, o.width, o.heads, o.context, static_cast<double>(h.num_params) / 1e6,
             human_bytes(h.unsharded_param_bytes));
  std::string where = fmt::format("{} thread{}", h.threads, h.threads == 1 ? "" : "s");
  if (o.device == "cuda") {
    where = stages_through_host(o) ? "a GPU (Gloo through host memory)" : "one GPU (NCCL)";
  }
  fmt::print("  ranks     {} ({}), {} each; strategy {}, {}, prefetch {}, offload {}, "
             "activation checkpointing {}{}\n",
             b.world_size, h.launcher, where, o.strategy,
             o.mixed_precision, o.no_prefetch ? "off" : "on", o.offload ? "on" : "off",
             o.activation_checkpointing, o.deferred_init ? ", deferred init" : "");
  if (o.compress_weights != "none" || o.compress_grads != "none") {
    fmt::print("  compress  weights {}, gradients {}{}{}\n", o.compress_weights, o.compress_grads,
               o.compress_scope == "inter-node" ? " (across nodes only)" : "",
               o.compress_weights == "int8" || o.compress_grads == "int8"
                   ? fmt::format(" (int8 blocks of {})", o.compress_block_size)
                   : "");
  }
  if (h.rank_memory_limit > 0) {
    fmt::print("  memory    limit {} per rank (RLIMIT_DATA)\n", human_bytes(h.rank_memory_limit));
  }
  fmt::print("  data      {}: {} in {} file{} ({} train, {} validation)\n", h.corpus->source,
             human_bytes(h.corpus->total_bytes()), h.corpus->files.size(),
             h.corpus->files.size() == 1 ? "" : "s", human_bytes(h.corpus->train.size()),
             human_bytes(h.corpus->val.size()));
  fmt::print("  batch     {} sequences/step = {} rank{} x {} micro-batch{} x {}; {} tokens/step\n",
             o.batch, b.world_size, b.world_size == 1 ? "" : "s", b.grad_accum,
             b.grad_accum == 1 ? "" : "es", b.micro_batch, o.batch * o.context);
  fmt::print("  optimizer AdamW lr {:g}, warmup {} steps, cosine to {:g} at step {}; weight decay "
             "{:g}; clip {}\n",
             o.lr, o.warmup, o.min_lr, o.steps, o.weight_decay,
             o.clip > 0 ? fmt::format("{:g}", o.clip) : std::string("off"));
  if (!h.resume_dir.empty()) {
    fmt::print("  resume    {} at step {}\n", h.resume_dir, h.start_step);
  }
  for (const auto& rejected : h.resume_rejected) {
    fmt::print("  resume    skipped (did not verify) {}\n", rejected);
  }
  for (const auto& removed : h.cleaned.removed) {
    fmt::print("  cleaned   {} (left by a killed save)\n", removed);
  }
  if (!h.cleaned.removed.empty()) {
    fmt::print("  cleaned   {} freed\n", human_bytes(h.cleaned.bytes));
  }
  fmt::print("  run dir   {}{}\n", h.run_dir,
             o.time_budget > 0 ? fmt::format(" (time budget {})", human_duration(o.time_budget))
                               : std::string());
  std::fflush(stdout);
}

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

void print_hook_summary(const HookSummary& h) {
  std::string ranges;
  for (const auto& [range, us] : h.by_range) {
    ranges += fmt::format("{}{} {:.1f}", ranges.empty() ? "" : ", ", range, us);
  }
  fmt::print("  FSDP hooks      {:.1f} us per unit per forward-backward (median step, slowest "
             "rank)\n",
             h.us_per_unit);
  fmt::print("                  {} units{}{}\n", h.units,
             h.micro_batches > 1 ? fmt::format(" x {} micro-batches", h.micro_batches) : "",
             h.includes_waits ? "; on the CPU this includes waiting for collectives" : "");
  fmt::print("                  rank 0 by hook: {}\n", ranges);
}

}  // namespace

std::optional<HookSummary> summarize_hook_times(const std::vector<StepRecord>& records,
                                                int64_t units, int64_t micro_batches,
                                                bool includes_waits) {
  std::vector<double> slowest;
  std::vector<std::pair<std::string, std::vector<double>>> ranges;
  for (const StepRecord& r : records) {
    if (r.hook_us.empty()) continue;
    slowest.push_back(static_cast<double>(*std::max_element(r.hook_us.begin(), r.hook_us.end())));
    for (const auto& [range, us] : r.hook_us_by_range) {
      // Named, not captured: C++17 lambdas cannot capture a structured binding.
      const std::string& name = range;
      auto it = std::find_if(ranges.begin(), ranges.end(),
                             [&](const auto& known) { return known.first == name; });
      if (it == ranges.end()) it = ranges.insert(ranges.end(), {range, {}});
      it->second.push_back(us);
    }
  }
  if (slowest.empty() || units * micro_batches <= 0) return std::nullopt;
  HookSummary h;
  h.units = units;
  h.micro_batches = micro_batches;
  h.includes_waits = includes_waits;
  const auto per_unit = static_cast<double>(units * micro_batches);
  h.us_per_unit = median(slowest) / per_unit;
  // A hook absent from a step (post_backward on one rank) counts as zero there.
  for (auto& [range, values] : ranges) {
    values.resize(slowest.size(), 0.0);
    h.by_range.emplace_back(range, median(values) / per_unit);
  }
  return h;
}

void print_summary(const RunSummary& s) {
  fmt::print("\nSummary\n");
  const int64_t steps_run = s.last_step - s.start_step;
  fmt::print("  steps           {}/{}{}{}\n", s.last_step, s.total_steps,
             s.start_step > 0 ? fmt::format(" (resumed at {})", s.start_step) : std::string(),
             s.stopped_by_time_budget ? " (stopped by --time-budget)" : "");
  if (s.restarts) fmt::print("  restarts        {}\n", s.restarts->summary());
  fmt::print("  time            {} ({:.0f} ms/step)\n", human_duration(s.train_seconds),
             steps_run > 0 ? 1000.0 * s.train_seconds / static_cast<double>(steps_run) : 0.0);
  fmt::print("  loss            {:.4f} -> {:.4f} nats/byte (train){}\n", s.first_loss,
             s.final_loss,
             s.final_val_loss ? fmt::format(", {:.4f} validation", *s.final_val_loss)
                              : std::string());
  fmt::print("  throughput      {} tokens/s (all ranks)\n", human_count(s.mean_tokens_per_s));
  if (s.hooks) print_hook_summary(*s.hooks);
  fmt::print("\n  {:>4}  {:>14}  {:>14}  {:>15}  {:>13}  {:>12}  {:>13}\n", "rank",
             "sharded params", "sharded grads", "optimizer state", "peak gathered",
             "peak tensors", "peak resident");
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const RankMemory& m = s.ranks[r];
    fmt::print("  {:>4}  {:>14}  {:>14}  {:>15}  {:>13}  {:>12}  {:>13}\n", r,
               human_bytes(m.sharded_params), human_bytes(m.sharded_grads),
               human_bytes(m.optimizer_state), human_bytes(m.peak_gathered),
               human_bytes(m.peak_tensors), human_bytes(m.peak_resident));
  }
  fmt::print("  (the whole model unsharded: {} of parameters)\n",
             human_bytes(s.unsharded_param_bytes));
  if (s.on_cuda) {
    // The caching allocator's peaks over the run (torch.cuda.max_memory_*).
    fmt::print("\n  {:>4}  {:>20}  {:>19}\n", "rank", "peak CUDA allocated", "peak CUDA reserved");
    for (size_t r = 0; r < s.ranks.size(); ++r) {
      fmt::print("  {:>4}  {:>20}  {:>19}\n", r, human_bytes(s.ranks[r].peak_device_allocated),
                 human_bytes(s.ranks[r].peak_device_reserved));
    }
  }
  fmt::print("\n");
  fmt::print("Outputs\n");
  fmt::print("  run dir     {}\n", s.run_dir);
  fmt::print("  metrics     {}\n", s.metrics);
  if (!s.plot.empty()) {
    fmt::print("  plot        {}\n", s.plot);
  } else {
    fmt::print("  plot        none: {}\n", s.plot_error);
  }
  fmt::print("  checkpoint  {}\n", s.checkpoint);
  if (!s.sample_file.empty()) fmt::print("  sample      {}\n", s.sample_file);
  std::fflush(stdout);
}

}  // namespace fsdp_train
