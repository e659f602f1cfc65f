#pragma once
// One program run as a child process, for tests of the command-line tools:
// its stdout and stderr go to files in a TempDir, waiting for it has an
// upper bound (past it the child is SIGKILLed), and it never outlives the
// object. Plus the small helpers such tests share.
//
//   fsdp::testing::TempDir dir;
//   fsdp::testing::ChildProcess run(dir, FSDP_BIN_DIR "/fsdp-run", {"--help"});
//   fsdp::testing::ChildResult r = run.wait(std::chrono::seconds(60));
//   EXPECT_TRUE(r.exited_with(0)) << r.describe();

#include <sys/types.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/temp_dir.h"

namespace fsdp::testing {

std::string read_file(const std::string& path);  // "" if unreadable
bool file_exists(const std::string& path);
// A live process, not a zombie waiting for a parent that does not reap it.
bool process_alive(pid_t pid);
std::vector<std::string> lines_of(const std::string& text);
bool contains(const std::string& haystack, const std::string& needle);

// Waits until `done()` or the limit, polling every 10 ms; returns done().
template <typename Pred>
bool wait_until(Pred done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

struct ChildResult {
  int status = -1;  // as from waitpid
  std::string out, err;
  bool finished = false;  // false: it was killed at the limit

  bool exited_with(int code) const;
  bool killed_by(int sig) const;
  // How it ended, then its stdout and stderr: for failure messages.
  std::string describe() const;
};

class ChildProcess {
 public:
  // Starts `program` with `args`, in this process's environment with
  // `extra_env` entries ("NAME=value") replacing same-named ones; stdout and
  // stderr go to `dir`/child.out and `dir`/child.err.
  ChildProcess(const TempDir& dir, const std::string& program, const std::vector<std::string>& args,
               const std::vector<std::string>& extra_env = {});
  ~ChildProcess();  // SIGKILLs and reaps the child unless wait() did
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for the child to exit (SIGKILLing it past `limit`) and collects
  // its output.
  ChildResult wait(std::chrono::milliseconds limit);

 private:
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

}  // namespace fsdp::testing
