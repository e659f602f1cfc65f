// A worker for tests/test_launcher.cpp: it does what its flags say, in this
// order, so each test can script one behaviour of fsdp-run's workers. It uses
// no LibTorch on purpose (the launcher must work for any program).
//
//   --dir D            the directory shared by the test and every rank
//   --write-pid        write D/pid.<RANK> (our pid); tests also use it as "ready"
//   --trap             on SIGTERM/SIGINT: create D/term.<RANK> or D/int.<RANK>,
//                      wait for the --spawn-child child, exit 0
//   --ignore-term      ignore SIGTERM (only SIGKILL stops us)
//   --spawn-child      fork a child that sleeps; its pid goes to D/child.<RANK>;
//                      after --trap it marks D/childterm.<RANK> / D/childint.<RANK>
//   --wait-all N       wait (at most 30 s) until D/pid.0 .. D/pid.<N-1> exist
//   --print-env        stdout: "env RANK=.. WORLD_SIZE=.. ..."; stderr: "stderr-line rank=R"
//   --print-var NAME   stdout: "var NAME=<value, or unset>"
//   --print-data-limit stdout: "data-limit <RLIMIT_DATA in bytes, or unlimited>"
//   --lines N          N lines "line <RANK> <i>", each written in two pieces
//   --long-line N      one line of N 'x' bytes, then '\n', on stdout
//   --write-cr         "step 1\rstep 2\r\n" on stdout
//   --write-partial    "partial line from <RANK>" with no newline, on stdout
//   --exit-rank R C    if RANK == R: exit with code C
//   --sigkill-rank R   if RANK == R: SIGKILL ourselves
//   --sigstop-rank R   if RANK == R: SIGSTOP ourselves (until continued)
//   --sleep S          sleep S seconds, then exit 0

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace {

std::string g_dir;
std::string g_rank;

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

void write_file(const std::string& path, const std::string& text) {
  // Write then rename, so a reader never sees a half-written pid.
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    std::perror(tmp.c_str());
    std::exit(90);
  }
  std::fputs(text.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

void sleep_seconds(double seconds) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  while (nanosleep(&ts, &ts) != 0) {
  }
}

// Marker paths, built before the handler is installed (the handler itself
// only makes async-signal-safe calls).
char g_term_path[4096];
char g_int_path[4096];
pid_t g_child = -1;

extern "C" void on_stop_signal(int signo) {
  int fd = open(signo == SIGINT ? g_int_path : g_term_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) close(fd);
  // A worker that waits for its child shows the child got the signal too
  // (both are in the worker's process group).
  if (g_child > 0) waitpid(g_child, nullptr, 0);
  _exit(0);
}

void set_marker_paths(const char* who) {
  std::snprintf(g_term_path, sizeof(g_term_path), "%s/%sterm.%s", g_dir.c_str(), who,
                g_rank.c_str());
  std::snprintf(g_int_path, sizeof(g_int_path), "%s/%sint.%s", g_dir.c_str(), who,
                g_rank.c_str());
}

void write_line_in_two_pieces(const std::string& line) {
  size_t half = line.size() / 2;
  ssize_t a = write(STDOUT_FILENO, line.data(), half);
  ssize_t b = write(STDOUT_FILENO, line.data() + half, line.size() - half);
  (void)a;
  (void)b;
}

// --spawn-child. The child says when its own marker paths are set, so a
// signal can never find it still using ours. Returns false if it cannot
// (no pipe or no fork).
bool spawn_child() {
  int ready[2];
  if (pipe(ready) != 0) return false;
  const pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    g_child = -1;
    set_marker_paths("child");
    close(ready[0]);
    close(ready[1]);
    sleep_seconds(120);
    _exit(0);
  }
  close(ready[1]);
  char byte;
  while (read(ready[0], &byte, 1) < 0 && errno == EINTR) {
  }
  close(ready[0]);
  g_child = child;
  write_file(g_dir + "/child." + g_rank, std::to_string(child));
  return true;
}

