// fsdp-bench memory: tensor-byte accounting of one FULL_SHARD training step
// with AdamW on the small GPT, on N in-process ranks (threads, one Gloo group
// each over one FileStore).
//
// Per rank it reports the persistent bytes (sharded parameters, sharded
// gradients, AdamW's two moments) against the unsharded total, and the most
// gathered parameter bytes alive at once in forward and in backward against
// the root unit plus the two largest units (docs/design.md section 8). The
// baseline, one process training the same model one step, is measured in the
// same run: its parameters, gradients and AdamW state.
//
//   fsdp-bench memory --world-size 4 [--json] [--d-model 128 --n-layer 4]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include <algorithm>

#include "bench_util.h"
#include "fsdp/fsdp.h"
#include "fsdp/models/gpt.h"
#include "local_ranks.h"
#include "suites.h"

namespace fsdp::bench::memory_suite {
namespace {

struct MemoryConfig {
  int world_size = 4;
  int64_t d_model = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t context = 128;
  int64_t batch = 8;  // global batch, split over the ranks
  bool no_prefetch = false;
  bool json = false;
};

struct RankMemory {
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t peak_forward = 0;
  int64_t peak_backward = 0;
  fsdp::MemoryStats stats;  // after the step
  int64_t total() const { return param_bytes + grad_bytes + optimizer_bytes; }
};

models::GPTConfig gpt_config(const MemoryConfig& c, bool shard_blocks) {
  models::GPTConfig g;
  g.d_model = c.d_model;
  g.n_layer = c.n_layer;
  g.n_head = c.n_head;
  g.context = c.context;
  g.shard_blocks = shard_blocks;
  return g;
}

int64_t tensor_bytes(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

// One process, no FSDP: what every rank would hold without sharding.
int64_t baseline_bytes(const MemoryConfig& c, const at::Tensor& tokens) {
  at::manual_seed(0);
  models::GPT model(gpt_config(c, /*shard_blocks=*/false));
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  at::Tensor loss = models::lm_loss(model->forward(tokens), tokens);
  loss.backward();
  opt.step();
  int64_t total = optimizer_state_bytes(opt);
  for (const auto& p : model->parameters()) total += tensor_bytes(p) + tensor_bytes(p.grad());
  return total;
}

RankMemory run_rank(const MemoryConfig& c, ProcessGroupPtr group, const at::Tensor& tokens) {
  at::set_num_threads(threads_per_rank(c.world_size));
  const int rank = group->rank();
  at::manual_seed(0);  // every rank builds the same model
  models::GPT local(gpt_config(c, /*shard_blocks=*/true));
  auto model = fully_shard(local, FullyShardOptions(group).prefetch(!c.no_prefetch));
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  const int64_t rows = tokens.size(0) / c.world_size;
  at::Tensor x = tokens.narrow(0, rank * rows, rows);

  RankMemory out;
  reset_peak_memory_stats(*model);
  at::Tensor loss = models::lm_loss(model->forward(x), x);
  out.peak_forward = memory_stats(*model).peak_gathered_param_bytes;
  reset_peak_memory_stats(*model);
  loss.backward();
  out.peak_backward = memory_stats(*model).peak_gathered_param_bytes;
  opt.step();
  out.stats = memory_stats(*model);
  out.param_bytes = out.stats.sharded_param_bytes;
  out.grad_bytes = out.stats.sharded_grad_bytes;
  out.optimizer_bytes = optimizer_state_bytes(opt);
  return out;
}

// The numbers the table and the JSON line share, over all ranks.
struct MemorySummary {
  int64_t baseline = 0;         // one process, measured
  int64_t unsharded_total = 0;  // parameters, gradients and AdamW's two moments
  int64_t whole_model = 0;      // all parameters, gathered
  int64_t root = 0;             // the root unit's parameter bytes
  int64_t largest = 0;          // the largest unit's
  int64_t gather_bound = 0;     // root + 2 x largest
  int64_t worst_total = 0;      // the most persistent bytes on one rank
  int64_t worst_peak = 0;       // the most gathered bytes on one rank, fwd or bwd
  double ratio = 0;             // worst_total / unsharded_total
};

MemorySummary summarize_memory(const std::vector<RankMemory>& ranks, int64_t baseline) {
  MemorySummary s;
  s.baseline = baseline;
  s.unsharded_total = 4 * ranks[0].stats.unsharded_param_bytes;
  s.whole_model = ranks[0].stats.unsharded_param_bytes;
  s.root = ranks[0].stats.root_unit_bytes;
  s.largest = ranks[0].stats.largest_unit_bytes;
  s.gather_bound = s.root + 2 * s.largest;
  for (const auto& r : ranks) {
    s.worst_total = std::max(s.worst_total, r.total());
    s.worst_peak = std::max({s.worst_peak, r.peak_forward, r.peak_backward});
  }
  s.ratio = static_cast<double>(s.worst_total) / static_cast<double>(s.unsharded_total);
  return s;
}

void print_json(const MemoryConfig& c, const std::vector<RankMemory>& ranks,
                const MemorySummary& s) {
  std::vector<JsonValue> per_rank;
  for (size_t r = 0; r < ranks.size(); ++r) {
    per_rank.push_back(JsonValue::raw(json_object_text({{"rank", r},
                        {"sharded_param_bytes", ranks[r].param_bytes},
                        {"sharded_grad_bytes", ranks[r].grad_bytes},
                        {"optimizer_state_bytes", ranks[r].optimizer_bytes},
                        {"sharded_bytes", ranks[r].total()},
                        {"peak_forward_param_bytes", ranks[r].peak_forward},
                        {"peak_backward_param_bytes", ranks[r].peak_backward}})));
  }
  print_json_line({{"suite", "memory"},
                   {"model", fmt::format("gpt-d{}-l{}", c.d_model, c.n_layer)},
                   {"strategy", "FULL_SHARD"},
                   {"optimizer", "AdamW"},
                   {"world_size", c.world_size},
                   {"prefetch", !c.no_prefetch},
                   {"sharded_bytes_per_rank", s.worst_total},
                   {"unsharded_total_bytes", s.unsharded_total},
                   {"baseline_single_process_bytes", s.baseline},
                   {"ratio", s.ratio},
                   {"peak_unsharded_param_bytes", s.worst_peak},
                   {"largest_unit_bytes", s.largest},
                   {"root_unit_bytes", s.root},
                   {"peak_bound_bytes", s.gather_bound},
                   {"whole_model_param_bytes", s.whole_model},
                   {"ranks", json_array(per_rank)}});
}

std::string kib(int64_t bytes) { return fmt::format("{:.1f}", bytes / 1024.0); }

void print_table(const MemoryConfig& c, const std::vector<RankMemory>& ranks,
                 const MemorySummary& s) {
  Table table({"rank", "params KiB", "grads KiB", "AdamW KiB", "total KiB", "/ unsharded",
               "peak fwd KiB", "peak bwd KiB"});
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto& m = ranks[r];
    table.add_row({std::to_string(r), kib(m.param_bytes), kib(m.grad_bytes), kib(m.optimizer_bytes),
                   kib(m.total()),
                   fmt::format("{:.4f}", static_cast<double>(m.total()) / s.unsharded_total),
                   kib(m.peak_forward), kib(m.peak_backward)});
  }
  table.print();
  std::printf("\n%-52s %s KiB\n", "unsharded total (params + grads + 2 AdamW moments):",
              kib(s.unsharded_total).c_str());
  std::printf("%-52s %s KiB\n", "baseline, one process, measured:", kib(s.baseline).c_str());
  std::printf("%-52s %.4f (ideal %.4f)\n", "worst rank / unsharded total:", s.ratio,
              1.0 / c.world_size);
  std::printf("%-52s %s KiB\n", "peak gathered parameters (worst rank, fwd or bwd):",
              kib(s.worst_peak).c_str());
  std::printf("%-52s %s KiB\n",
              fmt::format("bound: root {} KiB + 2 x largest unit {} KiB:", kib(s.root),
                          kib(s.largest))
                  .c_str(),
              kib(s.gather_bound).c_str());
  std::printf("%-52s %s KiB\n", "the whole model, gathered:", kib(s.whole_model).c_str());
}

void run_memory(const MemoryConfig& c) {
  TORCH_CHECK(c.world_size >= 1, "--world-size must be >= 1, got ", c.world_size);
  TORCH_CHECK(c.batch % c.world_size == 0, "--batch ", c.batch, " does not split over ",
              c.world_size, " ranks; pick a multiple of the world size");
  std::FILE* info = c.json ? stderr : stdout;
  const auto g = gpt_config(c, true);
  g.validate();
  std::fprintf(info,
               "fsdp-bench memory: GPT d%lld/%lld layers (%lld params), FULL_SHARD, AdamW, one "
               "step, global batch %lld x %lld, %d ranks as threads%s\nmachine: %s\n\n",
               static_cast<long long>(c.d_model), static_cast<long long>(c.n_layer),
               static_cast<long long>(g.num_params()), static_cast<long long>(c.batch),
               static_cast<long long>(c.context), c.world_size, c.no_prefetch ? ", no prefetch" : "",
               machine_line("gloo").c_str());

  at::manual_seed(1);
  at::Tensor tokens = at::randint(0, g.vocab_size, {c.batch, c.context});
  at::set_num_threads(threads_per_rank(1));
  const int64_t baseline = baseline_bytes(c, tokens);

  std::vector<RankMemory> ranks(c.world_size);
  run_local_ranks(c.world_size, [&](int rank, ProcessGroupPtr group) {
    ranks[rank] = run_rank(c, std::move(group), tokens);
  });
  const MemorySummary summary = summarize_memory(ranks, baseline);
  if (c.json) {
    print_json(c, ranks, summary);
  } else {
    print_table(c, ranks, summary);
  }
}

}  // namespace

void register_suite(CLI::App& app) {
  auto config = std::make_shared<MemoryConfig>();
  CLI::App* sub = app.add_subcommand(
      "memory", "per-rank sharded bytes and peak gathered bytes of one FULL_SHARD step");
  sub->add_option("--world-size,-n", config->world_size, "ranks (threads)")->capture_default_str();
  sub->add_option("--d-model", config->d_model, "GPT width")->capture_default_str();
  sub->add_option("--n-layer", config->n_layer, "GPT blocks (one unit each)")->capture_default_str();
  sub->add_option("--n-head", config->n_head, "attention heads")->capture_default_str();
  sub->add_option("--context", config->context, "sequence length")->capture_default_str();
  sub->add_option("--batch", config->batch, "global batch (rows), split over the ranks")
      ->capture_default_str();
  sub->add_flag("--no-prefetch", config->no_prefetch, "turn off all-gather prefetch");
  sub->add_flag("--json", config->json, "one JSON object instead of a table");
  sub->callback([config] { run_memory(*config); });
}

}  // namespace fsdp::bench::memory_suite
