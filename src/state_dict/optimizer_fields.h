#pragma once
// Reading and creating torch::optim per-parameter state by field name, for
// every optimizer libfsdp can shard the state of: those of
// fsdp/optim_state_dict.h (Adam, AdamW, SGD, Adagrad, RMSprop).
// Shared by the optimizer state dicts and the training-state checkpoints.
// Internal to src/.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace fsdp::detail {

struct OptimizerFields {
  std::map<std::string, at::Tensor> tensors;  // by field name, in name order
  int64_t step = -1;                          // -1: the optimizer keeps none (SGD)
};

// Every tensor field name, in a fixed order.
const std::vector<std::string>& optimizer_tensor_fields();

// Throws naming the supported optimizers unless `optimizer` is one of them.
void check_supported_optimizer(const torch::optim::Optimizer& optimizer, const char* what);

// The state of `param`, or false if the optimizer has none for it yet.
bool read_optimizer_state(const torch::optim::Optimizer& optimizer, const at::Tensor& param,
                          OptimizerFields* out);

// Replaces the state of `param` with a fresh state object holding
// `tensors` (fields the optimizer does not use are ignored) and `step`
// (ignored by SGD; a negative step counts as 0).
void install_optimizer_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                             const std::map<std::string, at::Tensor>& tensors, int64_t step);

}  // namespace fsdp::detail
