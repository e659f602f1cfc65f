// Command-line options of fsdp-train, parsed; option_checks.cpp checks them. See
// train_options.h; docs/trainer.md documents the same options for readers.

#include "train_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "cli_help_format.h"
#include "cli_integer_check.h"
#include "model_presets.h"
#include "training_device.h"

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

EXIT STATUS
  0 done; 1 a failure while training; 2 bad input. Every rank checks its
  inputs before training and the ranks share the verdicts, so a problem
  found on one node (its --data file, its GPUs) stops every rank with 2,
  the others naming that rank, its host and the problem.

EXAMPLES
  fsdp-train --steps 200                                  # one rank
  fsdp-run --standalone --nproc-per-node 2 -- fsdp-train  # the demo
  fsdp-train --resume runs/20240101-120000 --steps 1000   # continue a run
  fsdp-run --standalone --nproc-per-node 2 --max-restarts 3 -- fsdp-train \
      --resume auto --run-dir runs/long --save-every 50   # survive failures
  fsdp-run --standalone --nproc-per-node 8 -- fsdp-train --device cuda \
      --preset gpt2-small-bytes --mixed-precision bf16     # 8 GPUs, one rank each
)";

// Registers an option and remembers it, so we can tell which were given.
// Integer options also refuse values that do not fit in 64 bits.
class OptionRecorder {
 public:
  explicit OptionRecorder(std::vector<CLI::Option*>& all) : all_(all) {}
  CLI::Option* operator()(CLI::Option* option) {
    all_.push_back(option);
    return fsdp::tools::check_integer_range(option);
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

void add_model_options(CLI::App& app, TrainOptions& o, OptionRecorder& rec) {
  auto* model = app.add_option_group("Model", "a GPT over bytes; each block is an FSDP unit");
  rec(model->add_option("--layers", o.layers, "transformer blocks")->capture_default_str());
  rec(model->add_option("--width", o.width, "model width (d_model)")->capture_default_str());
  rec(model->add_option("--heads", o.heads, "attention heads; must divide --width")
          ->capture_default_str());
  rec(model->add_option("--context", o.context, "bytes per training window")
          ->capture_default_str());
  rec(model->add_option("--preset", o.preset,
                        "a named size (see PRESETS below); --layers, --width, --heads or "
                        "--context given as well win over it"));
}

void add_data_options(CLI::App& app, TrainOptions& o, OptionRecorder& rec) {
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
}

void add_optimizer_options(CLI::App& app, TrainOptions& o, OptionRecorder& rec) {
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
}

void add_fsdp_options(CLI::App& app, TrainOptions& o, OptionRecorder& rec) {
  auto* fsdp = app.add_option_group("FSDP");
  rec(fsdp->add_option("--device", o.device,
                       "cpu | cuda: cuda puts each rank on the GPU its LOCAL_RANK names and "
                       "communicates with NCCL (a CUDA build of LibTorch; one rank per GPU)")
          ->capture_default_str());
  rec(fsdp->add_option("--backend", o.backend,
                       "gloo | nccl; default: gloo on the CPU, nccl with --device cuda. With "
                       "--device cuda, gloo moves the GPU tensors through host memory, so "
                       "several ranks may share one GPU: slow, for running and debugging a "
                       "multi-rank GPU job on one GPU"));
  rec(fsdp->add_option("--strategy", o.strategy,
                       "full (ZeRO-3) | grad-op (ZeRO-2) | none (DDP-like) | hybrid (full within "
                       "each node of LOCAL_WORLD_SIZE ranks, replicated across nodes)")
          ->capture_default_str());
  rec(fsdp->add_option("--mixed-precision", o.mixed_precision,
                       "fp32 | bf16 (bf16 compute and all-gather, fp32 gradient reduction and "
                       "master weights)")
          ->capture_default_str());
  rec(fsdp->add_flag("--offload", o.offload,
                     "keep sharded parameters and gradients in host memory (default: off)"));
  rec(fsdp->add_flag("--no-prefetch", o.no_prefetch,
                     "do not all-gather the next unit ahead of use (default: prefetch on)"));
  rec(fsdp->add_flag("--deferred-init", o.deferred_init,
                     "build the model without parameter storage and let fully_shard initialize "
                     "it one module at a time: no rank ever holds the whole model; the same "
                     "initial weights (default: every rank builds the whole model first)"));
  rec(fsdp->add_option("--activation-checkpointing", o.activation_checkpointing,
                       "none | all | every-N: blocks whose activations are recomputed in backward "
                       "instead of kept (every-2: blocks 0, 2, 4, ...); saves memory for about "
                       "one extra forward")
          ->capture_default_str());
  rec(fsdp->add_option("--compress-weights", o.compress_weights,
                       "none | bf16 | int8: how parameters travel in their all-gathers (int8: "
                       "one byte a value plus an fp32 scale per block, 0.254 of fp32's bytes); "
                       "master weights stay exact")
          ->capture_default_str());
  rec(fsdp->add_option("--compress-grads", o.compress_grads,
                       "none | bf16 | int8: how gradients travel in their reduce-scatter (or "
                       "all-reduce, with --strategy none); summed in fp32")
          ->capture_default_str());
  rec(fsdp->add_option("--compress-scope", o.compress_scope,
                       "all | inter-node: with --strategy hybrid, inter-node compresses only the "
                       "gradient all-reduce across nodes and leaves traffic within a node exact")
          ->capture_default_str());
  rec(fsdp->add_option("--compress-block-size", o.compress_block_size,
                       "int8: values per scale; smaller follows magnitudes more closely")
          ->capture_default_str());
  rec(fsdp->add_option("--timeout", o.timeout,
                       "seconds rendezvous or a collective may wait for a peer before failing "
                       "naming it (default 0: FSDP_COMM_TIMEOUT if set, else 300)"));
}

void add_eval_options(CLI::App& app, TrainOptions& o, OptionRecorder& rec) {
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
}

void add_output_options(CLI::App& app, TrainOptions& o, OptionRecorder& rec) {
  auto* out = app.add_option_group("Output and checkpoints");
  rec(out->add_option("--run-dir", o.run_dir,
                      "where metrics, plot and checkpoints go (default: runs/<timestamp>)"));
  rec(out->add_option("--save-every", o.save_every,
                      "also checkpoint every K steps to <run-dir>/checkpoints/step-NNNNNNNN "
                      "(0: only the final <run-dir>/checkpoint)")
          ->capture_default_str());
  rec(out->add_option("--keep-last", o.keep_last,
                      "keep only the newest K step checkpoints (0: keep all); the final "
                      "checkpoint/ is always kept")
          ->capture_default_str());
  rec(out->add_flag("--async-save", o.async_save,
                    "write the --save-every checkpoints in the background: training stops "
                    "only to copy its shards to host memory (one more copy of them and of "
                    "the AdamW state per rank, taken before the first step and kept to the "
                    "end), "
                    "and a save still being written when the next is due is waited for; "
                    "the final checkpoint is written before the run ends"));
  rec(out->add_option("--resume", o.resume,
                      "continue from a checkpoint dir, or from a run dir's newest checkpoint "
                      "that verifies (checkpoint/ or checkpoints/step-*); model shape, seed "
                      "and batch default to the checkpoint's. 'auto': the newest checkpoint "
                      "of --run-dir that verifies, or a fresh start when it has none (for "
                      "fsdp-run --max-restarts)"));
  rec(out->add_option("--log-every", o.log_every,
                      "progress line every K steps when stdout is not a terminal (0: about "
                      "25 lines per run)")
          ->capture_default_str());
  rec(out->add_flag("--hook-times", o.hook_times,
                    "time the framework itself: the wall time inside FSDP's hooks each step, "
                    "per rank and by hook, in metrics.jsonl (hook_us, hook_us_by_range) and "
                    "the summary; costs a few microseconds per unit per step"));
  rec(out->add_flag("--phase-times", o.phase_times,
                    "where the step's time goes: forward, backward, clipping, the optimizer "
                    "and the loss all-reduce, each timed to the end of its device work (the "
                    "device is synchronized after each, which slows the step a little); "
                    "medians printed in the summary"));
  rec(out->add_flag("--quiet", o.quiet, "no progress lines and no printed sample (sample.txt is still written); the header and summary only"));
}

}  // namespace

ParseResult parse_train_options(int argc, char** argv) {
  TrainOptions o;
  CLI::App app(kDescription, "fsdp-train");
  app.footer("PRESETS (--preset)\n" + describe_model_presets() + "\n" + kFooter);
  auto formatter = std::make_shared<fsdp::tools::HelpFormatter>();
  formatter->column_width(34);
  app.formatter(formatter);
  std::vector<CLI::Option*> all;
  OptionRecorder rec(all);
  add_model_options(app, o, rec);
  add_data_options(app, o, rec);
  add_optimizer_options(app, o, rec);
  add_fsdp_options(app, o, rec);
  add_eval_options(app, o, rec);
  add_output_options(app, o, rec);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return {std::nullopt, app.exit(e)};
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "fsdp-train: error: %s\n", e.what());  // as the option checks print
    std::fprintf(stderr, "fsdp-train: run with --help for every option and its default\n");
    return {std::nullopt, kBadUsage};
  }
  for (const CLI::Option* option : all) {
    if (option->count() > 0) o.given.insert(long_name(option));
  }
  complete_options(o);
  return {std::move(o), 0};
}

void complete_options(TrainOptions& o) {
  apply_model_preset(o);
  // A short run still gets to its peak learning rate.
  if (!o.was_given("warmup") && o.steps > 0) {
    o.warmup = std::min<int64_t>(o.warmup, std::max<int64_t>(1, o.steps / 10));
  }
}

}  // namespace fsdp_train
