#include "fsdp/clip_grad.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>

#include "compat.h"
#include "root_state.h"
#include "unit_module_access.h"
#include "unit_state.h"

namespace fsdp {
namespace {

// [Note: clipping across shards]
// Each rank holds disjoint pieces of the full gradients, so the p-th powers
// of their local norms add up (and local maxima take a max) over the shard
// group. Replicas in NO_SHARD and hybrid strategies hold identical pieces, so
// the reduction runs over the shard group only, never over replicas.
//
// [Note: clipping without host syncs]
// The norm stays a 0-dim float64 tensor on the gradients' device from the
// per-tensor norms (one multi-tensor kernel) through the shard group's
// all-reduce to the clip coefficient, min(1, max_norm / (norm + 1e-6)),
// which multiplies every gradient (by 1.0 when no clipping is needed, which
// leaves it bitwise unchanged). The host reads the norm only when the
// caller asks for a double. Per-tensor norms are taken in the gradients'
// dtype and combined in float64.

// Sum of |g|^p over `grads` (max |g| for p = inf), as a 0-dim float64
// tensor on `device`; zero when there are no gradients.
at::Tensor local_norm_power(const std::vector<at::Tensor>& grads, double norm_type,
                            at::Device device) {
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device);
  if (grads.empty()) return at::zeros({}, options);
  const std::vector<at::Tensor> norms = at::_foreach_norm(grads, norm_type);
  at::Tensor stacked = at::stack(norms).to(options);
  if (std::isinf(norm_type)) return stacked.max();
  return stacked.pow(norm_type).sum();
}

// The sharded gradients of every unit, non-empty ones only.
std::vector<at::Tensor> sharded_grads(detail::RootState& state) {
  std::vector<at::Tensor> grads;
  for (const auto& unit : state.units()) {
    TORCH_CHECK(!unit->grads().holds_unsharded_grads(),
                "fsdp: clip_grad_norm_ was called after a "
                "backward without gradient sync; run a synchronizing backward first");
    TORCH_CHECK(!unit->grads().holds_back_reduced_grads(),
                "fsdp: clip_grad_norm_ was called while gradients are held back from the "
                "all-reduce across replicas (set_requires_all_reduce(false)), so .grad() is "
                "incomplete; run a backward with set_requires_all_reduce(true) first");
    for (const auto& p : unit->params().params()) {
      if (p.grad().defined() && p.grad().numel() > 0) grads.push_back(p.grad());
    }
  }
  return grads;
}

// Where the norm is computed: the gradients' device, unless the shard group
// cannot take a tensor there (Gloo without staging gets a CPU tensor).
at::Device norm_device(const ProcessGroup& shard_group, const std::vector<at::Tensor>& grads) {
  const at::Device grads_device = grads.empty() ? at::Device(at::kCPU) : grads.front().device();
  return collective_device(shard_group, grads_device);
}

void scale_grads(std::vector<at::Tensor>& grads, const at::Tensor& coef) {
  if (grads.empty()) return;
#if FSDP_HAS_FOREACH_MUL_TENSOR
  if (coef.device() == grads.front().device()) {
    at::_foreach_mul_(grads, coef.to(grads.front().scalar_type()));
    return;
  }
#endif
  for (auto& g : grads) g.mul_(coef.to(g.device(), g.scalar_type()));
}

void check_clip_arguments(double max_norm, double norm_type) {
  TORCH_CHECK(norm_type > 0, "fsdp: clip_grad_norm_ norm_type is ", norm_type,
              "; use a p > 0, or INFINITY for the max-norm");
  TORCH_CHECK(max_norm >= 0, "fsdp: clip_grad_norm_ max_norm is ", max_norm, "; it must be >= 0");
}

// Scales `grads` so that their norm, given as its p-th power `total_pow`
// (the max for p = inf), is at most `max_norm`; returns the norm.
at::Tensor clip_by_norm_power(std::vector<at::Tensor>& grads, const at::Tensor& total_pow,
                              double max_norm, double norm_type) {
  const at::Tensor total = std::isinf(norm_type) ? total_pow : total_pow.pow(1.0 / norm_type);
  const at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  scale_grads(grads, coef);
  return total;
}

}  // namespace

at::Tensor clip_grad_norm_tensor_(UnitModule& root, double max_norm, double norm_type) {
  detail::RootState& state = detail::root_state_of(root, "clip_grad_norm_");
  check_clip_arguments(max_norm, norm_type);
  state.recover_from_failed_step();
  TORCH_CHECK(!state.in_backward(),
              "fsdp: clip_grad_norm_ was called during backward; call it after backward returns");
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads = sharded_grads(state);
  const bool inf = std::isinf(norm_type);
  ProcessGroup& shard_group = *state.root_unit().params().groups().shard;
  at::Tensor total_pow = local_norm_power(grads, norm_type, norm_device(shard_group, grads));
  if (shard_group.size() > 1) {
    shard_group.all_reduce(total_pow, inf ? ReduceOp::kMax : ReduceOp::kSum)->wait();
  }
  // Ignored parameters are whole and replicated (see [Note: ignored
  // parameters]): every rank adds the same local term, after the reduction.
  std::vector<at::Tensor> ignored_grads;
  for (const auto& ignored : state.ignored_params()) {
    const at::Tensor& g = ignored.param.grad();
    if (g.defined() && g.numel() > 0) ignored_grads.push_back(g);
  }
  if (!ignored_grads.empty()) {
    const at::Tensor term = local_norm_power(ignored_grads, norm_type, total_pow.device());
    total_pow = inf ? at::maximum(total_pow, term) : total_pow + term;
    grads.insert(grads.end(), ignored_grads.begin(), ignored_grads.end());
  }
  return clip_by_norm_power(grads, total_pow, max_norm, norm_type);
}

at::Tensor clip_grad_norm_tensor_(const std::vector<at::Tensor>& parameters, double max_norm,
                                  double norm_type) {
  check_clip_arguments(max_norm, norm_type);
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined() && p.grad().numel() > 0) grads.push_back(p.grad());
  }
  const at::Device device = grads.empty() ? at::Device(at::kCPU) : grads.front().device();
  const at::Tensor total_pow = local_norm_power(grads, norm_type, device);
  return clip_by_norm_power(grads, total_pow, max_norm, norm_type);
}

double clip_grad_norm_(UnitModule& root, double max_norm, double norm_type) {
  return clip_grad_norm_tensor_(root, max_norm, norm_type).item<double>();
}

}  // namespace fsdp
