// Spawned by test_deferred_init as real processes (see harness/multiprocess.h),
// because in-process rank threads share LibTorch's global generator: here
// each rank has its own, as in a real job.
//
// Every rank seeds the global generator, builds the model deferred and lets
// fully_shard initialize it with the modules' own reset_parameters(). It then
// builds the same model eagerly, as one process would, from the same seed,
// and checks that its shards equal the matching slices of that model. Prints
// "deferred_init_probe rank R of N: P parameters match" and exits 0, or
// names the first mismatch and exits 1.

#include <ATen/ATen.h>

#include <cstdio>
#include <exception>

#include "fsdp/fsdp.h"
#include "harness/models.h"

namespace {

constexpr uint64_t kSeed = 61;

int check(const fsdp::UnitModule& model, const torch::nn::Module& eager, int rank, int world) {
  const auto reference = eager.named_parameters();
  int matched = 0;
  for (const auto& shard : fsdp::param_shards(model)) {
    const at::Tensor expected = reference[shard.name].reshape(-1).narrow(0, shard.flat_begin, shard.numel);
    if (!shard.param.detach().reshape(-1).equal(expected)) {
      std::printf("deferred_init_probe rank %d: '%s' differs from the eager model\n", rank,
                  shard.name.c_str());
      return 1;
    }
    ++matched;
  }
  const fsdp::MemoryStats stats = fsdp::memory_stats(model);
  if (stats.peak_init_param_bytes > std::max(stats.largest_unit_bytes, stats.root_unit_bytes)) {
    std::printf("deferred_init_probe rank %d: held %lld bytes of full parameters during init\n", rank,
                static_cast<long long>(stats.peak_init_param_bytes));
    return 1;
  }
  std::printf("deferred_init_probe rank %d of %d: %d parameters match\n", rank, world, matched);
  return 0;
}

}  // namespace

int main() {
  try {
    auto group = fsdp::init_process_group_from_env();
    fsdp::testing::ResettableNet local(/*units=*/true);
    fsdp::defer_init(*local);
    at::manual_seed(kSeed);
    auto model = fsdp::fully_shard(local, fsdp::FullyShardOptions(group));

    at::manual_seed(kSeed);
    fsdp::testing::ResettableNet eager(/*units=*/false);
    return check(*model, *eager, group->rank(), group->size());
  } catch (const std::exception& e) {
    std::printf("deferred_init_probe error: %s\n", e.what());
    return 2;
  }
}
