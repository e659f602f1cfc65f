#include "text_format.h"

#include <fmt/format.h>

#include <cmath>

namespace fsdp_train {

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::fabs(value) >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format(value < 10 ? "{:.2f} {}" : "{:.1f} {}", value, units[unit]);
}

std::string human_count(double value) {
  if (value >= 1e9) return fmt::format("{:.2f}G", value / 1e9);
  if (value >= 1e6) return fmt::format("{:.2f}M", value / 1e6);
  if (value >= 1e3) return fmt::format("{:.1f}k", value / 1e3);
  return fmt::format("{:.0f}", value);
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const auto total = static_cast<int64_t>(std::llround(seconds));
  if (total < 3600) return fmt::format("{}m{:02d}s", total / 60, total % 60);
  return fmt::format("{}h{:02d}m", total / 3600, (total % 3600) / 60);
}

}  // namespace fsdp_train
