#pragma once
// Alpha-beta costs of the ring collectives FSDP issues (docs/planner.md has
// the formulas and what they leave out). n is the bytes of the whole
// (gathered) buffer, p the ranks in the ring, alpha a step's latency and beta
// the seconds per byte of the slowest link the ring crosses.
//   all-gather, reduce-scatter:  (p - 1) alpha + (p - 1)/p n beta
//   all-reduce:                2 (p - 1) alpha + 2 (p - 1)/p n beta
// (Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication
// Operations in MPICH", 2005; NCCL's "bus bandwidth" is the same factor.)

#include <cstdint>

#include "hardware_profile.h"

namespace fsdp_plan {

double ring_all_gather_s(double bytes, int ranks, const Link& link);
double ring_reduce_scatter_s(double bytes, int ranks, const Link& link);
double ring_all_reduce_s(double bytes, int ranks, const Link& link);

// The link a ring over `ranks` consecutive ranks crosses at its slowest: the
// inter-node one as soon as it spans more than one node.
const Link& ring_link(int ranks, int ranks_per_node, const HardwareProfile& profile);

}  // namespace fsdp_plan
