// Command-line options of fsdp-train and the checks on them. See
// train_options.h; docs/trainer.md documents the same options for readers.

#include "train_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <functional>

#include "cli_help_format.h"

namespace fsdp_train {
namespace {

constexpr int kBadUsage = 2;

constexpr const char* kDescription =
    "fsdp-train: train a byte-level GPT with FSDP (ZeRO-3) on any number of ranks.\n"
    "Run it alone (one rank) or under a launcher: fsdp-run, torchrun, mpirun, srun.\n"
    "Every step draws a global batch of random windows from the corpus, seeded by\n"
    "(--seed, step), and each rank trains on its own slice of it, so a run is\n"
    "reproducible at any world size and a resumed run sees the same batches.";

constexpr const char* kFooter = R"(OUTPUT (rank 0)
  A progress line (step, loss, tokens/s, ETA, per-rank shard and peak gathered
  bytes), then a summary table and a generated text sample. In the run dir:
  metrics.jsonl (one JSON object per step), plot.png (loss and tokens/s),
  config.json, checkpoint/ (the final state; --save-every adds
  checkpoints/step-NNNNNNNN/).

EXAMPLES
  fsdp-train --steps 200                                  # one rank
  fsdp-run --standalone --nproc-per-node 2 -- fsdp-train  # the demo
  fsdp-train --resume runs/20240101-120000 --steps 1000   # continue a run
)";

// Registers an option and remembers it, so we can tell which were given.
class OptionRecorder {
 public:
  explicit OptionRecorder(std::vector<CLI::Option*>& all) : all_(all) {}
  CLI::Option* operator()(CLI::Option* option) {
    all_.push_back(option);
    return option;
  }

 private:
  std::vector<CLI::Option*>& all_;
};

std::string long_name(const CLI::Option* option) {
  std::string name = option->get_name(false, true);
  const size_t comma = name.find(',');
  if (comma != std::string::npos) name = name.substr(0, comma);
  while (!name.empty() && name[0] == '-') name.erase(0, 1);
  return name;
}

}  // namespace

ParseResult parse_train_options(int argc, char** argv) {
  TrainOptions o;
  CLI::App app(kDescription, "fsdp-train");
  app.footer(kFooter);
  auto formatter = std::make_shared<fsdp::tools::HelpFormatter>();
  formatter->column_width(34);
  app.formatter(formatter);
  std::vector<CLI::Option*> all;
  OptionRecorder rec(all);

  auto* model = app.add_option_group("Model", "a GPT over bytes; each block is an FSDP unit");
  rec(model->add_option("--layers", o.layers, "transformer blocks")->capture_default_str());
  rec(model->add_option("--width", o.width, "model width (d_model)")->capture_default_str());
  rec(model->add_option("--heads", o.heads, "attention heads; must divide --width")
          ->capture_default_str());
  rec(model->add_option("--context", o.context, "bytes per training window")
          ->capture_default_str());

  auto* data = app.add_option_group("Data and batch");
  rec(data->add_option("--data", o.data,
                       "text file to train on (default: every plain-text file of "
                       "/usr/share/games/fortunes); 90% train, last 10% validation"));
  rec(data->add_option("--batch", o.batch,
                       "global batch: sequences per optimizer step over all ranks; a "
                       "multiple of the world size")
          ->capture_default_str());
  rec(data->add_option("--micro-batch", o.micro_batch,
                       "sequences per rank per forward/backward (default: batch / world size "
                       "/ grad-accum)"));
  rec(data->add_option("--grad-accum", o.grad_accum,
                       "micro-batches accumulated per step, without gradient sync but the "
                       "last (default: 1, or batch / world size / micro-batch)"));

  auto* optim = app.add_option_group("Optimization", "AdamW (betas 0.9, 0.95), warmup, cosine decay");
  rec(optim->add_option("--lr", o.lr, "peak learning rate")->capture_default_str());
  rec(optim->add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine decay")
          ->capture_default_str());
  rec(optim->add_option("--warmup", o.warmup,
                        "steps of linear warmup to --lr (default: 50, or --steps/10 if smaller)"));
  rec(optim->add_option("--weight-decay", o.weight_decay,
                        "AdamW weight decay (matrices only; not biases, norms)")
          ->capture_default_str());
  rec(optim->add_option("--clip", o.clip, "max global gradient norm; 0 disables clipping")
          ->capture_default_str());
  rec(optim->add_option("--steps", o.steps, "optimizer steps; the schedule spans them")
          ->capture_default_str());
  rec(optim->add_option("--time-budget", o.time_budget,
                        "stop after this many seconds of training, even before --steps "
                        "(0: no limit)")
          ->capture_default_str());
  rec(optim->add_option("--seed", o.seed, "seed of the initial weights and of every batch")
          ->capture_default_str());

  auto* fsdp = app.add_option_group("FSDP");
  rec(fsdp->add_option("--strategy", o.strategy,
                       "full (ZeRO-3) | grad-op (ZeRO-2) | none (DDP-like)")
          ->capture_default_str());
  rec(fsdp->add_option("--mixed-precision", o.mixed_precision,
                       "fp32 | bf16 (bf16 compute and all-gather, fp32 gradient reduction and "
                       "master weights)")
          ->capture_default_str());
  rec(fsdp->add_flag("--offload", o.offload,
                     "keep sharded parameters and gradients in host memory (default: off)"));
  rec(fsdp->add_flag("--no-prefetch", o.no_prefetch,
                     "do not all-gather the next unit ahead of use (default: prefetch on)"));

  auto* eval = app.add_option_group("Evaluation and sampling");
  rec(eval->add_option("--eval-every", o.eval_every,
                       "validation loss every K steps (0: only at the end)")
          ->capture_default_str());
  rec(eval->add_option("--eval-batches", o.eval_batches,
                       "global batches of held-out bytes per validation")
          ->capture_default_str());
  rec(eval->add_option("--sample-bytes", o.sample_bytes,
                       "bytes of text to generate after training (0: none)")
          ->capture_default_str());
  rec(eval->add_option("--temperature", o.temperature, "sampling temperature; 0 is greedy")
          ->capture_default_str());
  rec(eval->add_option("--prompt", o.prompt, "text the sample starts from")
          ->capture_default_str());

  auto* out = app.add_option_group("Output and checkpoints");
  rec(out->add_option("--run-dir", o.run_dir,
                      "where metrics, plot and checkpoints go (default: runs/<timestamp>)"));
  rec(out->add_option("--save-every", o.save_every,
                      "also checkpoint every K steps to <run-dir>/checkpoints/step-NNNNNNNN "
                      "(0: only the final <run-dir>/checkpoint)")
          ->capture_default_str());
  rec(out->add_option("--resume", o.resume,
                      "continue from a checkpoint dir (or a run dir holding checkpoint/); "
                      "model shape, seed and batch default to the checkpoint's"));
  rec(out->add_option("--log-every", o.log_every,
                      "progress line every K steps when stdout is not a terminal (0: about "
                      "25 lines per run)")
          ->capture_default_str());
  rec(out->add_flag("--quiet", o.quiet, "no progress lines and no printed sample (sample.txt is still written); the header and summary only"));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return {std::nullopt, app.exit(e)};
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    std::fprintf(stderr, "fsdp-train: run with --help for every option and its default\n");
    return {std::nullopt, kBadUsage};
  }
  for (const CLI::Option* option : all) {
    if (option->count() > 0) o.given.insert(long_name(option));
  }
  // A short run still gets to its peak learning rate.
  if (!o.was_given("warmup") && o.steps > 0) o.warmup = std::min<int64_t>(o.warmup, std::max<int64_t>(1, o.steps / 10));
  return {std::move(o), 0};
}

