#include "collective_cost.h"

namespace fsdp_plan {

double ring_all_gather_s(double bytes, int ranks, const Link& link) {
  if (ranks <= 1) return 0;
  const double p = ranks;
  return (p - 1) * link.latency_s + (p - 1) / p * bytes / link.bytes_per_s;
}

double ring_reduce_scatter_s(double bytes, int ranks, const Link& link) {
  return ring_all_gather_s(bytes, ranks, link);
}

double ring_all_reduce_s(double bytes, int ranks, const Link& link) {
  return 2 * ring_all_gather_s(bytes, ranks, link);
}

const Link& ring_link(int ranks, int ranks_per_node, const HardwareProfile& profile) {
  return ranks > ranks_per_node ? profile.inter_node : profile.intra_node;
}

}  // namespace fsdp_plan
