#include "rank_figures.h"

#include <ATen/ATen.h>

namespace fsdp_train {

std::vector<std::vector<int64_t>> gather_per_rank(fsdp::ProcessGroup& group,
                                                  const std::vector<int64_t>& mine) {
  const int64_t n = static_cast<int64_t>(mine.size());
  // See [Note: a group's device].
  const at::Device device = fsdp::collective_device(group, at::Device(at::kCPU));
  at::Tensor in = at::tensor(at::ArrayRef<int64_t>(mine), at::kLong).to(device);
  at::Tensor all = at::empty({group.size() * n}, in.options());
  group.all_gather(all, in)->wait();
  all = all.cpu();
  const int64_t* values = all.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> out(mine.size());
  for (int r = 0; r < group.size(); ++r) {
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)].push_back(values[r * n + i]);
  }
  return out;
}

}  // namespace fsdp_train
