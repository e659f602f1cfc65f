#include "rank_memory.h"

#include "fsdp/introspection.h"
#include "peak_memory.h"
#include "rank_figures.h"

namespace fsdp_train {

std::vector<RankMemory> gather_rank_memory(fsdp::ProcessGroup& world, const fsdp::UnitModule& model,
                                           const torch::optim::Optimizer& optimizer,
                                           const RunPeaks& peaks) {
  const int64_t params = fsdp::memory_stats(model).sharded_param_bytes;
  // Gradients as the optimizer sees them: each parameter's (sharded) .grad().
  int64_t grad_bytes = 0;
  for (const auto& p : model.parameters()) {
    if (p.grad().defined()) grad_bytes += static_cast<int64_t>(p.grad().nbytes());
  }
  const auto per_rank = gather_per_rank(
      world, {params, grad_bytes, fsdp::optimizer_state_bytes(optimizer), peaks.gathered,
              peaks.tensors, peak_resident_bytes(), peaks.device.allocated, peaks.device.reserved});
  std::vector<RankMemory> ranks(per_rank[0].size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    ranks[r] = RankMemory{per_rank[0][r], per_rank[1][r], per_rank[2][r], per_rank[3][r],
                          per_rank[4][r], per_rank[5][r], per_rank[6][r], per_rank[7][r]};
  }
  return ranks;
}

}  // namespace fsdp_train
