#include "harness/multiprocess.h"

#include <arpa/inet.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "harness/spawn.h"

namespace fsdp::testing {
namespace {

struct Child {
  pid_t pid = -1;
  int output_fd = -1;  // read end of the child's stdout+stderr pipe; -1 at EOF
};

// A socket bound to 127.0.0.1:`port` (0: any free port), or -1 with errno set.
int bind_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  TORCH_CHECK(fd >= 0, "free_tcp_port: socket() failed: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  const int err = errno;
  ::close(fd);
  errno = err;
  return -1;
}

int bound_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  TORCH_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0,
              "free_tcp_port: getsockname() failed: ", std::strerror(errno));
  return ntohs(addr.sin_port);
}

}  // namespace

int free_tcp_port() { return free_tcp_ports(1); }

// Binds a free port P, then P+1 .. P+count-1 beside it, all at once; tries
// other P while any of them is taken.
int free_tcp_ports(int count) {
  TORCH_CHECK(count >= 1, "free_tcp_ports: count must be >= 1, got ", count);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int first_fd = bind_loopback(0);
    TORCH_CHECK(first_fd >= 0, "free_tcp_port: cannot bind 127.0.0.1:0: ", std::strerror(errno));
    const int first = bound_port(first_fd);
    std::vector<int> fds{first_fd};
    for (int i = 1; i < count && first + i <= 65535; ++i) {
      const int fd = bind_loopback(first + i);
      if (fd < 0) break;
      fds.push_back(fd);
    }
    const bool all_free = static_cast<int>(fds.size()) == count;
    for (int fd : fds) ::close(fd);
    if (all_free) return first;
  }
  TORCH_CHECK(false, "free_tcp_ports: found no ", count,
              " consecutive free ports on 127.0.0.1 in 100 tries");
}

std::vector<ProcessResult> run_processes(const std::string& program,
                                         const std::vector<std::string>& args, int world_size,
                                         std::chrono::milliseconds timeout,
                                         const std::map<std::string, std::string>& extra_env) {
  TORCH_CHECK(world_size >= 1, "run_processes: world_size must be >= 1, got ", world_size);
  const std::string port = std::to_string(free_tcp_port());
  std::vector<std::string> argv{program};
  argv.insert(argv.end(), args.begin(), args.end());

  std::vector<Child> children(world_size);
  std::vector<ProcessResult> results(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    auto overrides = extra_env;
    overrides["RANK"] = overrides["LOCAL_RANK"] = std::to_string(rank);
    overrides["WORLD_SIZE"] = overrides["LOCAL_WORLD_SIZE"] = std::to_string(world_size);
    overrides["MASTER_ADDR"] = "127.0.0.1";
    overrides["MASTER_PORT"] = port;
    std::vector<std::string> env;
    for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);

    int pipe_fds[2];
    TORCH_CHECK(::pipe2(pipe_fds, O_CLOEXEC) == 0, "run_processes: pipe failed: ",
                std::strerror(errno));
    SpawnOptions options;
    options.stdout_fd = options.stderr_fd = pipe_fds[1];
    const pid_t pid = spawn_process(argv, environment_with(env), options);
    ::close(pipe_fds[1]);
    children[rank].pid = pid;
    children[rank].output_fd = pipe_fds[0];
    results[rank].rank = rank;
  }

  // Drain every child's output until all pipes close; kill all at the deadline.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool killed = false;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> owners;
    for (int r = 0; r < world_size; ++r) {
      if (children[r].output_fd >= 0) {
        fds.push_back({children[r].output_fd, POLLIN, 0});
        owners.push_back(r);
      }
    }
    if (fds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      for (auto& c : children) ::kill(c.pid, SIGKILL);
      killed = true;
    }
    const int wait_ms = killed ? 1000 : static_cast<int>(std::min<int64_t>(left.count(), 1000));
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        results[owners[i]].output.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fds[i].fd);
        children[owners[i]].output_fd = -1;
      }
    }
  }
  // A child may close its output and still run: reap it, or kill it at the deadline.
  for (int r = 0; r < world_size; ++r) {
    int status = 0;
    for (;;) {
      const pid_t done = ::waitpid(children[r].pid, &status, WNOHANG);
      if (done == children[r].pid || (done < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(children[r].pid, SIGKILL);
        while (::waitpid(children[r].pid, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      ::usleep(10000);
    }
    results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    results[r].term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  return results;
}

}  // namespace fsdp::testing
