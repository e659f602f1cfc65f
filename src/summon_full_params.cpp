#include "fsdp/summon_full_params.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <unordered_set>

#include "fsdp/error_message.h"
#include "root_state.h"
#include "unit_module_access.h"
#include "unit_name.h"
#include "unit_state.h"

namespace fsdp {
namespace {

// The sharded units of `module`'s subtree, pre-order, each once.
std::vector<detail::UnitState*> units_under(UnitModule& module, bool recurse) {
  std::vector<detail::UnitState*> units{detail::UnitModuleAccess::unit_state(module)};
  if (!recurse) return units;
  std::unordered_set<const detail::UnitState*> seen{units[0]};
  for (const auto& child : module.modules(/*include_self=*/false)) {
    auto* unit = dynamic_cast<UnitModule*>(child.get());
    if (unit && unit->is_sharded() && seen.insert(detail::UnitModuleAccess::unit_state(*unit)).second) {
      units.push_back(detail::UnitModuleAccess::unit_state(*unit));
    }
  }
  return units;
}

}  // namespace

// [Note: summon_full_params]
// Each summoned unit is gathered into a fresh buffer in the parameters' own
// dtype (FlatParamGroup::gather_full_flat), independent of the training
// buffers, and its parameters are pointed at full views of it; the unit's
// state becomes SUMMON_FULL_PARAMS so a forward inside the guard, or a second
// guard over it, fails clearly. On exit, writeback copies each rank's slice
// of every parameter's current value (whatever the user left there, same
// shape) into the shard, and the parameters point at their shards again.
// Guards on one model form a stack and must end in reverse order.
SummonFullParams::SummonFullParams(UnitModule& module, SummonFullParamsOptions options)
    : options_(options) {
  TORCH_CHECK(module.is_sharded(), "fsdp: SummonFullParams needs a module sharded by fully_shard "
                                   "(the root it returned or a unit inside it)");
  TORCH_CHECK(!(options.writeback() && options.rank0_only()),
              "fsdp: SummonFullParams with rank0_only(true) and writeback(true) is not supported "
              "(ranks other than 0 would have nothing to write back); pass .writeback(false)");
  detail::RootState& root = detail::UnitModuleAccess::unit_state(module)->root();
  root.recover_from_failed_step();
  TORCH_CHECK(!root.root_forward_active(), "fsdp: SummonFullParams was created inside forward; "
              "full parameters can be summoned only outside forward and backward");
  TORCH_CHECK(!root.in_backward(), "fsdp: SummonFullParams was created inside backward; "
              "full parameters can be summoned only outside forward and backward");
  const auto units = units_under(module, options.recurse());
  for (detail::UnitState* unit : units) {
    TORCH_CHECK(unit->state() != detail::TrainingState::kSummonFullParams, "fsdp: unit '",
                detail::display_name(unit->name()), "' is already inside summon_full_params (nested guards "
                "over the same unit); end the outer guard first, or summon disjoint units with "
                "recurse(false)");
    TORCH_CHECK(!unit->awaiting_backward(), "fsdp: SummonFullParams was created after a forward "
                "whose backward has not run (unit '", detail::display_name(unit->name()), "'); call backward "
                "first, or run evaluation forwards under at::NoGradGuard");
    TORCH_CHECK(!unit->gathered_copy().held(), "fsdp: unit '", detail::display_name(unit->name()),
                "' is held gathered by unshard(); call reshard() before SummonFullParams");
    TORCH_CHECK(unit->state() == detail::TrainingState::kIdle, "fsdp: unit '",
                detail::display_name(unit->name()), "' is in state ", detail::to_string(unit->state()),
                "; full parameters can be summoned only outside forward and backward");
  }
  const bool keep_full = !options.rank0_only() || root.world().rank() == 0;
  for (detail::UnitState* unit : units) {
    auto& group = unit->params();
    // Drop a copy kept after backward: the writeback would bypass its snapshot.
    unit->gathered_copy().drop_kept();
    group.reshard();                             // nothing else is gathered between steps; be sure
    at::Tensor full = group.gather_full_flat();  // every rank takes part
    Entry entry{unit, at::Tensor(), 0};
    if (keep_full) {
      if (options.offload_to_cpu() && !full.is_cpu()) full = full.to(at::kCPU);
      if (!full.is_cpu() || !options.offload_to_cpu()) {
        entry.counted_bytes = static_cast<int64_t>(full.nbytes());
        root.counters()->gathered_bytes.add(entry.counted_bytes);
      }
      group.expose(group.full_views(full));
      entry.full = std::move(full);
    }
    unit->set_summoned(true);
    entries_.push_back(std::move(entry));
  }
  root_ = &root;
  guard_id_ = root.open_summon_guard();
  active_ = true;
}

void SummonFullParams::exit() {
  if (!active_) return;
  TORCH_CHECK(root_->close_summon_guard(guard_id_), "fsdp: SummonFullParams guards ended "
              "out of order; end the innermost guard first (let them go out of scope in reverse "
              "order of creation)");
  active_ = false;
  std::string failure;
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    auto& group = it->unit->params();
    if (it->full.defined() && options_.writeback()) {
      try {
        for (size_t i = 0; i < group.params().size(); ++i) {
          group.load_full_param(static_cast<int64_t>(i), group.params()[i]);
        }
      } catch (const std::exception& e) {
        if (failure.empty()) failure = error_message(e);
      }
    }
    group.expose_shards();
    if (it->counted_bytes > 0) it->unit->root().counters()->gathered_bytes.sub(it->counted_bytes);
    it->unit->set_summoned(false);
  }
  entries_.clear();
  TORCH_CHECK(failure.empty(), "fsdp: summon_full_params writeback failed: ", failure);
}

SummonFullParams::~SummonFullParams() {
  try {
    exit();
  } catch (const std::exception& e) {
    TORCH_WARN(error_message(e));
  }
}

void apply_with_full_params(UnitModule& root, const std::function<void(torch::nn::Module&)>& fn) {
  SummonFullParams full(root, SummonFullParamsOptions().writeback(true).recurse(true));
  {
    at::NoGradGuard no_grad;
    std::unordered_set<const torch::nn::Module*> seen;
    std::function<void(torch::nn::Module&)> visit = [&](torch::nn::Module& module) {
      if (!seen.insert(&module).second) return;
      auto* unit = dynamic_cast<UnitModule*>(&module);
      fn(unit ? *unit->wrapped() : module);
      for (const auto& child : module.children()) visit(*child);
    };
    visit(root);
  }
  full.exit();
}

}  // namespace fsdp
