// fsdp::full_state_dict: the whole model by name, gathered unit by unit.
// See [Note: full state dict memory] in unit_gather.h.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <map>

#include "fsdp/state_dict.h"
#include "state_dict/unit_gather.h"

namespace fsdp {

StateDict full_state_dict(const UnitModule& root, const FullStateDictOptions& options,
                          StateDictStats* stats) {
  detail::RootState& state = detail::idle_root_state(root, "full_state_dict");
  const bool keep = !options.rank0_only() || state.world().rank() == 0;
  detail::GatherAccounting accounting(stats);
  at::NoGradGuard no_grad;

  std::map<std::string, at::Tensor> params;  // by name, until ordered below
  for (const auto& unit : state.units()) {
    const detail::FlatParamGroup& group = unit->params();
    const auto& layout = group.layout();
    if (layout.num_params() == 0) continue;
    if (group.is_aliased()) {  // nothing sharded: the parameters are whole
      if (!keep) continue;
      for (int64_t i = 0; i < layout.num_params(); ++i) {
        params[group.names()[i]] = detail::keep_copy(
            group.params()[i].detach().reshape(group.shapes()[i]), options.offload_to_cpu(), accounting);
      }
      continue;
    }
    at::Tensor flat = detail::gather_unit_flat(group, group.sharded_flat(), accounting);
    if (keep) {
      for (int64_t i = 0; i < layout.num_params(); ++i) {
        const auto& slot = layout.slot(i);
        params[group.names()[i]] = detail::keep_copy(
            flat.narrow(0, slot.offset, slot.numel).view(group.shapes()[i]), options.offload_to_cpu(),
            accounting);
      }
    }
    accounting.buffer_freed(static_cast<int64_t>(flat.nbytes()));
    flat = at::Tensor();  // the next unit's buffer replaces it, not joins it
  }
  if (keep) {  // ignored parameters are whole on every rank
    for (const auto& ignored : state.ignored_params()) {
      params[ignored.name] = detail::keep_copy(ignored.param.detach(), options.offload_to_cpu(), accounting);
    }
  }

  StateDict out;
  if (!keep) return out;
  // The unsharded model's order: named_parameters() (unique tensors), then buffers.
  for (const auto& p : root.named_parameters()) {
    auto it = params.find(p.key());
    if (it == params.end()) continue;
    out.insert(p.key(), it->second);
    params.erase(it);
  }
  for (auto& rest : params) out.insert(rest.first, rest.second);  // none expected
  for (const auto& b : root.named_buffers()) {
    out.insert(b.key(), detail::keep_copy(b.value().detach(), options.offload_to_cpu(), accounting));
  }
  return out;
}

}  // namespace fsdp
