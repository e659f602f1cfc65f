#pragma once
// Figures every rank contributes, gathered to every rank in one collective.

#include <cstdint>
#include <vector>

#include "fsdp/comm/process_group.h"

namespace fsdp_train {

// result[i][r] is rank r's mine[i]. Collective over `group`.
std::vector<std::vector<int64_t>> gather_per_rank(fsdp::ProcessGroup& group,
                                                  const std::vector<int64_t>& mine);

}  // namespace fsdp_train
