#include "slowlink_testbed.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "fsdp/file_tree.h"

namespace fsdp::bench {
namespace {

namespace fs = std::filesystem;

std::string find_tool(const std::string& name) {
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin"}) {
    const fs::path candidate = fs::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// fork + exec with stdout and stderr in `log`; returns the pid.
pid_t spawn(const std::vector<std::string>& command, const fs::path& log) {
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, STDIN_FILENO);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  return pid;
}

}  // namespace

std::vector<ProcessOutcome> run_processes(const std::vector<std::vector<std::string>>& commands,
                                          std::chrono::seconds limit) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("fsdp_slowlink_{}", ::getpid());
  fs::create_directories(dir);
  std::vector<pid_t> pids;
  for (size_t i = 0; i < commands.size(); ++i) pids.push_back(spawn(commands[i], dir / fmt::format("{}.log", i)));
  std::vector<ProcessOutcome> outcomes(commands.size());
  std::vector<bool> done(commands.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t running = commands.size();
  while (running > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (done[i] || ::waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --running;
      outcomes[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        ::kill(-pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        done[i] = true;
        --running;
        outcomes[i].exit_code = -1;
        outcomes[i].log = fmt::format("[killed after {} s]\n", limit.count());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    ::kill(-pids[i], SIGKILL);  // anything its launcher left behind
    outcomes[i].log += read_all(dir / fmt::format("{}.log", i));
  }
  fsdp::remove_tree(dir);
  return outcomes;
}

std::string slowlink_unavailable_reason() {
  if (::geteuid() != 0) {
    return "fsdp-bench slowlink needs root: it creates network namespaces and shapes a veth "
           "pair with tc; run it as root (sudo build/bin/fsdp-bench slowlink)";
  }
  if (find_tool("ip").empty() || find_tool("tc").empty()) {
    return "fsdp-bench slowlink needs iproute2's `ip` and `tc`; install the iproute2 package "
           "(scripts/install-deps.sh does)";
  }
  return "";
}

SlowLinkTestbed::SlowLinkTestbed(const std::string& rate)
    : ip_(find_tool("ip")), tc_(find_tool("tc")), rate_(rate) {
  const std::string id = std::to_string(::getpid());
  for (int n = 0; n < 2; ++n) {
    names_[n] = fmt::format("fsdp_sl{}_{}", id, n);
    links_[n] = fmt::format("fsl{}{}", id, n == 0 ? 'a' : 'b');  // at most 15 characters
  }
  try {
    for (int n = 0; n < 2; ++n) {
      run_or_throw({ip_, "netns", "add", names_[n]});
      created_[n] = true;
    }
    run_or_throw({ip_, "link", "add", links_[0], "netns", names_[0], "type", "veth", "peer",
                  "name", links_[1], "netns", names_[1]});
    for (int n = 0; n < 2; ++n) {
      run_or_throw({ip_, "-n", names_[n], "addr", "add", std::string(kAddress[n]) + "/24", "dev", links_[n]});
      run_or_throw({ip_, "-n", names_[n], "link", "set", "lo", "up"});
      run_or_throw({ip_, "-n", names_[n], "link", "set", links_[n], "up"});
      run_or_throw({ip_, "netns", "exec", names_[n], tc_, "qdisc", "add", "dev", links_[n], "root",
                    "tbf", "rate", rate_, "burst", "64kb", "latency", "500ms"});
    }
  } catch (...) {
    remove();
    throw;
  }
}

SlowLinkTestbed::~SlowLinkTestbed() { remove(); }

std::vector<std::string> SlowLinkTestbed::on_node(int n, const std::vector<std::string>& argv) const {
  std::vector<std::string> command = {ip_, "netns", "exec", names_[n]};
  command.insert(command.end(), argv.begin(), argv.end());
  return command;
}

int64_t SlowLinkTestbed::bytes_sent(int n) const {
  const auto outcome = run_processes(
      {on_node(n, {"/bin/cat", fmt::format("/sys/class/net/{}/statistics/tx_bytes", links_[n])})},
      std::chrono::seconds(10));
  if (outcome[0].exit_code != 0) {
    throw std::runtime_error(fmt::format("reading node {}'s tx_bytes failed:\n{}", n, outcome[0].log));
  }
  return std::stoll(outcome[0].log);
}

void SlowLinkTestbed::run_or_throw(const std::vector<std::string>& argv) const {
  const auto outcome = run_processes({argv}, std::chrono::seconds(10));
  if (outcome[0].exit_code != 0) {
    std::string command;
    for (const auto& a : argv) command += " " + a;
    throw std::runtime_error(fmt::format("building the slow-link testbed failed (it needs root, "
                                         "or CAP_NET_ADMIN and CAP_SYS_ADMIN):\n${}\n{}",
                                         command, outcome[0].log));
  }
}

void SlowLinkTestbed::remove() {
  for (int n = 1; n >= 0; --n) {
    if (!created_[n]) continue;
    run_processes({{ip_, "netns", "del", names_[n]}}, std::chrono::seconds(10));
    created_[n] = false;
  }
}

}  // namespace fsdp::bench
