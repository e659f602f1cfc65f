#include "restart_env.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fsdp_train {
namespace {

std::optional<double> number_in(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (*end != '\0') return std::nullopt;
  return value;
}

}  // namespace

RestartEnv read_restart_env() {
  RestartEnv env;
  if (const auto count = number_in("TORCHELASTIC_RESTART_COUNT"); count && *count >= 0) {
    env.restart_count = static_cast<int>(*count);
  }
  env.failure_time = number_in("FSDP_RUN_FAILURE_TIME");
  if (const char* file = std::getenv("FSDP_RUN_PROGRESS_FILE")) env.progress_file = file;
  return env;
}

double epoch_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void write_progress(const std::string& path, int64_t last_completed_step) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "w");
  if (file == nullptr) return;
  const bool written =
      std::fprintf(file, "%lld\n", static_cast<long long>(last_completed_step)) > 0;
  if (std::fclose(file) == 0 && written) std::rename(tmp.c_str(), path.c_str());
}

}  // namespace fsdp_train
