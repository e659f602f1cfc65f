#include "harness/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "harness/spawn.h"

namespace fsdp::testing {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

bool process_alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool ChildResult::exited_with(int code) const {
  return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

bool ChildResult::killed_by(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }

std::string ChildResult::describe() const {
  const std::string how = !finished           ? "did not finish in time"
                          : WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                              : "signal " + std::to_string(WTERMSIG(status));
  return how + "\n--- stdout ---\n" + out + "--- stderr ---\n" + err;
}

ChildProcess::ChildProcess(const TempDir& dir, const std::string& program,
                           const std::vector<std::string>& args,
                           const std::vector<std::string>& extra_env)
    : out_path_(dir / "child.out"), err_path_(dir / "child.err") {
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  const ScopedFd out(open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  const ScopedFd err(open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (out.get() < 0 || err.get() < 0) {
    throw std::runtime_error("ChildProcess: cannot create " + out_path_ + " or " + err_path_);
  }
  SpawnOptions options;
  options.stdout_fd = out.get();
  options.stderr_fd = err.get();
  pid_ = spawn_process(std::move(argv), environment_with(extra_env), options);
}

ChildProcess::~ChildProcess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

ChildResult ChildProcess::wait(std::chrono::milliseconds limit) {
  ChildResult r;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    if (waitpid(pid_, &r.status, WNOHANG) == pid_) {
      r.finished = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &r.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  reaped_ = true;
  r.out = read_file(out_path_);
  r.err = read_file(err_path_);
  return r;
}

}  // namespace fsdp::testing
