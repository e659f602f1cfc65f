#pragma once
// The pieces the state dict calls share: the root state checked to be idle,
// gathering one unit's padded flat buffer at a time, the copies kept as
// output, the count of bytes alive (StateDictStats), and rank 0's word sent
// to every rank. Internal to src/state_dict.
//
// [Note: full state dict memory]
// A full state dict must not need the whole model on top of the output:
// that is how FSDP users run out of memory on save (pytorch#104143). We
// gather one unit at a time into a padded buffer (padded_numel elements),
// copy each parameter out of it on the ranks that keep the output, and drop
// the buffer before the next unit. Optimizer state goes the same way, one
// unit and one field at a time. The extra bytes on a rank are therefore at
// most the largest gathered buffer plus the output, and GatherAccounting
// tracks exactly that sum so tests can assert it (StateDictStats).

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "flat_param_group.h"
#include "fsdp/state_dict.h"
#include "root_state.h"

namespace fsdp::detail {

// The root state of `root`, checked: `root` must be what fully_shard
// returned, and no unit may be gathered (state dicts are taken between
// steps). `api` names the caller in errors.
RootState& idle_root_state(const UnitModule& root, const char* api);

// Counts gather buffers and output bytes alive during one call.
class GatherAccounting {
 public:
  explicit GatherAccounting(StateDictStats* stats) : stats_(stats) {}
  void buffer_alive(int64_t bytes);
  void buffer_freed(int64_t bytes);
  void output_kept(int64_t bytes);

 private:
  void update_peak();
  StateDictStats local_;
  StateDictStats* stats_;  // &local_ when the caller passed none
  int64_t alive_ = 0;
};

// The device collectives of `group` run on: CUDA for NCCL, else the CPU.
at::Device comm_device(const ProcessGroup& group);

// All-gathers `local` (1-D, numel == layout().shard_numel()) from every rank
// of the unit's shard group into a new padded buffer (1-D, padded_numel,
// local's dtype, on the shard group's comm device). Blocking.
at::Tensor gather_unit_flat(const FlatParamGroup& group, const at::Tensor& local,
                            GatherAccounting& accounting);

// A copy of `value` that owns its memory: on the CPU if `to_cpu`, else on
// value's device. Counted as output.
at::Tensor keep_copy(const at::Tensor& value, bool to_cpu, GatherAccounting& accounting);

// Rank 0's `mine` on every rank (a small control-plane exchange). Collective.
std::string from_rank0(ProcessGroup& world, const std::string& mine);

}  // namespace fsdp::detail
