#pragma once
// fsdp-run as a child process, launching tests/programs/launcher_probe
// workers: the launcher's tests (test_launcher*.cpp) share these.
// Header-only, because the paths come from FSDP_BIN_DIR, which tests/
// CMakeLists.txt defines for test programs.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "harness/child_process.h"

namespace fsdp::testing {

inline const std::string kLauncher = FSDP_BIN_DIR "/fsdp-run";
inline const std::string kProbe = FSDP_BIN_DIR "/launcher_probe";

// Every wait on the launcher is an upper bound on a path that should end
// long before it; none of them measures speed.
constexpr std::chrono::seconds kJobLimit{60};
constexpr std::chrono::seconds kStopLimit{10};

// A running fsdp-run whose stdout and stderr go to files in `dir`.
class Launch : public ChildProcess {
 public:
  Launch(const TempDir& dir, const std::vector<std::string>& args,
         const std::vector<std::string>& extra_env = {})
      : ChildProcess(dir, kLauncher, args, extra_env) {}
  ChildResult wait(std::chrono::milliseconds limit = kJobLimit) { return ChildProcess::wait(limit); }
};

inline ChildResult run_launcher(const std::vector<std::string>& args,
                                const std::vector<std::string>& extra_env = {}) {
  TempDir dir("fsdp-launcher");
  Launch launch(dir, args, extra_env);
  return launch.wait();
}

}  // namespace fsdp::testing
