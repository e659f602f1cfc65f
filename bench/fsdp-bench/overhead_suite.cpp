// fsdp-bench overhead: what FSDP itself costs per unit per step, on a model
// of many tiny units where that cost is most visible (FSDP2's pre_forward
// costs about 1 ms per unit on such models, pytorch#173680).
//
// The same model is trained locally and under FSDP in the same run, at world
// size 1, so no communication is involved: the difference is the framework's
// hooks, state machine and autograd nodes. Then FSDP steps under an
// fsdp::HookTimer, alternating with steps without one, say how much of that
// is inside the hooks, hook by hook (the figure FSDP2's profiler ranges
// give for it), and what the timer itself costs.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <algorithm>

#include "bench_util.h"
#include "fsdp/fsdp.h"
#include "suites.h"

namespace fsdp::bench::overhead_suite {
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
  int hook_reps = 50;
  bool json = false;
};

// The hooks' time of FSDP steps under a HookTimer, and what the timer costs.
struct HookBreakdown {
  std::vector<HookTime> per_step;  // seconds per step, by range
  double timer_cost_ms = 0;        // median of (timed - untimed) paired steps
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

template <class Model>
HookBreakdown time_hooks(Model& model, torch::optim::Optimizer& opt, const at::Tensor& x,
                         int reps) {
  HookBreakdown out;
  std::vector<HookTime> totals;
  std::vector<double> diff_ms;
  for (int rep = 0; rep < reps; ++rep) {
    const double untimed = timed_step(model, opt, x);
    HookTimer timer;
    const double timed = timed_step(model, opt, x);
    for (const HookTime& t : timer.take()) {
      auto it = std::find_if(totals.begin(), totals.end(),
                             [&](const HookTime& u) { return u.range == t.range; });
      if (it == totals.end()) it = totals.insert(totals.end(), {t.range, 0, 0});
      it->calls += t.calls;
      it->seconds += t.seconds;
    }
    diff_ms.push_back(timed - untimed);
  }
  for (HookTime& t : totals) t.seconds /= reps;
  out.per_step = std::move(totals);
  out.timer_cost_ms = summarize(diff_ms).median_ms;
  return out;
}

void print_overhead_json(const OverheadConfig& c, const Stats& local_stats,
                         const Stats& fsdp_stats, double overhead_us, const HookBreakdown& hooks) {
  const int units = c.units + 1;  // with the root, as print_hook_breakdown
  JsonObject by_range;
  for (const HookTime& t : hooks.per_step) by_range.push_back({hook_name(t), 1e6 * t.seconds / units});
  print_json_line({{"suite", "overhead"},
                   {"units", c.units},
                   {"width", c.width},
                   {"batch", c.batch},
                   {"world_size", 1},
                   {"fsdp_step_ms", fsdp_stats.median_ms},
                   {"fsdp_step_ms_min", fsdp_stats.min_ms},
                   {"local_step_ms", local_stats.median_ms},
                   {"local_step_ms_min", local_stats.min_ms},
                   {"overhead_us_per_unit", overhead_us},
                   {"hook_us_per_unit", 1e6 * total_seconds(hooks.per_step) / units},
                   {"hook_us_per_unit_by_range", JsonValue::raw(json_object_text(by_range))},
                   {"hook_timer_cost_us_per_unit", 1e3 * hooks.timer_cost_ms / units}});
}

// Per unit here counts the root too: it has hooks like any other unit.
void print_hook_breakdown(const OverheadConfig& c, const HookBreakdown& hooks) {
  const int units = c.units + 1;
  std::printf("\ninside the hooks (fsdp::HookTimer, mean of %d steps; %d units with the root):\n\n",
              c.hook_reps, units);
  Table table({"hook", "calls per step", "us per unit per step"});
  for (const HookTime& t : hooks.per_step) {
    table.add_row({t.range, fmt::format("{:.0f}", static_cast<double>(t.calls) / c.hook_reps),
                   fmt::format("{:.2f}", 1e6 * t.seconds / units)});
  }
  table.add_row({"all hooks", "", fmt::format("{:.2f}", 1e6 * total_seconds(hooks.per_step) / units)});
  table.print();
  std::printf("the timer's own cost (median of paired steps with and without it): %.2f us per "
              "unit per step\n",
              1e3 * hooks.timer_cost_ms / units);
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
  const HookBreakdown hooks = time_hooks(sharded, fsdp_opt, x, c.hook_reps);
  if (c.json) return print_overhead_json(c, local_stats, fsdp_stats, overhead_us, hooks);
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
  print_hook_breakdown(c, hooks);
}

}  // namespace

void register_suite(CLI::App& app) {
  auto config = std::make_shared<OverheadConfig>();
  CLI::App* sub = app.add_subcommand("overhead", "per-unit CPU overhead of FSDP vs local training");
  sub->add_option("--units", config->units, "number of tiny units")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--width", config->width, "Linear width")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--batch", config->batch, "batch rows")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--reps", config->reps, "timed repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--hook-reps", config->hook_reps,
                  "FSDP steps timed inside the hooks (fsdp::HookTimer), each paired with one "
                  "without the timer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--json", config->json, "one JSON object per line");
  sub->callback([config] { run_overhead(*config); });
}

}  // namespace fsdp::bench::overhead_suite
