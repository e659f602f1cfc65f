#include "fsdp/clip_grad.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>

#include "root_state.h"
#include "unit_module_access.h"
#include "unit_state.h"

namespace fsdp {

// [Note: clipping across shards]
// Each rank holds disjoint pieces of the full gradients, so the p-th powers
// of their local norms add up (and local maxima take a max) over the shard
// group. Replicas in NO_SHARD and hybrid strategies hold identical pieces, so
// the reduction runs over the shard group only, never over replicas.
double clip_grad_norm_(UnitModule& root, double max_norm, double norm_type) {
  detail::RootState& state = detail::root_state_of(root, "clip_grad_norm_");
  TORCH_CHECK(norm_type > 0, "fsdp: clip_grad_norm_ norm_type is ", norm_type,
              "; use a p > 0, or INFINITY for the max-norm");
  TORCH_CHECK(max_norm >= 0, "fsdp: clip_grad_norm_ max_norm is ", max_norm, "; it must be >= 0");
  state.recover_from_failed_step();
  TORCH_CHECK(!state.in_backward(),
              "fsdp: clip_grad_norm_ was called during backward; call it after backward returns");

  std::vector<at::Tensor> grads;
  for (const auto& unit : state.units()) {
    TORCH_CHECK(!unit->grads().holds_unsharded_grads(), "fsdp: clip_grad_norm_ was called after a "
                "backward without gradient sync; run a synchronizing backward first");
    for (const auto& p : unit->params().params()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  }
  const bool inf = std::isinf(norm_type);
  double local = 0;
  at::NoGradGuard no_grad;
  for (const auto& g : grads) {
    if (g.numel() == 0) continue;
    at::Tensor a = g.detach().abs().to(at::kDouble);
    local = inf ? std::max(local, a.max().item<double>()) : local + a.pow(norm_type).sum().item<double>();
  }
  ProcessGroup& shard_group = *state.root_unit().params().groups().shard;
  double total_pow = local;
  if (shard_group.size() > 1) {
    at::Tensor t = at::full({1}, local, at::kDouble);
    shard_group.all_reduce(t, inf ? ReduceOp::kMax : ReduceOp::kSum)->wait();
    total_pow = t.item<double>();
  }
  // Ignored parameters are whole and replicated (see [Note: ignored
  // parameters]): every rank adds the same local term, after the reduction.
  for (const auto& ignored : state.ignored_params()) {
    const at::Tensor& p = ignored.param;
    if (!p.grad().defined() || p.grad().numel() == 0) continue;
    at::Tensor a = p.grad().detach().abs().to(at::kDouble);
    total_pow = inf ? std::max(total_pow, a.max().item<double>())
                    : total_pow + a.pow(norm_type).sum().item<double>();
    grads.push_back(p.grad());
  }
  const double total = inf ? total_pow : std::pow(total_pow, 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (auto& g : grads) g.mul_(coef);
  }
  return total;
}

}  // namespace fsdp
