#include "progress.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>

#include "text_format.h"

namespace fsdp_train {
namespace {

std::string compact_bytes(int64_t bytes) {
  const double v = static_cast<double>(bytes);
  if (v >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f}G", v / (1024.0 * 1024 * 1024));
  if (v >= 1024.0 * 1024) return fmt::format("{:.1f}M", v / (1024.0 * 1024));
  if (v >= 1024.0) return fmt::format("{:.0f}K", v / 1024.0);
  return fmt::format("{}B", bytes);
}

}  // namespace

std::string per_rank_bytes(const std::vector<int64_t>& bytes) {
  if (bytes.empty()) return "?";
  if (bytes.size() <= 4) {
    std::vector<std::string> parts;
    for (int64_t b : bytes) parts.push_back(compact_bytes(b));
    return fmt::format("{}", fmt::join(parts, "|"));
  }
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  return fmt::format("min {} max {}", compact_bytes(*lo), compact_bytes(*hi));
}

void Progress::step(const StepRecord& r, double eta_s, bool last) {
  if (!config_.enabled) return;
  const bool first = !printed_any_;
  const bool due = config_.terminal || last || first || config_.log_every <= 1 ||
                   r.step % config_.log_every == 0;
  if (!due) return;
  const int width = static_cast<int>(fmt::format("{}", config_.total_steps).size());
  std::string line = fmt::format(
      "step {:>{}}/{}  loss {:.4f}  lr {:.1e}  {} tok/s  ETA {}  shard/rank {}  peak gathered {}",
      r.step, width, config_.total_steps, r.loss, r.lr, human_count(r.tokens_per_s),
      last ? "0s" : human_duration(eta_s), per_rank_bytes(r.sharded_param_bytes),
      per_rank_bytes(r.peak_gathered_param_bytes));
  if (!r.peak_device_allocated_bytes.empty()) {
    line += fmt::format("  cuda peak {} (reserved {})",
                        per_rank_bytes(r.peak_device_allocated_bytes),
                        per_rank_bytes(r.peak_device_reserved_bytes));
  }
  if (config_.restarts) line += "  restarts " + config_.restarts->summary();
  printed_any_ = true;
  if (config_.terminal) {
    std::printf("\r%s\x1b[K", line.c_str());
    line_open_ = true;
  } else {
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

void Progress::note(const std::string& line) {
  if (!config_.enabled) return;
  if (line_open_) {
    std::printf("\r\x1b[K%s\n", line.c_str());
    line_open_ = false;
  } else {
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

void Progress::finish() {
  if (line_open_) {
    std::printf("\n");
    std::fflush(stdout);
    line_open_ = false;
  }
}

}  // namespace fsdp_train