std::vector<std::string> check_options(const TrainOptions& o, int world_size, BatchLayout* layout) {
  std::vector<std::string> errors;
  auto positive = [&](const char* name, int64_t value, const char* example) {
    if (value <= 0) {
      errors.push_back(fmt::format("--{} is {}; it must be a positive integer (e.g. --{} {})",
                                   name, value, name, example));
    }
  };
  auto non_negative = [&](const char* name, double value, const char* meaning) {
    if (!(value >= 0) || !std::isfinite(value)) {
      errors.push_back(fmt::format("--{} is {}; it must be >= 0 ({})", name, value, meaning));
    }
  };
  positive("layers", o.layers, "4");
  positive("width", o.width, "128");
  positive("heads", o.heads, "4");
  positive("context", o.context, "128");
  positive("batch", o.batch, "32");
  positive("steps", o.steps, "500");
  positive("eval-batches", o.eval_batches, "4");
  if (o.width > 0 && o.heads > 0 && o.width % o.heads != 0) {
    // Suggest the head counts that divide the width closest to the asked one.
    std::vector<int64_t> divisors;
    for (int64_t h = 1; h <= o.width; ++h) {
      if (o.width % h == 0) divisors.push_back(h);
    }
    std::stable_sort(divisors.begin(), divisors.end(), [&o](int64_t a, int64_t b) {
      return std::llabs(a - o.heads) < std::llabs(b - o.heads);
    });
    divisors.resize(std::min<size_t>(divisors.size(), 4));
    std::sort(divisors.begin(), divisors.end());
    errors.push_back(fmt::format(
        "--heads {} does not divide --width {}: each head needs width/heads channels; pick "
        "--heads from {{{}}} or a --width that is a multiple of {}",
        o.heads, o.width, fmt::join(divisors, ", "), o.heads));
  }
  if (!(o.lr > 0) || !std::isfinite(o.lr)) {
    errors.push_back(fmt::format("--lr is {}; it must be > 0 (e.g. --lr 3e-3)", o.lr));
  }
  non_negative("min-lr", o.min_lr, "the learning rate the cosine decays to");
  if (o.lr > 0 && o.min_lr > o.lr) {
    errors.push_back(fmt::format("--min-lr {} is above --lr {}; the cosine decays from --lr down "
                                 "to --min-lr, so pass a smaller --min-lr",
                                 o.min_lr, o.lr));
  }
  if (o.warmup < 0) errors.push_back(fmt::format("--warmup is {}; it must be >= 0 steps", o.warmup));
  non_negative("weight-decay", o.weight_decay, "0 turns it off");
  non_negative("clip", o.clip, "0 turns clipping off");
  non_negative("time-budget", o.time_budget, "seconds; 0 means no limit");
  non_negative("temperature", o.temperature, "0 samples greedily");
  if (o.save_every < 0) {
    errors.push_back(fmt::format("--save-every is {}; it must be >= 0 (0: final checkpoint only)",
                                 o.save_every));
  }
  if (o.eval_every < 0) {
    errors.push_back(fmt::format("--eval-every is {}; it must be >= 0 (0: at the end only)",
                                 o.eval_every));
  }
  if (o.sample_bytes < 0) {
    errors.push_back(fmt::format("--sample-bytes is {}; it must be >= 0 (0: no sample)",
                                 o.sample_bytes));
  }
  if (o.log_every < 0) {
    errors.push_back(fmt::format("--log-every is {}; it must be >= 0 (0: automatic)", o.log_every));
  }
  if (o.sample_bytes > 0 && o.prompt.empty()) {
    errors.push_back("--prompt is empty; generation needs at least one byte to start from (e.g. "
                     "--prompt 'The ')");
  }
  if (o.strategy != "full" && o.strategy != "grad-op" && o.strategy != "none") {
    errors.push_back(fmt::format("--strategy '{}' is not one of: full (ZeRO-3), grad-op (ZeRO-2), "
                                 "none (replicated, like DDP)",
                                 o.strategy));
  }
  if (o.mixed_precision != "fp32" && o.mixed_precision != "bf16") {
    errors.push_back(fmt::format("--mixed-precision '{}' is not one of: fp32, bf16",
                                 o.mixed_precision));
  }

  // The batch split. A rank with no sequences would have nothing to train.
  if (o.batch > 0 && world_size > 0) {
    BatchLayout split;
    split.world_size = world_size;
    bool ok = true;
    if (world_size > o.batch) {
      errors.push_back(fmt::format(
          "world size {} is larger than the global batch {}: every rank needs at least one "
          "sequence per step; pass --batch {} (or more) or run at most {} ranks",
          world_size, o.batch, world_size, o.batch));
      ok = false;
    } else if (o.batch % world_size != 0) {
      const int64_t up = (o.batch / world_size + 1) * world_size;
      errors.push_back(fmt::format(
          "--batch {} is not divisible by the world size {}: each rank takes an equal slice of "
          "the global batch; pass --batch {} or --batch {}",
          o.batch, world_size, up, up - world_size));
      ok = false;
    }
    if (ok) {
      split.per_rank = o.batch / world_size;
      if (o.micro_batch < 0 || o.grad_accum < 0) {
        errors.push_back(fmt::format("--micro-batch {} / --grad-accum {}: both must be positive "
                                     "(or left out)",
                                     o.micro_batch, o.grad_accum));
        ok = false;
      } else if (o.micro_batch > 0) {
        if (split.per_rank % o.micro_batch != 0) {
          errors.push_back(fmt::format(
              "--micro-batch {} does not divide the per-rank batch {} (--batch {} over {} "
              "ranks); pass a --micro-batch that divides {}",
              o.micro_batch, split.per_rank, o.batch, world_size, split.per_rank));
          ok = false;
        } else {
          split.micro_batch = o.micro_batch;
          split.grad_accum = split.per_rank / o.micro_batch;
          if (o.grad_accum > 0 && o.grad_accum != split.grad_accum) {
            errors.push_back(fmt::format(
                "--grad-accum {} disagrees with --micro-batch {}: --batch {} over {} ranks is {} "
                "sequences per rank, i.e. {} micro-batches; pass only one of the two",
                o.grad_accum, o.micro_batch, o.batch, world_size, split.per_rank,
                split.grad_accum));
            ok = false;
          }
        }
      } else {
        split.grad_accum = o.grad_accum > 0 ? o.grad_accum : 1;
        if (split.per_rank % split.grad_accum != 0) {
          errors.push_back(fmt::format(
              "--grad-accum {} does not divide the per-rank batch {} (--batch {} over {} ranks); "
              "pass a --grad-accum that divides {}",
              split.grad_accum, split.per_rank, o.batch, world_size, split.per_rank));
          ok = false;
        } else {
          split.micro_batch = split.per_rank / split.grad_accum;
        }
      }
    }
    if (ok && layout != nullptr) *layout = split;
  }
  return errors;
}

fsdp::ShardingStrategy sharding_strategy(const TrainOptions& o) {
  if (o.strategy == "grad-op") return fsdp::ShardingStrategy::kShardGradOp;
  if (o.strategy == "none") return fsdp::ShardingStrategy::kNoShard;
  return fsdp::ShardingStrategy::kFullShard;
}

fsdp::MixedPrecisionPolicy mixed_precision_policy(const TrainOptions& o) {
  fsdp::MixedPrecisionPolicy policy;
  if (o.mixed_precision == "bf16") policy.param_dtype(at::kBFloat16).reduce_dtype(at::kFloat);
  return policy;
}

}  // namespace fsdp_train