// --wait-all N: at most 30 s.
void wait_for_all_pids(int n) {
  for (int tries = 0; tries < 3000; ++tries) {
    int present = 0;
    for (int r = 0; r < n; ++r) {
      struct stat st {};
      present += stat((g_dir + "/pid." + std::to_string(r)).c_str(), &st) == 0;
    }
    if (present == n) return;
    sleep_seconds(0.01);
  }
}

void print_env() {
  std::printf(
      "env RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s "
      "NODE_RANK=%s GROUP_WORLD_SIZE=%s MASTER_ADDR=%s MASTER_PORT=%s INHERIT=%s\n",
      g_rank.c_str(), env_or("WORLD_SIZE", "unset").c_str(),
      env_or("LOCAL_RANK", "unset").c_str(), env_or("LOCAL_WORLD_SIZE", "unset").c_str(),
      env_or("GROUP_RANK", "unset").c_str(), env_or("NODE_RANK", "unset").c_str(),
      env_or("GROUP_WORLD_SIZE", "unset").c_str(), env_or("MASTER_ADDR", "unset").c_str(),
      env_or("MASTER_PORT", "unset").c_str(), env_or("FSDP_PROBE_INHERIT", "unset").c_str());
  std::fprintf(stderr, "stderr-line rank=%s\n", g_rank.c_str());
}

void print_data_limit() {
  rlimit limit{};
  getrlimit(RLIMIT_DATA, &limit);
  if (limit.rlim_cur == RLIM_INFINITY) {
    std::printf("data-limit unlimited\n");
  } else {
    std::printf("data-limit %llu\n", static_cast<unsigned long long>(limit.rlim_cur));
  }
}

}  // namespace

int main(int argc, char** argv) {
  g_rank = env_or("RANK", "unset");
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  std::setvbuf(stderr, nullptr, _IONBF, 0);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "launcher_probe: %s needs a value\n", arg.c_str());
        std::exit(91);
      }
      return argv[++i];
    };
    if (arg == "--dir") {
      g_dir = next();
    } else if (arg == "--write-pid") {
      write_file(g_dir + "/pid." + g_rank, std::to_string(getpid()));
    } else if (arg == "--trap") {
      set_marker_paths("");
      signal(SIGTERM, on_stop_signal);
      signal(SIGINT, on_stop_signal);
    } else if (arg == "--ignore-term") {
      signal(SIGTERM, SIG_IGN);
    } else if (arg == "--spawn-child") {
      if (!spawn_child()) return 93;
    } else if (arg == "--wait-all") {
      wait_for_all_pids(std::atoi(next().c_str()));
    } else if (arg == "--print-env") {
      print_env();
    } else if (arg == "--print-var") {
      const std::string name = next();
      std::printf("var %s=%s\n", name.c_str(), env_or(name.c_str(), "unset").c_str());
    } else if (arg == "--print-data-limit") {
      print_data_limit();
    } else if (arg == "--lines") {
      int n = std::atoi(next().c_str());
      for (int k = 0; k < n; ++k) {
        write_line_in_two_pieces("line " + g_rank + " " + std::to_string(k) + "\n");
      }
    } else if (arg == "--long-line") {
      std::string line(static_cast<size_t>(std::atol(next().c_str())), 'x');
      std::fputs((line + "\n").c_str(), stdout);
    } else if (arg == "--write-cr") {
      std::fputs("step 1\rstep 2\r\n", stdout);
    } else if (arg == "--write-partial") {
      std::printf("partial line from %s", g_rank.c_str());
    } else if (arg == "--exit-rank") {
      std::string rank = next();
      int code = std::atoi(next().c_str());
      if (rank == g_rank) return code;
    } else if (arg == "--sigkill-rank") {
      if (next() == g_rank) raise(SIGKILL);
    } else if (arg == "--sigstop-rank") {
      if (next() == g_rank) raise(SIGSTOP);
    } else if (arg == "--sleep") {
      sleep_seconds(std::atof(next().c_str()));
    } else {
      std::fprintf(stderr, "launcher_probe: unknown flag '%s'\n", arg.c_str());
      return 92;
    }
  }
  return 0;
}
