// fsdp-bench train: how well FSDP hides communication behind compute.
//
// On N in-process ranks, the same run measures (a) the local step on the
// per-rank batch, all ranks computing at once as they do under FSDP
// (compute alone), (b) the step's collectives alone, with the unit sizes of
// the sharded model, and (c) the FSDP step with prefetch on and off, all four
// interleaved within each repetition. Perfect
// overlap would make the FSDP step as long as the longer of (a) and (b):
// ratio_to_limit = fsdp_step / max(compute, comm).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include <mutex>

#include "bench_util.h"
#include "fsdp/fsdp.h"
#include "fsdp/models/gpt.h"
#include "local_ranks.h"
#include "suites.h"

namespace fsdp::bench::train_suite {
namespace {

struct TrainConfig {
  int world_size = 2;
  int64_t batch = 8;  // sequences per rank
  int64_t width = 128;
  int64_t layers = 4;
  int64_t context = 128;
  int reps = 20;
  int warmup = 2;
  bool reduce_scatter_lane = false;  // FullyShardOptions::separate_reduce_scatter_group
  bool json = false;
};

models::GPTConfig gpt_config(const TrainConfig& c, bool shard_blocks) {
  models::GPTConfig config;
  config.d_model = c.width;
  config.n_layer = c.layers;
  config.n_head = 4;
  config.context = c.context;
  config.shard_blocks = shard_blocks;
  return config;
}

template <class Model>
void train_step(Model& model, torch::optim::Optimizer& opt, const at::Tensor& tokens) {
  at::Tensor loss = models::lm_loss(model->forward(tokens), tokens);
  opt.zero_grad();
  loss.backward();
  opt.step();
}

// The collectives one FULL_SHARD step issues, alone: every unit gathered for
// forward, every non-root unit again for backward, every unit's gradients
// reduce-scattered (with its one flag per parameter), on the group the units
// reduce-scatter on.
class CommOnlyStep {
 public:
  CommOnlyStep(ProcessGroup& group, std::vector<UnitInfo> units)
      : group_(group), reduce_group_(*units.at(0).reduce_scatter_group), units_(std::move(units)) {
    const int n = group.size();
    for (const auto& u : units_) {
      gathered_.push_back(at::empty({u.padded_numel}, u.compute_dtype));
      shards_.push_back(at::ones({u.shard_numel}, u.compute_dtype));
      grads_in_.push_back(at::ones({n * (u.shard_numel + u.num_params)}, u.reduce_dtype));
      grads_out_.push_back(at::empty({u.shard_numel + u.num_params}, u.reduce_dtype));
    }
  }
  void operator()() {
    std::vector<WorkPtr> work;
    for (size_t i = 0; i < units_.size(); ++i) work.push_back(group_.all_gather(gathered_[i], shards_[i]));
    for (size_t i = units_.size(); i-- > 0;) {
      if (!units_[i].name.empty()) work.push_back(group_.all_gather(gathered_[i], shards_[i]));
      work.push_back(reduce_group_.reduce_scatter(grads_out_[i], grads_in_[i], ReduceOp::kSum));
    }
    for (auto& w : work) w->wait();
  }

