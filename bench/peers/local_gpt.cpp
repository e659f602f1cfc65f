// local-gpt: fsdp-train's GPT trained in one process without FSDP, the limit
// that libfsdp's step is measured against at world size 1
// (bench/peers/head_to_head.py). The same model, initial weights, batches,
// AdamW (fsdp::FusedAdamW), schedule and clipping as fsdp-train, taken from
// fsdp-train's own parts ([Note: a tool's tested parts] in
// tools/CMakeLists.txt); what FSDP adds (hooks, flat parameters, gathers and
// reductions) is absent.
//
// [Note: mixed precision without FSDP]
// --mixed-precision bf16 trains as fsdp-train's policy (bfloat16 compute,
// float32 gradients and updates) does at world size 1: the optimizer updates
// float32 master weights, copied (cast) into the model's bfloat16 parameters
// before each forward; after backward the bfloat16 gradients are copied
// (cast) into the masters' float32 gradients. So the numerics are
// fsdp-train's, and the casts any such training needs stay in the baseline.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "corpus.h"
#include "fsdp/clip_grad.h"
#include "fsdp/cpu_heap.h"
#include "fsdp/models/gpt.h"
#include "gpt_setup.h"
#include "lr_schedule.h"
#include "model_presets.h"
#include "peak_memory.h"
#include "train_options.h"
#include "training_device.h"

namespace {

using fsdp_train::TrainOptions;

constexpr int kBadUsage = 2;

struct LocalOptions {
  TrainOptions train;
  std::string metrics;  // JSON lines, one per step; "" for none
};

void add_options(CLI::App& app, LocalOptions& l) {
  TrainOptions& o = l.train;
  app.add_option("--data", o.data, "text file (default: the fortunes, as fsdp-train)");
  app.add_option("--preset", o.preset,
                 "a named size (fsdp-train --help lists them); size flags win");
  app.add_option("--layers", o.layers, "transformer blocks")->capture_default_str();
  app.add_option("--width", o.width, "model width (d_model)")->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads; must divide --width")->capture_default_str();
  app.add_option("--context", o.context, "bytes per window")->capture_default_str();
  app.add_option("--batch", o.batch, "sequences per step")->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps; the schedule spans them")
      ->capture_default_str();
  app.add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "where the cosine decay ends")->capture_default_str();
  app.add_option("--warmup", o.warmup, "warmup steps (default: 50, or --steps/10 if smaller)");
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--clip", o.clip, "max global gradient norm; 0 turns clipping off")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "weights and batches")->capture_default_str();
  app.add_option("--mixed-precision", o.mixed_precision,
                 "fp32, or bf16: bfloat16 compute over float32 master weights, as fsdp-train")
      ->capture_default_str();
  app.add_option("--activation-checkpointing", o.activation_checkpointing,
                 "none, all or every-N, as fsdp-train")
      ->capture_default_str();
  app.add_option("--device", o.device, "cpu or cuda (GPU 0)")->capture_default_str();
  app.add_option("--metrics", l.metrics,
                 "write one JSON object per step here, with fsdp-train's metrics.jsonl names");
}

// The options, checked as fsdp-train checks its own at world size 1; or the
// exit code when there is nothing to train (help, bad input).
std::optional<LocalOptions> parse(int argc, char** argv, int& exit_code) {
  LocalOptions l;
  CLI::App app(
      "local-gpt: fsdp-train's GPT, weights, batches and optimizer in one process without "
      "FSDP,\nthe baseline of bench/peers/head_to_head.py at world size 1.",
      "local-gpt");
  add_options(app, l);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    exit_code = app.exit(e);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "local-gpt: error: %s\n", e.what());  // as fsdp-train says it
    std::fprintf(stderr, "local-gpt: run with --help for every option and its default\n");
    exit_code = kBadUsage;
    return std::nullopt;
  }
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() > 0) l.train.given.insert(option->get_lnames().front());
  }
  fsdp_train::complete_options(l.train);
  fsdp_train::BatchLayout layout;
  std::vector<std::string> errors = fsdp_train::check_options(l.train, 1, &layout);
  if (const std::string device = fsdp_train::check_device(l.train, 1); !device.empty()) {
    errors.push_back(device);
  }
  for (const std::string& error : errors) std::fprintf(stderr, "local-gpt: %s\n", error.c_str());
  if (!errors.empty()) {
    exit_code = kBadUsage;
    return std::nullopt;
  }
  return l;
}

