#pragma once
// Shared by every suite: statistics over repetitions, the machine line,
// aligned tables, and JSON lines.

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace fsdp::bench {

struct Stats {
  double min_ms = 0;
  double median_ms = 0;
};

inline Stats summarize(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.min_ms = ms.front();
  const size_t mid = ms.size() / 2;
  s.median_ms = ms.size() % 2 ? ms[mid] : (ms[mid - 1] + ms[mid]) / 2;
  return s;
}

inline double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// "2 cores, LibTorch 1.13.1, backend gloo"
inline std::string machine_line(const std::string& backend) {
  return fmt::format("{} cores, LibTorch {}, backend {}", std::thread::hardware_concurrency(),
                     TORCH_VERSION, backend);
}

// Threads per rank when `ranks` ranks share this machine's cores.
inline int threads_per_rank(int ranks) {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, ranks));
}

// A right-aligned text table; the first column is left-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::FILE* out = stdout) const {
    std::vector<size_t> width(headers_.size());
    for (size_t c = 0; c < headers_.size(); ++c) {
      width[c] = headers_[c].size();
      for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
      std::string s;
      for (size_t c = 0; c < cells.size(); ++c) {
        s += c == 0 ? fmt::format("{:<{}}", cells[c], width[c])
                    : fmt::format("  {:>{}}", cells[c], width[c]);
      }
      std::fprintf(out, "%s\n", s.c_str());
    };
    line(headers_);
    size_t total = 0;
    for (size_t w : width) total += w + 2;
    std::fprintf(out, "%s\n", std::string(total - 2, '-').c_str());
    for (const auto& r : rows_) line(r);
  }

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// One JSON object per line on stdout, for --json.
inline void print_json_line(const nlohmann::json& j) { std::printf("%s\n", j.dump().c_str()); }

}  // namespace fsdp::bench
