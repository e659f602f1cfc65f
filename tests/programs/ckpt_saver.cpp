// A rank of a real multi-process checkpoint save, for the kill-during-save
// tests (tests/test_checkpoint_kill.cpp). Launched by run_processes with the
// torchrun variables set.
//
//   ckpt_saver DIR STEP [--overwrite] [--async]
//
// Every tensor is filled with STEP so the test can tell which save it reads.
// With FSDP_TEST_KILL_RANK=R in the environment, rank R SIGKILLs itself right
// after its data file is durable, before the index exists: the crash the
// commit protocol must survive. --async saves with fsdp::ckpt::AsyncSaver
// while the main thread goes on with all-reduces, as training would, so the
// kill comes from the background thread.

#include <ATen/ATen.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "checkpoint/save_hook.h"
#include "fsdp/checkpoint/async_save.h"
#include "fsdp/checkpoint/save.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/error_message.h"

namespace {

// The save in the background, with "training" (world all-reduces) beside it.
void save_while_training(fsdp::ProcessGroup& world, const std::string& dir,
                         std::vector<fsdp::ckpt::TensorPiece> pieces,
                         const fsdp::ckpt::SaveOptions& options) {
  fsdp::ckpt::AsyncSaver saver(world);
  // The first save: nothing before it to return.
  TORCH_CHECK(!saver.save(dir, std::move(pieces), options), "no save came before this one");
  for (int i = 0; i < 20; ++i) {
    at::Tensor t = at::ones({1024});
    world.all_reduce(t, fsdp::ReduceOp::kSum)->wait();
  }
  saver.wait();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: ckpt_saver DIR STEP [--overwrite] [--async]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t step = std::stoll(argv[2]);
  const std::vector<std::string> flags(argv + 3, argv + argc);
  const auto has_flag = [&](const char* f) {
    return std::find(flags.begin(), flags.end(), f) != flags.end();
  };
  try {
    fsdp::GroupOptions group_options;
    group_options.timeout = std::chrono::seconds(20);
    auto group = fsdp::init_process_group_from_env(group_options);
    const int rank = group->rank();
    const int world_size = group->size();

    if (const char* kill_rank = std::getenv("FSDP_TEST_KILL_RANK")) {
      const int victim = std::atoi(kill_rank);
      fsdp::ckpt::testing::set_save_hook([victim](int r, fsdp::ckpt::testing::SavePhase phase, const std::string& path) {
        if (r == victim && phase == fsdp::ckpt::testing::SavePhase::kAfterDataFile) {
          std::fprintf(stderr, "rank %d: wrote %s, now SIGKILLing myself before the index\n", r, path.c_str());
          std::fflush(stderr);
          ::raise(SIGKILL);
        }
      });
    }

    // 3 Mi floats (12 MiB) per tensor: several 4 MiB checksum blocks per rank file.
    std::vector<fsdp::ckpt::TensorPiece> pieces;
    for (const std::string name : {"layer.0.weight", "layer.1.weight"}) {
      const int64_t numel = 3 << 20;
      const int64_t chunk = (numel + world_size - 1) / world_size;
      const int64_t begin = std::min(numel, rank * chunk);
      const int64_t end = std::min(numel, begin + chunk);
      pieces.push_back({name, {1024, 3072}, at::kFloat, begin, at::full({end - begin}, static_cast<float>(step))});
    }
    if (rank == 0) pieces.push_back({"step", {}, at::kLong, 0, at::full({1}, step, at::kLong)});

    fsdp::ckpt::SaveOptions options;
    options.step = step;
    options.overwrite = has_flag("--overwrite");
    if (has_flag("--async")) {
      save_while_training(*group, dir, std::move(pieces), options);
    } else {
      fsdp::ckpt::save(*group, dir, pieces, options);
    }
    std::printf("rank %d saved %s at step %lld\n", rank, dir.c_str(), static_cast<long long>(step));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_saver: %s\n", fsdp::error_message(e).c_str());
  }
  return 1;
}
