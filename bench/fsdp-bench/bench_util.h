#pragma once
// Shared by every suite: statistics over repetitions, the machine line,
// aligned tables, and JSON lines.

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
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

// "2 cores, LibTorch 1.13.0, backend gloo". The version is the one the headers
// name: Debian 12's libtorch-dev 1.13.1 was built from headers that say 1.13.0.
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

// One value of a --json line, held as its JSON text. Written with RapidJSON,
// not the JSON library LibTorch 2.10+ carries: see [Note: no JSON symbols
// shared with LibTorch] in src/json/json_io.h.
class JsonValue {
 public:
  JsonValue(const std::string& s) : text_(write([&](auto& w) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); })) {}
  JsonValue(const char* s) : JsonValue(std::string(s)) {}
  JsonValue(bool b) : text_(b ? "true" : "false") {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  JsonValue(T v) : text_(std::to_string(v)) {}
  JsonValue(double v) : text_(std::isfinite(v) ? write([&](auto& w) { w.Double(v); }) : "null") {}
  // `json_text` must be one valid JSON value.
  static JsonValue raw(std::string json_text) {
    JsonValue v(false);
    v.text_ = std::move(json_text);
    return v;
  }
  const std::string& text() const { return text_; }

 private:
  template <class F>
  static std::string write(F&& f) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    f(writer);
    return std::string(buffer.GetString(), buffer.GetSize());
  }
  std::string text_;
};

using JsonObject = std::vector<std::pair<std::string, JsonValue>>;

// {"key": value, ...} in the given order.
inline std::string json_object_text(const JsonObject& fields) {
  std::string out = "{";
  for (const auto& [key, value] : fields) {
    if (out.size() > 1) out += ", ";
    out += JsonValue(key).text() + ": " + value.text();
  }
  return out + "}";
}

// [a, b, ...] of values' texts.
inline JsonValue json_array(const std::vector<JsonValue>& values) {
  std::string out = "[";
  for (const auto& v : values) out += (out.size() > 1 ? ", " : "") + v.text();
  return JsonValue::raw(out + "]");
}

// One JSON object per line on stdout, for --json.
inline void print_json_line(const JsonObject& fields) { std::printf("%s\n", json_object_text(fields).c_str()); }

}  // namespace fsdp::bench
