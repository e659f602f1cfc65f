// fsdp-bench slowlink: compressed communication where it is meant to pay, on
// a slow link between two nodes. Two network namespaces, two ranks in each,
// joined by a rate-limited veth pair (slowlink_testbed.h): a 2-node x 2-rank
// fsdp-train job whose inter-node bandwidth this suite chooses.
//
// For each link rate, and with plain kFullShard (every ring crosses the
// link) and with hybrid sharding (only the gradient all-reduce crosses it),
// it trains the same GPT with fp32, bf16 and int8 communication and prints
// the median step time, the bytes that crossed the link per step (the veth
// ends' tx_bytes, setup included, divided by the steps), and both as ratios
// to the uncompressed run at the same rate. Settings alternate within each
// round, so a drift of the machine's speed hits them alike.
//
//   sudo fsdp-bench slowlink [--rates 1gbit,200mbit] [--layers 4 --width 256] [--json]

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "bench_util.h"
#include "fsdp/file_tree.h"
#include "slowlink_testbed.h"
#include "suites.h"

namespace fsdp::bench::slowlink_suite {
namespace {

namespace fs = std::filesystem;

struct SlowlinkConfig {
  std::vector<std::string> rates = {"1gbit", "200mbit"};
  int64_t layers = 4, width = 256, heads = 4, context = 64, batch = 8;
  int64_t steps = 6;
  int rounds = 1;
  bool json = false;
};

struct Setting {
  std::string name;
  std::string strategy;  // fsdp-train's --strategy
  std::string format;    // none | bf16 | int8
};

// Hybrid compresses only what crosses the link: the replicas' all-reduce.
std::vector<std::string> compression_flags(const Setting& s) {
  if (s.format == "none") return {};
  if (s.strategy == "hybrid") return {"--compress-scope", "inter-node", "--compress-grads", s.format};
  return {"--compress-weights", s.format, "--compress-grads", s.format};
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = {
      {"full, fp32", "full", "none"},     {"full, bf16", "full", "bf16"},
      {"full, int8", "full", "int8"},     {"hybrid, fp32", "hybrid", "none"},
      {"hybrid, bf16", "hybrid", "bf16"}, {"hybrid, int8", "hybrid", "int8"}};
  return all;
}

struct Measured {
  std::vector<double> step_ms;     // steps 2.. of every round
  std::vector<double> link_bytes;  // per step, each round
  double final_loss = 0;
};

fs::path bin_dir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

std::vector<std::string> trainer_argv(const SlowlinkConfig& c, const Setting& s, const fs::path& run_dir) {
  std::vector<std::string> argv = {
      (bin_dir() / "fsdp-train").string(), "--layers", std::to_string(c.layers), "--width",
      std::to_string(c.width), "--heads", std::to_string(c.heads), "--context",
      std::to_string(c.context), "--batch", std::to_string(c.batch), "--steps",
      std::to_string(c.steps), "--strategy", s.strategy, "--eval-every", "0", "--sample-bytes",
      "0", "--warmup", "1", "--quiet", "--run-dir", run_dir.string()};
  for (const auto& f : compression_flags(s)) argv.push_back(f);
  return argv;
}

// Per-step times and the last loss from a run's metrics.jsonl.
void read_metrics(const fs::path& file, Measured& m) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    rapidjson::Document j;
    j.Parse(line.c_str());
    if (j.HasParseError() || !j.IsObject() || !j.HasMember("step")) continue;
    if (j["step"].GetInt64() >= 2) m.step_ms.push_back(j["ms"].GetDouble());
    m.final_loss = j["loss"].GetDouble();
  }
}

void run_setting(const SlowlinkConfig& c, const SlowLinkTestbed& bed, const Setting& s, int port,
                 Measured& m) {
  const fs::path run_dir = fs::temp_directory_path() / fmt::format("fsdp_slowlink_run_{}", ::getpid());
  fsdp::remove_tree_or_throw(run_dir.string());
  std::vector<std::vector<std::string>> nodes;
  for (int n = 0; n < 2; ++n) {
    std::vector<std::string> argv = {(bin_dir() / "fsdp-run").string(), "--nnodes", "2", "--node-rank",
                                     std::to_string(n), "--nproc-per-node", "2", "--master-addr",
                                     SlowLinkTestbed::kAddress[0], "--master-port",
                                     std::to_string(port), "--"};
    for (const auto& a : trainer_argv(c, s, run_dir)) argv.push_back(a);
    nodes.push_back(bed.on_node(n, argv));
  }
  const int64_t before = bed.bytes_sent(0) + bed.bytes_sent(1);
  const auto outcomes = run_processes(nodes, std::chrono::seconds(900));
  for (int n = 0; n < 2; ++n) {
    if (outcomes[n].exit_code != 0) {
      throw std::runtime_error(fmt::format("{} at {}: node {} failed (exit {}):\n{}", s.name, bed.rate(), n,
                                           outcomes[n].exit_code, outcomes[n].log));
    }
  }
  m.link_bytes.push_back(static_cast<double>(bed.bytes_sent(0) + bed.bytes_sent(1) - before) / c.steps);
  read_metrics(run_dir / "metrics.jsonl", m);
  fsdp::remove_tree_or_throw(run_dir.string());
}

