#include "harness/spawn.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

extern char** environ;

namespace fsdp::testing {

std::vector<std::string> environment_with(
    const std::vector<std::string>& overrides,
    const std::function<bool(const std::string& name)>& drop) {
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  std::set<std::string> replaced;
  for (const auto& e : overrides) replaced.insert(name_of(e));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string name = name_of(*e);
    if (replaced.count(name) == 0 && !(drop && drop(name))) env.emplace_back(*e);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

bool is_launcher_variable(const std::string& name) {
  static const std::set<std::string> kNames = {
      "RANK",         "WORLD_SIZE",    "LOCAL_RANK",     "LOCAL_WORLD_SIZE", "MASTER_ADDR",
      "MASTER_PORT",  "GROUP_RANK",    "NODE_RANK",      "GROUP_WORLD_SIZE", "SLURM_PROCID",
      "SLURM_NTASKS", "SLURM_LOCALID", "OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME"};
  return kNames.count(name) > 0 || name.rfind("OMPI_", 0) == 0 || name.rfind("PMIX_", 0) == 0;
}

pid_t spawn_process(std::vector<std::string> argv, std::vector<std::string> env,
                    const SpawnOptions& options) {
  std::vector<char*> argv_ptrs, env_ptrs;
  for (auto& a : argv) argv_ptrs.push_back(a.data());
  argv_ptrs.push_back(nullptr);
  for (auto& e : env) env_ptrs.push_back(e.data());
  env_ptrs.push_back(nullptr);
  const std::string exec_failed = "[spawn_process: cannot execute " + argv.front() + "]\n";
  const pid_t pid = fork();
  if (pid == 0) {
    if (options.own_process_group) setpgid(0, 0);
    if (options.stdin_fd >= 0) dup2(options.stdin_fd, STDIN_FILENO);
    if (options.stdout_fd >= 0) dup2(options.stdout_fd, STDOUT_FILENO);
    if (options.stderr_fd >= 0) dup2(options.stderr_fd, STDERR_FILENO);
    execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
    (void)!write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    _exit(127);
  }
  if (pid < 0) {
    throw std::runtime_error("fork() failed for " + argv.front() + ": " + std::strerror(errno));
  }
  // Also here: the child may not have run yet when the caller signals the group.
  if (options.own_process_group) setpgid(pid, pid);
  return pid;
}

}  // namespace fsdp::testing
