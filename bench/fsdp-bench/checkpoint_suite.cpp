// fsdp-bench checkpoint: save and load throughput of a sharded checkpoint
// (fsdp::ckpt::save_training_state / load_training_state) on N in-process
// ranks, next to the disk's raw sequential write speed measured in the same
// run on the same filesystem (one file of the model's size, written in 8 MiB
// chunks and fsynced).
//
// Throughput counts the model's bytes: aggregate = model bytes / slowest
// rank's time; per rank = (model bytes / N) / that time. Each save is
// complete and durable when timed (the library fsyncs every file and the
// index). Before each load the checkpoint's pages are dropped from the page
// cache (posix_fadvise DONTNEED after fsync), so loads read from the disk
// where the kernel honours it; a warm load is reported too.
//
// Each repetition also saves around the page cache
// (SaveOptions::bypass_page_cache, what AsyncSaver's background saves do),
// right after the ordinary save, and both saves' CPU time on the rank's
// thread is measured: the kernel's copy into the cache is CPU time that a
// background save takes from training.
//
//   fsdp-bench checkpoint [--world-size 2] [--d-model 1024 --n-layer 5] [--reps 3] [--json]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "bench_util.h"
#include "fsdp/checkpoint/training_state.h"
#include "fsdp/file_tree.h"
#include "fsdp/fsdp.h"
#include "fsdp/models/gpt.h"
#include "local_ranks.h"
#include "suites.h"

namespace fsdp::bench::checkpoint_suite {
namespace {

namespace fs = std::filesystem;

struct CheckpointConfig {
  int world_size = 2;
  int64_t d_model = 1024;  // 5 layers of d1024: about 63 M parameters, 253 MB fp32
  int64_t n_layer = 5;
  int64_t n_head = 8;
  int reps = 3;
  bool json = false;
};

models::GPTConfig gpt_config(const CheckpointConfig& c) {
  models::GPTConfig g;
  g.d_model = c.d_model;
  g.n_layer = c.n_layer;
  g.n_head = c.n_head;
  g.context = 128;
  g.shard_blocks = true;
  return g;
}

// Raw sequential write of `bytes` to a new file in `dir`, fsynced: ms.
double disk_write_ms(const fs::path& dir, int64_t bytes) {
  const fs::path path = dir / "raw_write.bin";
  const int64_t chunk = int64_t{8} << 20;
  std::vector<char> buffer(static_cast<size_t>(chunk), 'x');
  const auto start = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TORCH_CHECK(fd >= 0, "fsdp-bench checkpoint: cannot create ", path, ": ", std::strerror(errno));
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, buffer.data(), static_cast<size_t>(std::min(chunk, bytes - done)));
    TORCH_CHECK(n > 0, "fsdp-bench checkpoint: writing ", path, " failed: ", std::strerror(errno));
    done += n;
  }
  TORCH_CHECK(::fsync(fd) == 0, "fsdp-bench checkpoint: fsync ", path, ": ", std::strerror(errno));
  ::close(fd);
  const double ms = elapsed_ms(start);
  fs::remove(path);
  return ms;
}

