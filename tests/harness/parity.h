#pragma once
// Parity checking: FSDP at world size N against one process training on the
// same global batch (docs/design.md section 8, "Parity").

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm/process_group.h"
#include "fsdp/sharded.h"

namespace fsdp::testing {

// kRmsprop is centered with momentum, so it keeps all three of its fields.
enum class OptimizerKind { kSgdMomentum, kAdamW, kAdam, kSgd, kAdagrad, kRmsprop };
const char* to_string(OptimizerKind kind);

std::unique_ptr<torch::optim::Optimizer> make_optimizer(OptimizerKind kind,
                                                        const std::vector<at::Tensor>& params);

// One optimizer step per call of `loss_of_step` (with the step's index, from
// 0): zero_grad, backward, step. Returns each step's loss, e.g. a one-process
// reference run's:
//   train_steps(*opt, kSteps, [&](int s) { return at::mse_loss(ref->forward(x[s]), y[s]); });
std::vector<double> train_steps(torch::optim::Optimizer& opt, int steps,
                                const std::function<at::Tensor(int)>& loss_of_step);

// Copies every parameter and buffer of `src` into `dst`, matched by name.
void copy_state(torch::nn::Module& dst, const torch::nn::Module& src);

// This rank's rows of a global batch whose first dimension is split evenly.
at::Tensor local_rows(const at::Tensor& global, int rank, int world_size);

// The mean over ranks of a per-rank scalar (a tiny all-reduce).
double global_mean(ProcessGroup& group, double local);

// Relative difference, safe near zero.
double relative_diff(double a, double b);

// Expects each rank's shard of every parameter to match the same slice of
// the reference parameter of that name. Returns the largest difference.
double expect_shards_match(const UnitModule& root, const torch::nn::Module& reference,
                           double rtol, double atol, const std::string& context);

}  // namespace fsdp::testing
