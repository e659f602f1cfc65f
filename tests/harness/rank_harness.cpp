#include "harness/rank_harness.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/file_tree.h"

namespace fsdp::testing {
namespace {

std::filesystem::path make_temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/fsdp-ranks-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  TORCH_CHECK(::mkdtemp(buf.data()) != nullptr, "run_ranks: cannot create a temp dir from ",
              pattern);
  return std::filesystem::path(buf.data());
}

// What the rank threads report back to the thread that waits for them.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<bool> done;
  std::vector<std::string> failures;  // "rank R: what", in the order they happened
};

}  // namespace

void run_ranks(int world_size, const std::function<void(RankContext&)>& fn,
               RankRunOptions options) {
  TORCH_CHECK(world_size >= 1, "run_ranks: world_size must be >= 1, got ", world_size);
  const std::filesystem::path dir = make_temp_dir();
  auto store = c10::make_intrusive<c10d::FileStore>((dir / "store").string(), 1);
  store->setTimeout(options.comm_timeout);

  Outcome outcome;
  outcome.done.assign(world_size, false);
  // Groups outlive every rank's body, so a rank that finishes early never
  // tears down connections a slower peer is still draining.
  std::vector<ProcessGroupPtr> groups(world_size);

  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      std::string failure;
      try {
        GroupOptions group_options;
        group_options.timeout = options.comm_timeout;
        group_options.host_staging = options.host_staging;
        groups[rank] = make_process_group(store, rank, world_size, group_options);
        RankContext ctx{rank, world_size, groups[rank], store};
        fn(ctx);
      } catch (const std::exception& e) {
        failure = e.what();
      } catch (...) {
        failure = "unknown exception (not derived from std::exception)";
      }
      std::lock_guard<std::mutex> lock(outcome.mu);
      if (!failure.empty()) {
        outcome.failures.push_back("rank " + std::to_string(rank) + ": " + failure);
      }
      outcome.done[rank] = true;
      ++outcome.finished;
      outcome.cv.notify_all();
    });
  }

  {
    std::unique_lock<std::mutex> lock(outcome.mu);
    const bool all_done = outcome.cv.wait_for(lock, options.timeout,
                                              [&] { return outcome.finished == world_size; });
    if (!all_done) {
      // A hung rank cannot be cancelled; report and end the process so the
      // test fails instead of hanging (each gtest case is its own process).
      std::string stuck;
      for (int r = 0; r < world_size; ++r) {
        if (!outcome.done[r]) stuck += (stuck.empty() ? "" : ", ") + std::to_string(r);
      }
      std::fprintf(stderr,
                   "run_ranks: rank(s) %s still running after %lld ms (world size %d); "
                   "aborting the test process\n",
                   stuck.c_str(), static_cast<long long>(options.timeout.count()), world_size);
      for (const auto& f : outcome.failures) std::fprintf(stderr, "  %s\n", f.c_str());
      std::fflush(stderr);
      fsdp::remove_tree(dir);
      std::_Exit(3);
    }
  }
  for (auto& t : threads) t.join();
  groups.clear();
  store.reset();
  fsdp::remove_tree(dir);

  for (size_t i = 0; i < outcome.failures.size(); ++i) {
    ADD_FAILURE() << (i == 0 ? "(first failure) " : "") << outcome.failures[i];
  }
}

}  // namespace fsdp::testing
