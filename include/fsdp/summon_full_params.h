#pragma once
// Full parameters outside forward and backward: inspection, evaluation of a
// single rank, weight surgery, custom init.
//
//   {
//     fsdp::SummonFullParams full(*model);           // collective: every rank
//     at::NoGradGuard no_grad;
//     model->head->weight.mul_(0.5);                 // original shape, edits persist
//   }                                                // back to shards
//
// While the guard lives, each summoned unit's parameters are full tensors of
// their original shapes (in the parameters' own dtype, not a mixed-precision
// compute dtype). Construction and destruction are collective-free except the
// all-gathers at construction: every rank of the shard group must create the
// guard, on the same module, with the same options.

#include <torch/arg.h>

#include <functional>
#include <vector>

#include "fsdp/sharded.h"

namespace fsdp {

namespace detail {
class RootState;
class UnitState;
}

struct SummonFullParamsOptions {
  /// Copy edits of the full parameters back into the shards when the guard
  /// ends. Default: true. (No writeback: edits are discarded.)
  TORCH_ARG(bool, writeback) = true;
  /// Only global rank 0 gets the full parameters; the others keep their
  /// shards (all still take part in the gather). Needs writeback(false).
  /// Default: false.
  TORCH_ARG(bool, rank0_only) = false;
  /// Expose host copies and free the gathered device buffers (for models
  /// whose full parameters do not fit the device). Default: false.
  TORCH_ARG(bool, offload_to_cpu) = false;
  /// Summon every unit in the module's subtree; false: the module's own
  /// unit only. Default: true.
  TORCH_ARG(bool, recurse) = true;
};

class SummonFullParams {
 public:
  // `module`: the root fully_shard returned, or any unit inside it. Throws
  // inside forward or backward, between a forward and its backward, or when
  // a unit is already summoned by a live guard.
  explicit SummonFullParams(UnitModule& module, SummonFullParamsOptions options = {});
  // Ends the guard now (writeback, reshard); throws if writeback fails or
  // guards end out of order. The destructor calls it and only warns.
  void exit();
  ~SummonFullParams();
  SummonFullParams(const SummonFullParams&) = delete;
  SummonFullParams& operator=(const SummonFullParams&) = delete;

 private:
  struct Entry {
    detail::UnitState* unit;
    at::Tensor full;  // 1-D padded buffer the parameters view; undefined: kept sharded
    int64_t counted_bytes = 0;
  };
  SummonFullParamsOptions options_;
  std::vector<Entry> entries_;
  detail::RootState* root_ = nullptr;  // the model's; it orders the live guards
  int64_t guard_id_ = 0;
  bool active_ = false;
};

// Runs fn on every module of `root`'s model (pre-order, each once; for a
// unit, the module it wraps) with full parameters, under NoGradGuard, and
// writes the edits back to the shards. Collective, like SummonFullParams.
void apply_with_full_params(UnitModule& root, const std::function<void(torch::nn::Module&)>& fn);

}  // namespace fsdp
