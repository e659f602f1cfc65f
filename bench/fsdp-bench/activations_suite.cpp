// fsdp-bench activations: what activation checkpointing saves and costs, on
// the GPT with 8 blocks under FSDP at world size 1, with no block, every
// other block and every block checkpointed.
//
// Memory is the peak of CPU tensor bytes over one training step above the
// level before it, counted at the allocator (fsdp::CpuAllocationCounter), so
// it is the same on every run and every machine load. Step time is the
// median over rounds that interleave the three settings step by step, so
// load from other processes hits each alike. Both print their ratio to the
// run without checkpointing from the same process.
//
//   fsdp-bench activations [--n-layer 8 --d-model 128 --context 128 --batch 8] [--json]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "fsdp/fsdp.h"
#include "fsdp/models/gpt.h"
#include "suites.h"

namespace fsdp::bench::activations_suite {
namespace {

struct ActivationsConfig {
  int64_t n_layer = 8;
  int64_t d_model = 128;
  int64_t n_head = 4;
  int64_t context = 128;
  int64_t batch = 8;
  int rounds = 9;
  int warmup = 2;
  bool json = false;
};

struct Setting {
  std::string name;
  int64_t checkpoint_every;  // GPTConfig::checkpoint_every
};

const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = {{"none", 0}, {"every other block", 2}, {"every block", 1}};
  return all;
}

// One setting's model, optimizer and measurements.
struct Run {
  Sharded<models::GPT> model{nullptr};
  std::unique_ptr<torch::optim::AdamW> opt;
  int64_t peak_bytes = 0;
  std::vector<double> step_ms;
};

models::GPTConfig gpt_config(const ActivationsConfig& c, int64_t checkpoint_every) {
  models::GPTConfig g;
  g.n_layer = c.n_layer;
  g.d_model = c.d_model;
  g.n_head = c.n_head;
  g.context = c.context;
  g.checkpoint_every = checkpoint_every;
  return g;
}

// One training step; records its peak bytes above the level before it.
double timed_step(Run& run, const at::Tensor& tokens, CpuAllocationCounter& counter) {
  const int64_t before = counter.current_bytes();
  counter.reset_peak();
  const auto start = std::chrono::steady_clock::now();
  at::Tensor loss = models::lm_loss(run.model->forward(tokens), tokens);
  run.opt->zero_grad();
  loss.backward();
  run.opt->step();
  const double ms = elapsed_ms(start);
  run.peak_bytes = counter.peak_bytes() - before;
  return ms;
}

std::string mib(int64_t bytes) { return fmt::format("{:.2f}", static_cast<double>(bytes) / (1 << 20)); }

void print_table(const ActivationsConfig& c, const std::vector<Run>& runs, int64_t block_input_bytes) {
  std::printf("fsdp-bench activations: GPT %ld blocks, width %ld, context %ld, batch %ld; FSDP, world size 1\n",
              static_cast<long>(c.n_layer), static_cast<long>(c.d_model), static_cast<long>(c.context),
              static_cast<long>(c.batch));
  std::printf("machine: %s; %d interleaved rounds after %d warm-up, median step\n\n",
              machine_line("none (world size 1)").c_str(), c.rounds, c.warmup);
  Table table({"checkpointing", "peak MiB", "vs none", "step ms", "vs none"});
  const double base_ms = summarize(runs[0].step_ms).median_ms;
  for (size_t i = 0; i < runs.size(); ++i) {
    const double ms = summarize(runs[i].step_ms).median_ms;
    table.add_row({settings()[i].name, mib(runs[i].peak_bytes),
                   fmt::format("{:.3f}", static_cast<double>(runs[i].peak_bytes) / runs[0].peak_bytes),
                   fmt::format("{:.1f}", ms), fmt::format("{:.3f}", ms / base_ms)});
  }
  table.print();
  std::printf("\npeak: CPU tensor bytes above the level before the step (allocator count, deterministic)\n");
  std::printf("one block's input: %s MiB; all %ld blocks' inputs: %s MiB\n", mib(block_input_bytes).c_str(),
              static_cast<long>(c.n_layer), mib(block_input_bytes * c.n_layer).c_str());
}

void run_activations(const ActivationsConfig& c) {
  at::set_num_threads(threads_per_rank(1));
  auto& counter = CpuAllocationCounter::install();
  auto group = make_single_process_group();
  at::manual_seed(0);
  at::Tensor tokens = at::randint(0, 256, {c.batch, c.context});
  std::vector<Run> runs;
  for (const Setting& setting : settings()) {
    at::manual_seed(1);  // the same initial model for every setting
    Run run;
    run.model = fully_shard(models::GPT(gpt_config(c, setting.checkpoint_every)), FullyShardOptions(group));
    run.opt = std::make_unique<torch::optim::AdamW>(run.model->parameters(), torch::optim::AdamWOptions(1e-4));
    runs.push_back(std::move(run));
  }
  for (int round = -c.warmup; round < c.rounds; ++round) {
    for (Run& run : runs) {
      const double ms = timed_step(run, tokens, counter);
      if (round >= 0) run.step_ms.push_back(ms);
    }
  }
  const int64_t block_input_bytes = c.batch * c.context * c.d_model * static_cast<int64_t>(sizeof(float));
  if (!c.json) return print_table(c, runs, block_input_bytes);
  for (size_t i = 0; i < runs.size(); ++i) {
    const Stats stats = summarize(runs[i].step_ms);
    print_json_line({{"suite", "activations"},
                     {"checkpointing", settings()[i].name},
                     {"checkpoint_every", settings()[i].checkpoint_every},
                     {"n_layer", c.n_layer},
                     {"d_model", c.d_model},
                     {"context", c.context},
                     {"batch", c.batch},
                     {"peak_bytes", runs[i].peak_bytes},
                     {"peak_ratio", static_cast<double>(runs[i].peak_bytes) / runs[0].peak_bytes},
                     {"step_ms", stats.median_ms},
                     {"step_ms_min", stats.min_ms},
                     {"step_ratio", stats.median_ms / summarize(runs[0].step_ms).median_ms},
                     {"block_input_bytes", block_input_bytes}});
  }
}

}  // namespace

void register_suite(CLI::App& app) {
  auto config = std::make_shared<ActivationsConfig>();
  CLI::App* sub = app.add_subcommand(
      "activations", "peak memory and step time of the GPT with activation checkpointing off, every other block, every block");
  sub->add_option("--n-layer", config->n_layer, "GPT blocks")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--d-model", config->d_model, "GPT width")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--n-head", config->n_head, "attention heads")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--context", config->context, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--batch", config->batch, "sequences per step")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--rounds", config->rounds, "timed rounds (one step of each setting)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--json", config->json, "one JSON object per setting");
  sub->callback([config] { run_activations(*config); });
}

}  // namespace fsdp::bench::activations_suite
