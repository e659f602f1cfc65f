#include "state_dict/unit_gather.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "unit_module_access.h"

namespace fsdp::detail {

RootState& idle_root_state(const UnitModule& root, const char* api) {
  RootState& state = root_state_of(root, api);
  for (const auto& unit : state.units()) {
    const auto& group = unit->params();
    TORCH_CHECK(group.is_aliased() || !group.holds_gathered_buffer(), "fsdp: ", api,
                " was called while unit '", unit->name(),
                "' holds gathered parameters (inside forward or backward); call it between "
                "training steps");
  }
  return state;
}

void GatherAccounting::update_peak() {
  StateDictStats& s = stats_ ? *stats_ : local_;
  s.peak_extra_bytes = std::max(s.peak_extra_bytes, alive_);
}

void GatherAccounting::buffer_alive(int64_t bytes) {
  StateDictStats& s = stats_ ? *stats_ : local_;
  alive_ += bytes;
  s.largest_gather_bytes = std::max(s.largest_gather_bytes, bytes);
  ++s.units_gathered;
  update_peak();
}

void GatherAccounting::buffer_freed(int64_t bytes) { alive_ -= bytes; }

void GatherAccounting::output_kept(int64_t bytes) {
  StateDictStats& s = stats_ ? *stats_ : local_;
  alive_ += bytes;
  s.output_bytes += bytes;
  update_peak();
}

at::Device comm_device(const ProcessGroup& group) {
  return collective_device(group, at::Device(at::kCPU));  // See [Note: a group's device].
}

at::Tensor gather_unit_flat(const FlatParamGroup& group, const at::Tensor& local,
                            GatherAccounting& accounting) {
  const auto& layout = group.layout();
  TORCH_INTERNAL_ASSERT(local.dim() == 1 && local.numel() == layout.shard_numel(),
                        "gather_unit_flat: local has ", local.numel(), " elements, the shard ",
                        layout.shard_numel());
  ProcessGroup& shard_group = *group.groups().shard;
  const at::Device device = comm_device(shard_group);
  at::Tensor input = local.to(device).contiguous();
  at::Tensor output = at::empty({layout.padded_numel()}, input.options());
  accounting.buffer_alive(static_cast<int64_t>(output.nbytes()));
  shard_group.all_gather(output, input)->wait();
  return output;
}

at::Tensor keep_copy(const at::Tensor& value, bool to_cpu, GatherAccounting& accounting) {
  at::Tensor copy = to_cpu ? value.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)
                           : value.clone(at::MemoryFormat::Contiguous);
  accounting.output_kept(static_cast<int64_t>(copy.nbytes()));
  return copy;
}

std::string from_rank0(ProcessGroup& world, const std::string& mine) {
  if (world.size() == 1) return mine;
  return all_gather_strings(world, world.rank() == 0 ? mine : std::string()).front();
}

}  // namespace fsdp::detail