 private:
  ProcessGroup& group_;
  ProcessGroup& reduce_group_;
  std::vector<UnitInfo> units_;
  std::vector<at::Tensor> gathered_, shards_, grads_in_, grads_out_;
};

// The four measurements, each the slowest rank's (what a synchronous step
// costs).
enum Measurement { kCompute, kComm, kPrefetchOn, kPrefetchOff, kMeasurements };

struct TrainTimes {
  Stats of[kMeasurements];
};

// Every rank builds the local model and both FSDP models up front, and each
// repetition runs the four steps back to back, in an order that rotates, so
// the machine's drift (other processes, clock changes) hits all four alike
// and the ratios compare steps taken moments apart.
TrainTimes measure(const TrainConfig& c) {
  TrainTimes worst;
  std::mutex mu;
  run_local_ranks(c.world_size, [&](int, ProcessGroupPtr group) {
    models::GPT local(gpt_config(c, false));
    torch::optim::AdamW local_opt(local->parameters(), torch::optim::AdamWOptions(1e-3));
    const auto options =
        FullyShardOptions(group).separate_reduce_scatter_group(c.reduce_scatter_lane);
    auto on = fully_shard(models::GPT(gpt_config(c, true)), options);
    torch::optim::AdamW on_opt(on->parameters(), torch::optim::AdamWOptions(1e-3));
    auto off = fully_shard(models::GPT(gpt_config(c, true)), FullyShardOptions(options).prefetch(false));
    torch::optim::AdamW off_opt(off->parameters(), torch::optim::AdamWOptions(1e-3));
    CommOnlyStep comm(*group, unit_infos(*on));
    at::Tensor tokens = at::randint(0, 256, {c.batch, c.context});
    auto run = [&](int which) {
      switch (which) {
        case kCompute: train_step(local, local_opt, tokens); break;
        case kComm: comm(); break;
        case kPrefetchOn: train_step(on, on_opt, tokens); break;
        case kPrefetchOff: train_step(off, off_opt, tokens); break;
      }
    };
    std::vector<double> ms[kMeasurements];
    for (int rep = -c.warmup; rep < c.reps; ++rep) {
      for (int k = 0; k < kMeasurements; ++k) {
        const int which = (k + rep + c.warmup) % kMeasurements;
        group->barrier()->wait();
        const auto start = std::chrono::steady_clock::now();
        run(which);
        if (rep >= 0) ms[which].push_back(elapsed_ms(start));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int k = 0; k < kMeasurements; ++k) {
      const Stats s = summarize(ms[k]);
      if (s.median_ms > worst.of[k].median_ms) worst.of[k] = s;
    }
  });
  return worst;
}

void run_train(const TrainConfig& c) {
  at::set_num_threads(threads_per_rank(c.world_size));
  const TrainTimes times = measure(c);
  const Stats& compute = times.of[kCompute];
  const Stats& comm = times.of[kComm];
  const Stats& fsdp_on = times.of[kPrefetchOn];
  const Stats& fsdp_off = times.of[kPrefetchOff];
  const double limit = std::max(compute.median_ms, comm.median_ms);
  const double tokens = static_cast<double>(c.batch * c.context * c.world_size);
  struct Row {
    bool prefetch;
    Stats stats;
  };
  if (!c.json) {
    std::printf("fsdp-bench train: GPT d%ld x %ld layers, context %ld, %ld sequences per rank, "
                "world size %d\n",
                static_cast<long>(c.width), static_cast<long>(c.layers), static_cast<long>(c.context),
                static_cast<long>(c.batch), c.world_size);
    std::printf("machine: %s; %d reps after %d warm-up, the four steps interleaved; slowest "
                "rank's median (min)%s\n\n",
                machine_line("gloo").c_str(), c.reps, c.warmup,
                c.reduce_scatter_lane ? "; reduce-scatters on their own group" : "");
    Table table({"measurement", "median ms", "min ms", "ratio_to_limit", "tokens/s"});
    auto row = [&](const std::string& name, const Stats& s, bool ratio) {
      table.add_row({name, fmt::format("{:.1f}", s.median_ms), fmt::format("{:.1f}", s.min_ms),
                     ratio ? fmt::format("{:.3f}", s.median_ms / limit) : "",
                     fmt::format("{:.0f}", tokens / s.median_ms * 1000.0)});
    };
    row("local step (compute alone)", compute, false);
    row("collectives alone", comm, false);
    row("fsdp step, prefetch on", fsdp_on, true);
    row("fsdp step, prefetch off", fsdp_off, true);
    table.print();
    std::printf("\nratio_to_limit = fsdp_step / max(compute, comm); 1.0 is perfect overlap "
                "(goal: <= 1.25 with prefetch)\n");
    return;
  }
  for (const Row& r : {Row{true, fsdp_on}, Row{false, fsdp_off}}) {
    print_json_line({{"suite", "train"},
                     {"world_size", c.world_size},
                     {"prefetch", r.prefetch},
                     {"separate_reduce_scatter_group", c.reduce_scatter_lane},
                     {"fsdp_step_ms", r.stats.median_ms},
                     {"fsdp_step_ms_min", r.stats.min_ms},
                     {"local_step_ms", compute.median_ms},
                     {"comm_only_ms", comm.median_ms},
                     {"ratio_to_limit", r.stats.median_ms / limit},
                     {"tokens_per_s", tokens / r.stats.median_ms * 1000.0}});
  }
}

}  // namespace

void register_suite(CLI::App& app) {
  auto config = std::make_shared<TrainConfig>();
  CLI::App* sub = app.add_subcommand("train", "overlap of communication and compute in a GPT step");
  sub->add_option("--world-size", config->world_size, "local ranks")->capture_default_str()->check(CLI::Range(1, 64));
  sub->add_option("--batch", config->batch, "sequences per rank")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--width", config->width, "model width")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--layers", config->layers, "blocks (units)")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--context", config->context, "sequence length")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--reps", config->reps, "timed repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_flag("--separate-reduce-scatter-group", config->reduce_scatter_lane,
                "reduce-scatter on a sibling group with its own worker (NCCL's default; off by "
                "default on Gloo), in the FSDP steps and the collectives-alone step");
  sub->add_flag("--json", config->json, "one JSON object per line");
  sub->callback([config] { run_train(*config); });
}

}  // namespace fsdp::bench::train_suite
