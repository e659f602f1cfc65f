#pragma once
// The concrete groups behind make_process_group(); internal to src/comm.

#include <c10/util/intrusive_ptr.h>

#include <string>
#include <vector>

#include "fsdp/comm/process_group.h"

namespace fsdp::comm {

// One backend's group factory, the type of the two below. `key_prefix`
// namespaces the group's rendezvous keys inside `store`, so sub-groups can
// share their parent's store. `global_ranks[i]` is the global rank of group
// rank i.
using GroupFactory = ProcessGroupPtr (*)(const c10::intrusive_ptr<c10d::Store>& store,
                                         const std::string& key_prefix, int rank, int size,
                                         const GroupOptions& options,
                                         std::vector<int> global_ranks);

ProcessGroupPtr make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                const std::string& key_prefix, int rank, int size,
                                const GroupOptions& options, std::vector<int> global_ranks);

// Only in builds with FSDP_WITH_NCCL; throws otherwise.
ProcessGroupPtr make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                const std::string& key_prefix, int rank, int size,
                                const GroupOptions& options, std::vector<int> global_ranks);

}  // namespace fsdp::comm
