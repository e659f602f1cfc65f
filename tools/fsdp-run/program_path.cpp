// PATH lookup. We resolve once in the launcher and exec that exact path in
// every worker: all ranks then run the same binary, and a missing program is
// reported before any worker starts.

#include "program_path.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace fsdp_run {
namespace {

enum class Check { kRunnable, kMissing, kNotRunnable };

Check check_candidate(const std::string& path, std::string& why) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    why = std::strerror(errno);
    return errno == ENOENT || errno == ENOTDIR ? Check::kMissing : Check::kNotRunnable;
  }
  if (S_ISDIR(st.st_mode)) {
    why = "it is a directory";
    return Check::kNotRunnable;
  }
  if (access(path.c_str(), X_OK) != 0) {
    why = fmt::format("{} (is it marked executable? chmod +x)", std::strerror(errno));
    return Check::kNotRunnable;
  }
  return Check::kRunnable;
}

}  // namespace

ResolvedProgram resolve_program(const std::string& name) {
  ResolvedProgram result;
  std::string why;
  if (name.find('/') != std::string::npos) {
    switch (check_candidate(name, why)) {
      case Check::kRunnable:
        result.path = name;
        return result;
      case Check::kMissing:
        result.error = fmt::format("program '{}' not found: {}", name, why);
        result.exit_code = 127;
        return result;
      case Check::kNotRunnable:
        result.error = fmt::format("program '{}' cannot be run: {}", name, why);
        result.exit_code = 126;
        return result;
    }
  }

  const char* env_path = std::getenv("PATH");
  std::string search = env_path != nullptr ? env_path : "/usr/local/bin:/usr/bin:/bin";
  std::string first_unrunnable;  // like execvp: report EACCES only if nothing runs
  std::string first_unrunnable_why;
  size_t start = 0;
  while (true) {
    size_t end = search.find(':', start);
    std::string dir = search.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string candidate = dir.empty() ? name : dir + "/" + name;
    switch (check_candidate(candidate, why)) {
      case Check::kRunnable:
        // Keep "./name" for an empty PATH entry so exec does not search again.
        result.path = dir.empty() ? "./" + name : candidate;
        return result;
      case Check::kNotRunnable:
        if (first_unrunnable.empty()) {
          first_unrunnable = candidate;
          first_unrunnable_why = why;
        }
        break;
      case Check::kMissing:
        break;
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (!first_unrunnable.empty()) {
    result.error = fmt::format("program '{}' found as '{}' but cannot be run: {}", name,
                               first_unrunnable, first_unrunnable_why);
    result.exit_code = 126;
  } else {
    result.error = fmt::format(
        "program '{}' not found in PATH; give a path such as ./{} or add its directory to PATH",
        name, name);
    result.exit_code = 127;
  }
  return result;
}

}  // namespace fsdp_run
