#pragma once
// Read-only views of a sharded model: where each parameter's local shard sits
// in its full tensor, and how many tensor bytes each category holds. Tests
// assert memory bounds on these numbers; checkpoints and benchmarks use them.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/sharded.h"

namespace torch::optim {
class Optimizer;
}

namespace fsdp {

struct ParamShard {
  std::string name;                 // the original fully qualified name
  at::Tensor param;                 // the user's parameter (its local shard)
  std::vector<int64_t> full_shape;  // the unsharded shape
  int64_t flat_begin = 0;           // first element of the flattened full tensor held here
  int64_t numel = 0;                // elements held here (may be 0)
  std::string unit;                 // owning unit's module path ("" = root)
  // This rank is the one that writes this range when saving: replicas of the
  // same range (NO_SHARD, hybrid strategies) leave it to replica 0, and
  // ignored parameters to global rank 0.
  bool primary = true;
  // An ignored parameter (FullyShardOptions::ignored_modules/ignored_params):
  // whole on every rank (flat_begin 0, every element), in no unit (unit "").
  bool ignored = false;
};

// Every parameter of the model: the units' in unit pre-order, then the
// ignored ones in named_parameters() order, each tensor once. State dicts and
// checkpoints are built on this list, so ignored parameters are saved and
// loaded like the others. The root must be sharded.
std::vector<ParamShard> param_shards(const UnitModule& root);

// One unit's buffer sizes, e.g. to replay its collectives alone.
struct UnitInfo {
  std::string name;          // module path ("" = root)
  int64_t num_params = 0;
  int64_t padded_numel = 0;  // gathered flat buffer
  int64_t shard_numel = 0;   // local shard
  bool sharded = true;       // false: nothing to gather (one rank, or NO_SHARD)
  at::ScalarType compute_dtype = at::kFloat;
  at::ScalarType reduce_dtype = at::kFloat;
  // The k-rank group backward all-gathers run in after a post-forward
  // reshard to a smaller group; nullptr when the unit has none.
  ProcessGroupPtr post_forward_group;
  // The group gradient reduce-scatters run on: the shard group itself, or
  // its sibling over the same ranks (separate_reduce_scatter_group).
  ProcessGroupPtr reduce_scatter_group;
  // How often, so far, a gradient reduction copied the unit's
  // used-parameter flags between host and device memory (on CUDA each copy
  // makes the host wait for the GPU). Once per unit while the pattern of
  // used parameters stays the same: see docs/performance.md.
  int64_t flag_transfers = 0;
};
std::vector<UnitInfo> unit_infos(const UnitModule& root);

struct MemoryStats {
  int64_t sharded_param_bytes = 0;   // local shards, padding included
  int64_t sharded_grad_bytes = 0;    // local sharded gradients
  int64_t gathered_param_bytes = 0;  // gathered parameters alive now
  int64_t peak_gathered_param_bytes = 0;  // most alive at once since reset
  int64_t unsharded_param_bytes = 0;      // the whole model, unpadded
  int64_t largest_unit_bytes = 0;         // largest gathered unit
  int64_t root_unit_bytes = 0;            // the root unit gathered
  int gathered_units = 0;                 // units gathered (or gathering) now
  int peak_gathered_units = 0;            // most at once since reset
  // Chunks that units resharding to a smaller group keep between forward and
  // backward (FullyShardOptions::reshard_after_forward_group_size).
  int64_t post_forward_shard_bytes = 0;       // alive now
  int64_t peak_post_forward_shard_bytes = 0;  // most at once since reset
  // Buffers of gradient reductions in flight in backward (each holds one
  // unit's full gradient in the reduce dtype, plus a row for the result); at
  // most two units' at once.
  int64_t grad_reduce_bytes = 0;       // alive now
  int64_t peak_grad_reduce_bytes = 0;  // most at once since reset
  int peak_grad_reduce_units = 0;      // most units reducing at once since reset
  // Deferred init: the most full parameter bytes materialized at once while
  // fully_shard initialized deferred parameters (one module's); 0 if none.
  int64_t peak_init_param_bytes = 0;
};

MemoryStats memory_stats(const UnitModule& root);
void reset_peak_memory_stats(UnitModule& root);

// Bytes of optimizer state tensors (SGD momentum, Adam/AdamW moments).
// Throws, naming the supported optimizers, for any other optimizer.
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

}  // namespace fsdp
