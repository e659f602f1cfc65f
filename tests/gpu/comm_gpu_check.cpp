// A standalone check of src/comm against a CUDA LibTorch 2.x (torch wheel),
// built and run by tests/gpu/run_comm_gpu_check.sh on a GPU machine, where
// the CMake dependencies (gtest, CLI11, ...) may be missing.
//   - NCCL at world size 1 (one GPU cannot host several NCCL ranks): every
//     collective, on CUDA tensors.
//   - Gloo at world size 3 (threads over one FileStore): the rings and the
//     native collectives, to prove the 2.x c10d API matches compat.h.
// Prints one line per check and exits non-zero on the first wrong result.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/comm/process_group.h"

namespace {

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) std::exit(1);
}

void check_group(fsdp::ProcessGroup& g, at::TensorOptions opts, const std::string& tag) {
  const int n = g.size();
  const int r = g.rank();
  const int64_t k = 1 << 20;
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
    const auto o = opts.dtype(dtype);
    const std::string name = tag + " " + std::string(c10::toString(dtype));
    auto out = at::empty({n * k}, o);
    g.all_gather(out, at::full({k}, r, o))->wait();
    auto expected = at::arange(n, o).repeat_interleave(k);
    expect(out.equal(expected), name + " all_gather");

    auto shard = at::empty({k}, o);
    g.reduce_scatter(shard, at::arange(n * k, o.dtype(at::kDouble)).fmod(64).to(dtype),
                     fsdp::ReduceOp::kAvg)->wait();
    expect(shard.equal(at::arange(r * k, (r + 1) * k, o.dtype(at::kDouble)).fmod(64).to(dtype)),
           name + " reduce_scatter avg");

    auto t = at::full({k + 3}, r + 1, o);
    g.all_reduce(t, fsdp::ReduceOp::kSum)->wait();
    expect(t.eq(n * (n + 1) / 2).all().item<bool>(), name + " all_reduce sum");

    auto b = at::full({17}, r, o);
    g.broadcast(b, n - 1)->wait();
    expect(b.eq(n - 1).all().item<bool>(), name + " broadcast");
  }
  g.barrier()->wait();
  const auto strings = fsdp::all_gather_strings(g, "r" + std::to_string(r));
  expect(static_cast<int>(strings.size()) == n && strings[r] == "r" + std::to_string(r),
         tag + " all_gather_strings");
}

}  // namespace

int main() {
  char dir[] = "/tmp/fsdp-gpu-check-XXXXXX";
  if (!::mkdtemp(dir)) return 2;
  auto store = c10::make_intrusive<c10d::FileStore>(std::string(dir) + "/store", 1);
  try {
#if defined(FSDP_WITH_NCCL)
    {
      fsdp::GroupOptions options;
      options.backend = fsdp::CommBackend::kNccl;
      options.name = "nccl1";
      auto g = fsdp::make_process_group(store, 0, 1, options);
      check_group(*g, at::TensorOptions().device(at::kCUDA), "nccl ws=1");
      bool rejected = false;
      try {
        g->all_reduce(at::ones({2}), fsdp::ReduceOp::kSum);
      } catch (const c10::Error& e) {
        rejected = std::string(e.what()).find("NCCL backend works on CUDA") != std::string::npos;
      }
      expect(rejected, "nccl rejects CPU tensors with a clear message");
    }
#else
    std::printf("note: built without FSDP_WITH_NCCL; NCCL not checked\n");
#endif
    const int n = 3;
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        try {
          auto g = fsdp::make_process_group(store, r, n);
          check_group(*g, at::TensorOptions(), "gloo ws=3 rank " + std::to_string(r));
        } catch (const std::exception& e) {
          std::printf("FAIL: gloo rank %d: %s\n", r, e.what());
          std::fflush(stdout);
          std::_Exit(1);
        }
      });
    }
    for (auto& t : ranks) t.join();
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  store.reset();
  if (std::system((std::string("rm -rf ") + dir).c_str()) != 0) std::printf("note: could not remove %s\n", dir);
  std::printf("all checks passed\n");
  return 0;
}