// Asks the kernel to drop the (clean, fsynced) pages of every file under `dir`.
void drop_page_cache(const fs::path& dir) {
  for (const std::string& file : fsdp::regular_files_under(dir)) {
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// $TMPDIR (or /tmp)/fsdp_bench_ckpt_<pid>: the checkpoint and the raw write
// share one filesystem, so the ratio compares like with like.
fs::path bench_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return fs::path(tmp && *tmp ? tmp : "/tmp") / ("fsdp_bench_ckpt_" + std::to_string(::getpid()));
}

void print_intro(const CheckpointConfig& c, const models::GPTConfig& g, int64_t model_bytes,
                 const fs::path& dir) {
  std::FILE* info = c.json ? stderr : stdout;
  std::fprintf(info,
               "fsdp-bench checkpoint: GPT d%lld/%lld layers (%lld params, %.1f MB fp32), model "
               "only, %d ranks as threads, %d repetitions after one warm-up, in %s\nmachine: %s\n\n",
               static_cast<long long>(c.d_model), static_cast<long long>(c.n_layer),
               static_cast<long long>(g.num_params()), model_bytes / 1e6, c.world_size, c.reps,
               dir.c_str(), machine_line("gloo").c_str());
}

struct Timings {
  std::vector<double> save_ms, cold_load_ms, warm_load_ms;  // slowest rank, per repetition
  std::vector<double> direct_save_ms;                       // around the page cache
  std::vector<double> save_cpu_ms, direct_save_cpu_ms;      // the busiest rank thread's CPU time
  std::vector<double> disk_write_ms;  // one file of the model's size, per repetition
};

// CPU time of the calling thread (user and system), in ms.
double thread_cpu_ms() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// One save, timed on the wall (from a barrier) and on this thread's CPU.
std::pair<double, double> timed_save(ProcessGroup& group, const std::string& ckpt,
                                     const UnitModule& model, const ckpt::SaveOptions& options) {
  group.barrier()->wait();
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_ms();
  ckpt::save_training_state(group, ckpt, model, nullptr, options);
  return {elapsed_ms(start), thread_cpu_ms() - cpu_start};
}

// One rank's repetitions: save, drop the page cache, load cold, load warm.
// The first repetition is a warm-up and is not kept.
Timings time_rank(const CheckpointConfig& c, const models::GPTConfig& g, const std::string& ckpt,
                  int rank, const ProcessGroupPtr& group) {
  at::set_num_threads(threads_per_rank(c.world_size));
  at::manual_seed(0);
  models::GPT local(g);
  auto model = fully_shard(local, FullyShardOptions(group));
  ckpt::SaveOptions options;
  options.overwrite = true;
  ckpt::SaveOptions direct = options;
  direct.bypass_page_cache = true;
  Timings mine;
  for (int rep = 0; rep <= c.reps; ++rep) {  // rep 0 is the warm-up
    const auto [save, save_cpu] = timed_save(*group, ckpt, *model, options);
    const auto [direct_save, direct_save_cpu] = timed_save(*group, ckpt, *model, direct);
    group->barrier()->wait();
    if (rank == 0) drop_page_cache(ckpt);
    group->barrier()->wait();
    auto start = std::chrono::steady_clock::now();
    ckpt::load_training_state(*group, ckpt, *model, nullptr);
    const double cold = elapsed_ms(start);
    group->barrier()->wait();
    start = std::chrono::steady_clock::now();
    ckpt::load_training_state(*group, ckpt, *model, nullptr);
    const double warm = elapsed_ms(start);
    if (rep == 0) continue;
    mine.save_ms.push_back(save);
    mine.direct_save_ms.push_back(direct_save);
    mine.save_cpu_ms.push_back(save_cpu);
    mine.direct_save_cpu_ms.push_back(direct_save_cpu);
    mine.cold_load_ms.push_back(cold);
    mine.warm_load_ms.push_back(warm);
  }
  return mine;
}

// Saves and loads on c.world_size ranks; each repetition's time is the
// slowest rank's.
Timings time_checkpoint(const CheckpointConfig& c, const models::GPTConfig& g,
                        const std::string& ckpt) {
  std::vector<Timings> ranks(c.world_size);
  run_local_ranks(c.world_size, [&](int rank, ProcessGroupPtr group) {
    ranks[rank] = time_rank(c, g, ckpt, rank, group);
  });
  // Per repetition, the largest of the ranks' values of `series`.
  auto slowest = [&](std::vector<double> Timings::*series) {
    std::vector<double> out(static_cast<size_t>(c.reps), 0.0);
    for (const Timings& rank : ranks)
      for (size_t rep = 0; rep < out.size(); ++rep)
        out[rep] = std::max(out[rep], (rank.*series)[rep]);
    return out;
  };
  Timings t;
  t.save_ms = slowest(&Timings::save_ms);
  t.direct_save_ms = slowest(&Timings::direct_save_ms);
  t.save_cpu_ms = slowest(&Timings::save_cpu_ms);
  t.direct_save_cpu_ms = slowest(&Timings::direct_save_cpu_ms);
  t.cold_load_ms = slowest(&Timings::cold_load_ms);
  t.warm_load_ms = slowest(&Timings::warm_load_ms);
  return t;
}

struct CheckpointStats {
  Stats save, direct_save, save_cpu, direct_save_cpu, cold, warm, disk;
};

// Throughput of the model's bytes in `ms`.
double megabytes_per_s(int64_t model_bytes, double ms) {
  return ms > 0 ? model_bytes / 1e6 / (ms / 1e3) : 0.0;
}

void print_json(const CheckpointConfig& c, int64_t model_bytes, const CheckpointStats& s) {
  auto mbps = [&](double ms) { return megabytes_per_s(model_bytes, ms); };
  const int n = c.world_size;
  print_json_line({{"suite", "checkpoint"},
                   {"world_size", n},
                   {"model_bytes", model_bytes},
                   {"reps", c.reps},
                   {"save_MBps_per_rank", mbps(s.save.median_ms) / n},
                   {"save_MBps", mbps(s.save.median_ms)},
                   {"load_MBps_per_rank", mbps(s.cold.median_ms) / n},
                   {"load_MBps", mbps(s.cold.median_ms)},
                   {"warm_load_MBps", mbps(s.warm.median_ms)},
                   {"disk_write_MBps", mbps(s.disk.median_ms)},
                   {"save_ms_min", s.save.min_ms},
                   {"save_ms_median", s.save.median_ms},
                   {"direct_save_ms_median", s.direct_save.median_ms},
                   {"save_cpu_ms_median", s.save_cpu.median_ms},
                   {"direct_save_cpu_ms_median", s.direct_save_cpu.median_ms},
                   {"load_ms_min", s.cold.min_ms},
                   {"load_ms_median", s.cold.median_ms},
                   {"disk_write_ms_median", s.disk.median_ms}});
}

void print_table(const CheckpointConfig& c, int64_t model_bytes, const CheckpointStats& s) {
  auto mbps = [&](double ms) { return megabytes_per_s(model_bytes, ms); };
  const int n = c.world_size;
  Table table({"operation", "min ms", "median ms", "MB/s per rank", "MB/s aggregate", "/ disk write"});
  auto row = [&](const char* name, const Stats& op, bool per_rank) {
    table.add_row({name, fmt::format("{:.0f}", op.min_ms), fmt::format("{:.0f}", op.median_ms),
                   per_rank ? fmt::format("{:.0f}", mbps(op.median_ms) / n) : "-",
                   fmt::format("{:.0f}", mbps(op.median_ms)),
                   fmt::format("{:.2f}", mbps(op.median_ms) / mbps(s.disk.median_ms))});
  };
  row("save (write + fsync + commit)", s.save, true);
  row("save around the page cache", s.direct_save, true);
  row("load (page cache dropped)", s.cold, true);
  row("load (warm page cache)", s.warm, true);
  row("raw write + fsync, one file", s.disk, false);
  table.print();
  std::printf(
      "\nCPU time of a save on the busiest rank's thread: %.0f ms through the page cache, "
      "%.0f ms around it (%.2f)\n",
      s.save_cpu.median_ms, s.direct_save_cpu.median_ms,
      s.direct_save_cpu.median_ms / s.save_cpu.median_ms);
  std::printf("throughput counts the %.1f MB of parameters; medians of %d repetitions\n",
              model_bytes / 1e6, c.reps);
}

void run_checkpoint(const CheckpointConfig& c) {
  TORCH_CHECK(c.world_size >= 1, "--world-size must be >= 1, got ", c.world_size);
  TORCH_CHECK(c.reps >= 1, "--reps must be >= 1, got ", c.reps);
  const auto g = gpt_config(c);
  g.validate();
  const int64_t model_bytes = g.num_params() * static_cast<int64_t>(sizeof(float));
  const fs::path dir = bench_dir();
  fs::create_directories(dir);
  print_intro(c, g, model_bytes, dir);

  Timings t;
  try {
    t = time_checkpoint(c, g, (dir / "ckpt").string());
    for (int rep = 0; rep < c.reps; ++rep) t.disk_write_ms.push_back(disk_write_ms(dir, model_bytes));
  } catch (...) {
    fsdp::remove_tree(dir);
    throw;
  }
  fsdp::remove_tree(dir);

  const CheckpointStats stats{summarize(t.save_ms),      summarize(t.direct_save_ms),
                              summarize(t.save_cpu_ms),  summarize(t.direct_save_cpu_ms),
                              summarize(t.cold_load_ms), summarize(t.warm_load_ms),
                              summarize(t.disk_write_ms)};
  if (c.json) {
    print_json(c, model_bytes, stats);
  } else {
    print_table(c, model_bytes, stats);
  }
}

}  // namespace

void register_suite(CLI::App& app) {
  auto config = std::make_shared<CheckpointConfig>();
  CLI::App* sub = app.add_subcommand(
      "checkpoint", "sharded checkpoint save and load throughput vs the disk's raw write speed");
  sub->add_option("--world-size,-n", config->world_size, "ranks (threads)")->capture_default_str();
  sub->add_option("--d-model", config->d_model, "GPT width")->capture_default_str();
  sub->add_option("--n-layer", config->n_layer, "GPT blocks (one unit each)")->capture_default_str();
  sub->add_option("--n-head", config->n_head, "attention heads")->capture_default_str();
  sub->add_option("--reps", config->reps, "timed repetitions after one warm-up")->capture_default_str();
  sub->add_flag("--json", config->json, "one JSON object instead of a table");
  sub->callback([config] { run_checkpoint(*config); });
}

}  // namespace fsdp::bench::checkpoint_suite
