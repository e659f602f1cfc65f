// fsdp-bench overhead: what FSDP itself costs per unit per step, on a model
// of many tiny units where that cost is most visible (FSDP2's pre_forward
// costs about 1 ms per unit on such models, pytorch#173680).
//
// The same model is trained locally and under FSDP in the same run, at world
// size 1, so no communication is involved: the difference is the framework's
// hooks, state machine and autograd nodes.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "bench_util.h"
#include "fsdp/fsdp.h"
#include "suites.h"

namespace fsdp::bench {
namespace {

class TinyUnitImpl : public torch::nn::Module {
 public:
  explicit TinyUnitImpl(int64_t width) { fc = register_module("fc", torch::nn::Linear(width, width)); }
  at::Tensor forward(const at::Tensor& x) { return at::relu(fc->forward(x)); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(TinyUnit);

class TowerImpl : public torch::nn::Module {
 public:
  TowerImpl(int units, int64_t width, bool sharded) {
    layers = register_module("layers", torch::nn::Sequential());
    for (int i = 0; i < units; ++i) {
      if (sharded) {
        layers->push_back(Sharded<TinyUnit>(width));
      } else {
        layers->push_back(TinyUnit(width));
      }
    }
  }
  at::Tensor forward(const at::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
};
TORCH_MODULE(Tower);

struct OverheadConfig {
  int units = 96;
  int64_t width = 256;
  int64_t batch = 8;
  int reps = 200;
  int warmup = 10;
  bool json = false;
};

// One training step; returns its wall time in ms.
template <class Model>
double timed_step(Model& model, torch::optim::Optimizer& opt, const at::Tensor& x) {
  const auto start = std::chrono::steady_clock::now();
  at::Tensor loss = model->forward(x).sum();
  opt.zero_grad();
  loss.backward();
  opt.step();
  return elapsed_ms(start);
}

void run_overhead(const OverheadConfig& c) {
  at::set_num_threads(1);  // per-unit overhead is single-threaded work
  Tower local(c.units, c.width, false);
  auto group = make_single_process_group();
  auto sharded = fully_shard(Tower(c.units, c.width, true), FullyShardOptions(group));
  torch::optim::SGD local_opt(local->parameters(), torch::optim::SGDOptions(1e-3));
  torch::optim::SGD fsdp_opt(sharded->parameters(), torch::optim::SGDOptions(1e-3));
  at::Tensor x = at::randn({c.batch, c.width});
  // Alternate the two, step by step, so load from other processes on the
  // machine hits both alike; the overhead is the median of the paired
  // differences, which such noise barely moves.
  std::vector<double> local_ms, fsdp_ms, diff_ms;
  for (int rep = -c.warmup; rep < c.reps; ++rep) {
    const double l = timed_step(local, local_opt, x);
    const double f = timed_step(sharded, fsdp_opt, x);
    if (rep < 0) continue;
    local_ms.push_back(l);
    fsdp_ms.push_back(f);
    diff_ms.push_back(f - l);
  }
  const Stats local_stats = summarize(local_ms);
  const Stats fsdp_stats = summarize(fsdp_ms);
  const double overhead_us = summarize(diff_ms).median_ms * 1000.0 / c.units;
  if (c.json) {
    print_json_line({{"suite", "overhead"},
                     {"units", c.units},
                     {"width", c.width},
                     {"batch", c.batch},
                     {"world_size", 1},
                     {"fsdp_step_ms", fsdp_stats.median_ms},
                     {"fsdp_step_ms_min", fsdp_stats.min_ms},
                     {"local_step_ms", local_stats.median_ms},
                     {"local_step_ms_min", local_stats.min_ms},
                     {"overhead_us_per_unit", overhead_us}});
    return;
  }
  std::printf("fsdp-bench overhead: %d units of Linear(%ld,%ld)+ReLU, batch %ld, world size 1\n",
              c.units, static_cast<long>(c.width), static_cast<long>(c.width),
              static_cast<long>(c.batch));
  std::printf("machine: %s; %d reps after %d warm-up, median (min)\n\n",
              machine_line("none (world size 1)").c_str(), c.reps, c.warmup);
  Table table({"step", "median ms", "min ms"});
  table.add_row({"local (no FSDP)", fmt::format("{:.3f}", local_stats.median_ms),
                 fmt::format("{:.3f}", local_stats.min_ms)});
  table.add_row({"fsdp", fmt::format("{:.3f}", fsdp_stats.median_ms),
                 fmt::format("{:.3f}", fsdp_stats.min_ms)});
  table.print();
  std::printf("\nframework overhead (median of paired step differences): %.2f us per unit per "
              "step (goal: <= 10)\n",
              overhead_us);
}

}  // namespace

void register_overhead_suite(CLI::App& app) {
  auto config = std::make_shared<OverheadConfig>();
  CLI::App* sub = app.add_subcommand("overhead", "per-unit CPU overhead of FSDP vs local training");
  sub->add_option("--units", config->units, "number of tiny units")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--width", config->width, "Linear width")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--batch", config->batch, "batch rows")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--reps", config->reps, "timed repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_flag("--json", config->json, "one JSON object per line");
  sub->callback([config] { run_overhead(*config); });
}

}  // namespace fsdp::bench
