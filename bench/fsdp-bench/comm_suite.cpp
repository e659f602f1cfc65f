// fsdp-bench comm: the collectives FSDP runs, alone, on N ranks that are
// threads of this process (one Gloo group each over one FileStore).
//
// For a buffer of S bytes (the all-gather output, the reduce-scatter input,
// the all-reduce tensor): algbw = S / time, and bus bandwidth, the rate each
// link must carry, is algbw * (n-1)/n for all-gather and reduce-scatter and
// algbw * 2(n-1)/n for all-reduce. The ring bound is the same for
// all-gather and reduce-scatter, so their ratio shows what the reduction in
// the reduce-scatter ring costs (see [Note: ring collectives on Gloo]).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <map>
#include <mutex>

#include "bench_util.h"
#include "fsdp/comm/process_group.h"
#include "local_ranks.h"
#include "suites.h"

namespace fsdp::bench::comm_suite {
namespace {

struct CommConfig {
  int world_size = 2;
  int reps = 10;
  int warmup = 2;
  double min_mib = 1;
  double max_mib = 64;
  int64_t segment_kib = 0;  // 0: GroupOptions' default
  bool json = false;
};

const char* kOps[] = {"all_gather", "reduce_scatter", "all_reduce"};

double bus_factor(const std::string& op, int n) {
  return (op == "all_reduce" ? 2.0 : 1.0) * (n - 1) / n;
}

// Per-rep times of one op and size, the slowest rank's, in ms.
using Timings = std::map<std::pair<std::string, int64_t>, std::vector<double>>;

std::vector<int64_t> sizes_in_bytes(const CommConfig& c) {
  std::vector<int64_t> sizes;
  for (double mib = c.min_mib; mib <= c.max_mib + 1e-9; mib *= 2) {
    sizes.push_back(static_cast<int64_t>(mib * (1 << 20)));
  }
  return sizes;
}

// One rank's part of the run. Ranks time each rep between barriers; the
// slowest rank's time is the op's time.
void run_rank(const CommConfig& c, ProcessGroup& group, Timings& timings, std::mutex& mu) {
  at::set_num_threads(threads_per_rank(c.world_size));
  const int rank = group.rank();
  const int n = c.world_size;
  for (int64_t bytes : sizes_in_bytes(c)) {
    const int64_t numel = bytes / 4 / n * n;  // float32, divisible by n
    const auto full = at::ones({numel}, at::kFloat);
    const auto shard = at::ones({numel / n}, at::kFloat);
    // Ops alternate within each rep, so load from outside this process hits
    // all three alike and their ratios stay meaningful on a busy machine.
    std::map<std::string, at::Tensor> times;
    for (const std::string op : kOps) times[op] = at::zeros({c.reps}, at::kDouble);
    for (int rep = -c.warmup; rep < c.reps; ++rep) {
      for (const std::string op : kOps) {
        full.fill_(1.0f);  // reduce-scatter and all-reduce overwrite it
        group.barrier()->wait();
        const auto start = std::chrono::steady_clock::now();
        if (op == "all_gather") {
          group.all_gather(full, shard)->wait();
        } else if (op == "reduce_scatter") {
          group.reduce_scatter(shard, full, ReduceOp::kSum)->wait();
        } else {
          group.all_reduce(full, ReduceOp::kSum)->wait();
        }
        if (rep >= 0) times[op][rep] = elapsed_ms(start);
      }
    }
    for (const std::string op : kOps) {
      group.all_reduce(times[op], ReduceOp::kMax)->wait();
      if (rank == 0) {
        std::lock_guard<std::mutex> lock(mu);
        timings[{op, numel * 4}].assign(times[op].data_ptr<double>(),
                                        times[op].data_ptr<double>() + c.reps);
      }
    }
  }
}

// Every rank's run, each on a thread of its own (see local_ranks.h).
Timings measure(const CommConfig& c) {
  GroupOptions options;
  options.timeout = std::chrono::minutes(2);
  if (c.segment_kib > 0) options.ring_segment_bytes = c.segment_kib << 10;
  Timings timings;
  std::mutex mu;
  run_local_ranks(
      c.world_size, [&](int, ProcessGroupPtr group) { run_rank(c, *group, timings, mu); }, options);
  return timings;
}

// bytes -> op -> bus bandwidth (GB/s) from the median and from the minimum time
using BusBandwidths = std::map<int64_t, std::map<std::string, std::pair<double, double>>>;

// Prints every op and size, as a table or as JSON lines, and returns their
// bus bandwidths for the ratios.
BusBandwidths report_ops(const CommConfig& c, const Timings& timings) {
  Table table({"op", "MiB", "min ms", "median ms", "algbw GB/s", "busbw GB/s"});
  BusBandwidths busbw;
  for (int64_t bytes : sizes_in_bytes(c)) {
    for (const std::string op : kOps) {
      const int64_t real_bytes = bytes / 4 / c.world_size * c.world_size * 4;
      const Stats s = summarize(timings.at({op, real_bytes}));
      const double algbw = real_bytes / (s.median_ms * 1e-3) / 1e9;
      const double bus = algbw * bus_factor(op, c.world_size);
      busbw[bytes][op] = {bus, real_bytes / (s.min_ms * 1e-3) / 1e9 * bus_factor(op, c.world_size)};
      if (c.json) {
        print_json_line({{"suite", "comm"}, {"op", op}, {"backend", "gloo"},
                         {"world_size", c.world_size}, {"bytes", real_bytes},
                         {"reps", c.reps}, {"ms_min", s.min_ms}, {"ms_median", s.median_ms},
                         {"algbw_GBps", algbw}, {"busbw_GBps", bus}});
      } else {
        table.add_row({op, fmt::format("{:.0f}", real_bytes / 1048576.0),
                       fmt::format("{:.2f}", s.min_ms), fmt::format("{:.2f}", s.median_ms),
                       fmt::format("{:.2f}", algbw), fmt::format("{:.2f}", bus)});
      }
    }
  }
  if (!c.json) table.print();
  return busbw;
}

// What the reduction in the reduce-scatter ring costs: its bus bandwidth
// over all-gather's, per size.
void report_rs_over_ag(const CommConfig& c, const BusBandwidths& busbw) {
  if (!c.json) {
    std::printf("\nreduce-scatter busbw / all-gather busbw (the ring bound is 1.0):\n");
  }
  for (const auto& [bytes, by_op] : busbw) {
    const auto& rs = by_op.at("reduce_scatter");
    const auto& ag = by_op.at("all_gather");
    const double median_ratio = rs.first / ag.first;
    const double min_ratio = rs.second / ag.second;
    if (c.json) {
      print_json_line({{"suite", "comm"}, {"op", "rs_over_ag_busbw"}, {"backend", "gloo"},
                       {"world_size", c.world_size}, {"bytes", bytes},
                       {"ratio_median", median_ratio}, {"ratio_min", min_ratio}});
    } else {
      std::printf("  %6.0f MiB: %.2f from medians, %.2f from minimums\n", bytes / 1048576.0,
                  median_ratio, min_ratio);
    }
  }
}

void run_comm(const CommConfig& c) {
  TORCH_CHECK(c.world_size >= 1, "--world-size must be >= 1");
  TORCH_CHECK(c.reps >= 1, "--reps must be >= 1");
  TORCH_CHECK(c.min_mib > 0 && c.min_mib <= c.max_mib, "need 0 < --min-mib <= --max-mib");
  std::FILE* info = c.json ? stderr : stdout;
  std::fprintf(info,
               "fsdp-bench comm: %d ranks as threads of one process, float32, %d reps after %d "
               "warm-up, %d intra-op threads per rank\nmachine: %s\n\n",
               c.world_size, c.reps, c.warmup, threads_per_rank(c.world_size),
               machine_line("gloo").c_str());
  const Timings timings = measure(c);
  const BusBandwidths busbw = report_ops(c, timings);
  if (c.world_size > 1) report_rs_over_ag(c, busbw);  // 1 rank moves nothing: no ratio
}

}  // namespace

void register_suite(CLI::App& app) {
  auto config = std::make_shared<CommConfig>();
  CLI::App* sub = app.add_subcommand(
      "comm", "all-gather, reduce-scatter and all-reduce bandwidth on N in-process ranks");
  sub->add_option("--world-size,-n", config->world_size, "ranks (threads)")->capture_default_str();
  sub->add_option("--reps", config->reps, "timed repetitions per op and size")
      ->capture_default_str();
  sub->add_option("--warmup", config->warmup, "untimed repetitions first")->capture_default_str();
  sub->add_option("--min-mib", config->min_mib, "smallest buffer, MiB")->capture_default_str();
  sub->add_option("--max-mib", config->max_mib, "largest buffer, MiB (sizes double)")
      ->capture_default_str();
  sub->add_option("--segment-kib", config->segment_kib,
                  "ring segment size, KiB (GroupOptions::ring_segment_bytes; 0 = default)")
      ->capture_default_str();
  sub->add_flag("--json", config->json, "one JSON object per line instead of a table");
  sub->callback([config] { run_comm(*config); });
}

}  // namespace fsdp::bench::comm_suite
