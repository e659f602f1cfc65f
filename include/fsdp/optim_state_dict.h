#pragma once
// Optimizer state dicts of a sharded model, keyed by the original parameter
// names, for every torch::optim optimizer with per-parameter state: AdamW
// and Adam (exp_avg, exp_avg_sq, max_exp_avg_sq with amsgrad, step), SGD
// (momentum_buffer), Adagrad (sum, step) and RMSprop (square_avg,
// momentum_buffer with momentum, grad_avg when centered, step). LBFGS is
// refused: its one history spans every parameter.
//
//   // rank 0 gets every parameter's state at full shape, on the CPU
//   fsdp::OptimStateDict full = fsdp::full_optim_state_dict(*model, *opt);
//   // another run, any world size, after building the optimizer:
//   fsdp::load_full_optim_state_dict(*model, *opt, full,
//                                    fsdp::LoadStateDictOptions().rank0_only(true));
//
// Hyperparameters (learning rate, betas...) are not part of it: they belong
// to the optimizer the caller builds, as with torch::optim's own
// constructors.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fsdp/sharded.h"
#include "fsdp/state_dict.h"

namespace torch::optim {
class Optimizer;
}

namespace fsdp {

// One parameter's optimizer state.
struct ParamOptimState {
  // The optimizer's fields by name, as listed above (e.g. "exp_avg" for
  // Adam/AdamW). Full-shaped in a full dict; 1-D local runs
  // (aliasing the optimizer's tensors) in a sharded one.
  std::map<std::string, at::Tensor> tensors;
  int64_t step = -1;  // the step count; -1 for SGD, which keeps none
};

// Parameter name -> its state. Parameters without state (never stepped,
// frozen) are absent.
using OptimStateDict = std::map<std::string, ParamOptimState>;

// Collective: gathers each unit's state one field at a time, as
// full_state_dict() does the parameters (the same options and accounting).
OptimStateDict full_optim_state_dict(const UnitModule& root,
                                     const torch::optim::Optimizer& optimizer,
                                     const FullStateDictOptions& options = {},
                                     StateDictStats* stats = nullptr);

// One parameter's sharded optimizer state and where it sits.
struct ShardedParamOptimState {
  std::vector<int64_t> full_shape;
  int64_t flat_begin = 0;
  bool primary = true;
  ParamOptimState state;
};
using ShardedOptimStateDict = std::map<std::string, ShardedParamOptimState>;

// This rank's optimizer state, no communication, no copy.
ShardedOptimStateDict sharded_optim_state_dict(const UnitModule& root,
                                               const torch::optim::Optimizer& optimizer);

// Creates the optimizer's per-parameter state (replacing any) from a full
// optimizer state dict: each rank keeps its slice. `optimizer` must be one
// of the optimizers listed above, built over root.parameters(). Strict:
// every name must be a parameter with a matching shape (parameters absent
// from the dict are allowed: they had no state). rank0_only: only rank 0's
// dict is read, and it is broadcast one tensor at a time.
LoadStateDictResult load_full_optim_state_dict(UnitModule& root, torch::optim::Optimizer& optimizer,
                                               const OptimStateDict& state_dict,
                                               const LoadStateDictOptions& options = {});

}  // namespace fsdp
