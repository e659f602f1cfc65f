#include "harness/trainer_runs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "harness/spawn.h"

namespace fsdp::testing {
namespace {

namespace fs = std::filesystem;

const std::string kTrainer = FSDP_BIN_DIR "/fsdp-train";
constexpr auto kRunLimit = kTrainerRunLimit;

}  // namespace

std::string test_corpus_path() { return FSDP_SOURCE_DIR "/tests/data/corpus.txt"; }

// A model small enough that a step takes milliseconds, on the test corpus.
std::vector<std::string> tiny(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--data",   test_corpus_path(),
                                   "--layers", "2",  "--width",   "32", "--heads",        "2",
                                   "--context", "32", "--batch",  "8",  "--eval-batches", "1",
                                   "--warmup", "2",  "--lr",      "1e-2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs fsdp-train with no launcher environment (one rank, standalone).
ProcessResult run_alone(const std::vector<std::string>& args) {
  std::vector<std::string> argv{kTrainer};
  argv.insert(argv.end(), args.begin(), args.end());
  // No launcher's variables: the run is standalone. One thread, as run_ranks.
  const auto env = environment_with({"OMP_NUM_THREADS=1"}, is_launcher_variable);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  SpawnOptions options;
  options.stdout_fd = options.stderr_fd = fds[1];
  const pid_t pid = spawn_process(argv, env, options);
  ::close(fds[1]);
  ProcessResult result{0, 0, 0, ""};
  const auto deadline = std::chrono::steady_clock::now() + kRunLimit;
  char buffer[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      result.output += "\n[test: killed after the time limit]\n";
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
    const ssize_t n = ::read(fds[0], buffer, sizeof(buffer));
    if (n <= 0) break;
    result.output.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else {
    result.exit_code = -1;
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

std::vector<ProcessResult> run_trainer_ranks(const std::vector<std::string>& args, int world_size) {
  return run_processes(kTrainer, args, world_size, kRunLimit, {{"OMP_NUM_THREADS", "1"}});
}

std::string describe(const std::vector<ProcessResult>& results) {
  std::ostringstream out;
  for (const auto& r : results) {
    out << "--- rank " << r.rank << ": exit " << r.exit_code << " signal " << r.term_signal
        << "\n" << r.output << "\n";
  }
  return out.str();
}

void expect_all_ok(const std::vector<ProcessResult>& results) {
  for (const auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << describe(results);
  }
}

std::vector<JsonValue> read_metrics(const std::string& run_dir) {
  const fs::path path = fs::path(run_dir) / "metrics.jsonl";
  std::ifstream in(path);
  std::vector<JsonValue> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(JsonValue::parse(line, path.string()));
  }
  return lines;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The metrics of `steps` (1-based step numbers), keyed by step.
std::map<int64_t, JsonValue> by_step(const std::vector<JsonValue>& lines) {
  std::map<int64_t, JsonValue> out;
  for (const auto& j : lines) out.insert_or_assign(j.at("step").get<int64_t>(), j);
  return out;
}

void expect_close(double a, double b, double rel, const std::string& what) {
  EXPECT_LE(std::fabs(a - b), rel * std::max(std::fabs(a), std::fabs(b)))
      << what << ": " << a << " vs " << b;
}

}  // namespace fsdp::testing
