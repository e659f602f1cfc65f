#pragma once
// Checks that every rank built the same model before any collective depends
// on it. A mismatch (a different layer count, shape or dtype on one rank)
// would otherwise pair up collectives of different sizes and hang or fail
// obscurely; here it is an error naming the first differing entry.

#include "fsdp/comm/process_group.h"
#include "unit_discovery.h"

namespace fsdp::detail {

void check_same_model_on_all_ranks(ProcessGroup& world, const DiscoveredModel& model);

}  // namespace fsdp::detail
