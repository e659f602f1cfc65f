#pragma once
// N ranks as threads of this process, each with its own Gloo group over one
// FileStore: the cheap way to run a multi-rank benchmark on one machine.

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/comm/process_group.h"
#include "fsdp/file_tree.h"

namespace fsdp::bench {

// Runs fn(rank, group) on world_size threads and rethrows the first rank's
// failure after all have joined. `options` configure every rank's group.
inline void run_local_ranks(int world_size, const std::function<void(int, ProcessGroupPtr)>& fn,
                            const GroupOptions& options = GroupOptions()) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("fsdp_bench_" + std::to_string(::getpid()) + "_" +
                        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  fs::create_directories(dir);
  auto store = c10::make_intrusive<c10d::FileStore>((dir / "store").string(), world_size);
  std::mutex mu;
  std::exception_ptr failure;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank, make_process_group(store, rank, world_size, options));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  fsdp::remove_tree(dir);
  if (failure) std::rethrow_exception(failure);
}

}  // namespace fsdp::bench