double median(std::vector<double> v) { return summarize(std::move(v)).median_ms; }

void report(const SlowlinkConfig& c, const std::string& rate, const std::vector<Measured>& runs) {
  if (c.json) {
    for (size_t i = 0; i < runs.size(); ++i) {
      const size_t base = settings()[i].strategy == "full" ? 0 : 3;
      print_json_line({{"suite", "slowlink"}, {"rate", rate}, {"setting", settings()[i].name},
                       {"step_ms", median(runs[i].step_ms)},
                       {"step_ratio", median(runs[i].step_ms) / median(runs[base].step_ms)},
                       {"link_bytes_per_step", median(runs[i].link_bytes)},
                       {"link_ratio", median(runs[i].link_bytes) / median(runs[base].link_bytes)},
                       {"speedup", median(runs[base].step_ms) / median(runs[i].step_ms)},
                       {"final_loss", runs[i].final_loss}});
    }
    return;
  }
  std::printf("\nlink %s each way\n", rate.c_str());
  Table table({"setting", "step ms", "vs fp32", "speedup", "link MB/step", "vs fp32", "final loss"});
  for (size_t i = 0; i < runs.size(); ++i) {
    const size_t base = settings()[i].strategy == "full" ? 0 : 3;
    const double ms = median(runs[i].step_ms), base_ms = median(runs[base].step_ms);
    const double mb = median(runs[i].link_bytes) / 1e6, base_mb = median(runs[base].link_bytes) / 1e6;
    table.add_row({settings()[i].name, fmt::format("{:.0f}", ms), fmt::format("{:.3f}", ms / base_ms),
                   fmt::format("{:.2f}x", base_ms / ms), fmt::format("{:.2f}", mb),
                   fmt::format("{:.3f}", mb / base_mb), fmt::format("{:.4f}", runs[i].final_loss)});
  }
  table.print();
}

void run_slowlink(const SlowlinkConfig& c) {
  const std::string why_not = slowlink_unavailable_reason();
  if (!why_not.empty()) throw std::runtime_error(why_not);
  if (!c.json) {
    std::printf("fsdp-bench slowlink: GPT %ld x %ld, context %ld, batch %ld; 2 nodes x 2 ranks; "
                "%ld steps, median of steps 2-%ld, %d round%s\n",
                static_cast<long>(c.layers), static_cast<long>(c.width), static_cast<long>(c.context),
                static_cast<long>(c.batch), static_cast<long>(c.steps), static_cast<long>(c.steps), c.rounds,
                c.rounds == 1 ? "" : "s");
    std::printf("machine: %s; link: a veth pair shaped with tc tbf\n", machine_line("gloo").c_str());
    std::fflush(stdout);  // before the progress lines on stderr
  }
  int port = 29600;
  for (const std::string& rate : c.rates) {
    SlowLinkTestbed bed(rate);
    std::vector<Measured> runs(settings().size());
    for (int round = 0; round < c.rounds; ++round) {
      for (size_t i = 0; i < settings().size(); ++i) {
        if (!c.json) std::fprintf(stderr, "  %s, round %d: %s\n", rate.c_str(), round + 1, settings()[i].name.c_str());
        run_setting(c, bed, settings()[i], port++, runs[i]);
      }
    }
    report(c, rate, runs);
  }
  if (!c.json) {
    std::printf("\nlink bytes: both veth ends' tx_bytes over the run (setup included) / steps; "
                "speedup: the fp32 run's step time / this one's\n");
  }
}

}  // namespace

void register_suite(CLI::App& app) {
  auto config = std::make_shared<SlowlinkConfig>();
  CLI::App* sub = app.add_subcommand(
      "slowlink", "(root) fp32, bf16 and int8 communication on 2 nodes x 2 ranks joined by a rate-limited link");
  sub->add_option("--rates", config->rates, "link rates in tc's syntax, each way")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--layers", config->layers, "GPT blocks")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--width", config->width, "GPT width")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--heads", config->heads, "attention heads")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--context", config->context, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--batch", config->batch, "sequences per step, all ranks")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--steps", config->steps, "steps per run (the first is not timed)")
      ->capture_default_str()
      ->check(CLI::Range(2, 100000));
  sub->add_option("--rounds", config->rounds, "runs of every setting, alternating")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--json", config->json, "one JSON object per setting and rate");
  sub->callback([config] { run_slowlink(*config); });
}

}  // namespace fsdp::bench::slowlink_suite
