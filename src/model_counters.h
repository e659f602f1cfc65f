#pragma once
// The counts one fully_shard() model keeps across its units. The root and
// every unit's storage share them (a unit may outlive its root; see
// [Note: a unit outliving its root] in unit_state.h).

#include "live_gather_count.h"
#include "memory_counter.h"

namespace fsdp::detail {

struct ModelCounters {
  MemoryCounter gathered_bytes;      // gathered parameter buffers (statistics)
  LiveGatherCount live_gathers;      // units gathered or gathering: what the
                                     // prefetch in-flight limit reads
  MemoryCounter post_forward_bytes;  // chunks kept by post-forward reshards
                                     // to a smaller group
  MemoryCounter init_bytes;          // full parameters materialized at once
                                     // during deferred init
};

}  // namespace fsdp::detail