at::Tensor to_device(const at::Tensor& host, const c10::Device& device) {
  if (!device.is_cuda()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

class LocalTrainer {
 public:
  explicit LocalTrainer(const LocalOptions& l)
      : o_(l.train),
        bf16_(o_.mixed_precision == "bf16"),
        device_(fsdp_train::select_training_device(o_, 0)),
        corpus_(fsdp_train::load_corpus(o_.data, o_.context)),
        sampler_(corpus_, o_.context, o_.seed),
        schedule_{o_.lr, o_.min_lr, o_.warmup, o_.steps} {
    if (!l.metrics.empty()) {
      metrics_.open(l.metrics);
      if (!metrics_) throw std::runtime_error("local-gpt: cannot write --metrics " + l.metrics);
    }
    build();
  }

  void run();

 private:
  void build();
  at::Tensor train_step(int64_t step);  // the loss, on the device
  void write_metrics(int64_t step, double loss, double seconds);

  const TrainOptions& o_;
  const bool bf16_;  // [Note: mixed precision without FSDP]
  const c10::Device device_;
  fsdp_train::ByteCorpus corpus_;
  fsdp_train::BatchSampler sampler_;
  fsdp_train::LrSchedule schedule_;
  fsdp::models::GPT model_{nullptr};
  std::vector<at::Tensor> params_;   // the model's, in named_parameters() order
  std::vector<at::Tensor> masters_;  // float32 masters under bf16; else params_
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::ofstream metrics_;
};

// As fsdp-train's build_model: the whole model from the seed on the CPU,
// then moved; see [Note: mixed precision without FSDP] for bf16.
void LocalTrainer::build() {
  at::manual_seed(o_.seed);
  fsdp::models::GPTConfig config = fsdp_train::model_config(o_);
  config.shard_blocks = false;
  model_ = fsdp::models::GPT(config);
  model_->to(device_);
  model_->train();
  const auto named = model_->named_parameters();
  torch::OrderedDict<std::string, at::Tensor> masters;
  at::NoGradGuard no_grad;
  for (const auto& item : named) {
    at::Tensor param = item.value();
    params_.push_back(param);
    if (bf16_) {
      masters.insert(item.key(), param.detach().clone());
      param.set_data(param.to(at::kBFloat16));
    }
  }
  masters_ = bf16_ ? masters.values() : params_;
  optimizer_ = fsdp_train::make_optimizer(bf16_ ? masters : named, o_);
}

at::Tensor LocalTrainer::train_step(int64_t step) {
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(schedule_.at(step));
  }
  fsdp_train::zero_gradients(*model_);
  if (bf16_) {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(masters_[i]);
  }
  const fsdp_train::Batch batch = sampler_.rows(fsdp_train::Split::kTrain, step, 0, o_.batch);
  const at::Tensor inputs = to_device(batch.inputs, device_);
  const at::Tensor targets = to_device(batch.targets, device_);
  at::Tensor loss = fsdp::models::lm_loss(model_->forward(inputs).to(at::kFloat), targets);
  loss.backward();
  if (bf16_) {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!masters_[i].grad().defined()) masters_[i].mutable_grad() = at::empty_like(masters_[i]);
      masters_[i].mutable_grad().copy_(params_[i].grad());
    }
  }
  fsdp::clip_grad_norm_tensor_(masters_,
                               o_.clip > 0 ? o_.clip : std::numeric_limits<double>::infinity());
  optimizer_->step();
  return loss.detach();
}

void LocalTrainer::run() {
  using Clock = std::chrono::steady_clock;
  for (int64_t step = 1; step <= o_.steps; ++step) {
    fsdp_train::reset_device_peak_memory(device_);
    const auto start = Clock::now();
    const double loss = train_step(step).item<double>();  // the step's one read-back
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    write_metrics(step, loss, seconds);
    fmt::print("step {}/{}  loss {:.4f}  {:.1f} ms\n", step, o_.steps, loss, 1e3 * seconds);
    std::fflush(stdout);
  }
}

// fsdp-train's metrics.jsonl names; per-rank figures as lists of one.
void LocalTrainer::write_metrics(int64_t step, double loss, double seconds) {
  if (!metrics_.is_open()) return;
  const double tokens = static_cast<double>(o_.batch * o_.context);
  std::string line =
      fmt::format(R"({{"step": {}, "loss": {:.17g}, "ms": {:.6f}, "tokens_per_s": {:.3f}, )"
                  R"("peak_resident_bytes": [{}])",
                  step, loss, 1e3 * seconds, tokens / seconds, fsdp_train::peak_resident_bytes());
  if (device_.is_cuda()) {
    const fsdp_train::DevicePeakMemory peak = fsdp_train::device_peak_memory(device_);
    line +=
        fmt::format(R"(, "peak_device_allocated_bytes": [{}], "peak_device_reserved_bytes": [{}])",
                    peak.allocated, peak.reserved);
  }
  metrics_ << line << "}\n" << std::flush;
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  const std::optional<LocalOptions> options = parse(argc, argv, exit_code);
  if (!options) return exit_code;
  // The process settings of fsdp-train alone: its threads, and freed CPU
  // memory kept for reuse ([Note: freed CPU memory kept for reuse]).
  at::set_num_threads(fsdp_train::threads_per_rank(1));
  fsdp::keep_freed_cpu_memory();
  try {
    LocalTrainer trainer(*options);
    const TrainOptions& o = options->train;
    fmt::print("local-gpt: GPT {}x{}, {:.2f} M parameters, on {}, {}, no FSDP\n", o.layers, o.width,
               static_cast<double>(fsdp_train::model_config(o).num_params()) / 1e6, o.device,
               o.mixed_precision);
    trainer.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "local-gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
