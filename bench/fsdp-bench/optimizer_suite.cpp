// fsdp-bench optimizer: LibTorch's optimizer steps in passes over their
// parameters, against a copy of the same bytes timed in the same run.
//
// fsdp-plan charges a rank's optimizer step as passes over its fp32 shard
// at the profile's memory bandwidth, which calibrate measures with a copy
// ([Note: the optimizer's passes over the shard] in
// tools/fsdp-plan/time_plan.cpp). This suite measures those passes: a step's
// time as copies of the parameters, times 2 (a copy reads and writes).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <memory>

#include "bench_util.h"
#include "suites.h"

namespace fsdp::bench::optimizer_suite {
namespace {

struct OptimizerConfig {
  std::vector<int64_t> elements = {1 << 20, 4 << 20, 16 << 20};
  int reps = 15;
  int tensors = 4;  // the parameters are this many equal tensors
  int threads = threads_per_rank(1);
  bool json = false;
};

struct Measurement {
  std::string name;
  std::function<void()> run;
  std::vector<double> ms;
};

// Every measurement once per rep, in rotating order, so a drift of the
// machine's speed hits all alike.
void measure_interleaved(std::vector<Measurement>& all, int reps) {
  for (auto& m : all) m.run();  // warm up: optimizer state, allocator
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t k = 0; k < all.size(); ++k) {
      Measurement& m = all[(k + rep) % all.size()];
      const auto start = std::chrono::steady_clock::now();
      m.run();
      m.ms.push_back(elapsed_ms(start));
    }
  }
}

void run_size(const OptimizerConfig& c, int64_t elements) {
  const int64_t per_tensor = elements / c.tensors;
  std::vector<at::Tensor> params;
  for (int i = 0; i < c.tensors; ++i) {
    at::Tensor p = at::randn({per_tensor}).requires_grad_();
    p.mutable_grad() = at::randn({per_tensor});
    params.push_back(p);
  }
  torch::optim::AdamW adamw(params, torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
  torch::optim::SGD momentum(params, torch::optim::SGDOptions(1e-3).momentum(0.9));
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(1e-3));
  at::Tensor source = at::randn({per_tensor * c.tensors}), target = at::empty_like(source);
  std::vector<Measurement> all = {{"copy", [&] { target.copy_(source); }, {}},
                                  {"AdamW", [&] { adamw.step(); }, {}},
                                  {"SGD with momentum", [&] { momentum.step(); }, {}},
                                  {"SGD", [&] { sgd.step(); }, {}}};
  measure_interleaved(all, c.reps);
  const double copy_ms = summarize(all[0].ms).median_ms;
  Table table({"step", "median ms", "min ms", "copy-passes"});
  for (const Measurement& m : all) {
    const Stats s = summarize(m.ms);
    const double passes = 2 * s.median_ms / copy_ms;
    if (c.json) {
      print_json_line({{"suite", "optimizer"}, {"elements", elements}, {"step", m.name},
                       {"median_ms", s.median_ms}, {"min_ms", s.min_ms}, {"copy_passes", passes}});
    }
    table.add_row({m.name, fmt::format("{:.3f}", s.median_ms), fmt::format("{:.3f}", s.min_ms),
                   fmt::format("{:.1f}", passes)});
  }
  if (c.json) return;
  std::printf("\n%ld fp32 elements in %d tensors:\n", static_cast<long>(elements), c.tensors);
  table.print();
}

void run_optimizer(const OptimizerConfig& c) {
  at::set_num_threads(c.threads);
  if (!c.json) {
    std::printf("fsdp-bench optimizer: LibTorch's optimizer steps against a copy of their "
                "parameters\nmachine: %s, %d threads; %d reps after 1 warm-up, interleaved; "
                "copy-passes = 2 x step / copy (fsdp-plan charges the step this way: "
                "docs/planner.md)\n",
                machine_line("none").c_str(), c.threads, c.reps);
  }
  for (const int64_t elements : c.elements) run_size(c, elements);
}

}  // namespace

void register_suite(CLI::App& app) {
  auto config = std::make_shared<OptimizerConfig>();
  CLI::App* sub = app.add_subcommand(
      "optimizer", "LibTorch's AdamW and SGD steps in passes over their parameters, vs a copy");
  sub->add_option("--elements", config->elements, "parameter elements (one or more sizes)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 34));
  sub->add_option("--reps", config->reps, "timed repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--threads", config->threads, "intra-op threads (a rank's share of the cores)")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_flag("--json", config->json, "one JSON object per line");
  sub->callback([config] { run_optimizer(*config); });
}

}  // namespace fsdp::bench::optimizer_suite
