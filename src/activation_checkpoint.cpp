#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "fsdp/checkpoint.h"
#include "rng_snapshot.h"

namespace fsdp::detail {
namespace {

// What the node keeps besides the saved inputs: how to run the region again,
// the RNG state it started from, and the first run's outputs until forward
// hands them over.
struct Region : torch::CustomClassHolder {
  Recompute recompute;
  std::shared_ptr<const RngSnapshot> rng;
  std::vector<at::Tensor> first_outputs;
  size_t num_inputs = 0;  // real inputs; a trailing one may be the grad anchor
};

// Detached copies of the saved inputs, as leaves that collect their gradients.
std::vector<at::Tensor> detached_leaves(const std::vector<at::Tensor>& saved, size_t count) {
  std::vector<at::Tensor> leaves;
  leaves.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    at::Tensor leaf = saved[i].detach();
    leaf.requires_grad_(saved[i].requires_grad());
    leaves.push_back(std::move(leaf));
  }
  return leaves;
}

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs,
                                                const c10::intrusive_ptr<Region>& region) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["region"] = c10::IValue::make_capsule(region);
    return std::move(region->first_outputs);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto holder = ctx->saved_data["region"].toCapsule();
    auto* region = static_cast<Region*>(holder.get());
    const std::vector<at::Tensor> saved = ctx->get_saved_variables();
    const bool create_graph = at::GradMode::is_enabled();
    std::vector<at::Tensor> leaves = detached_leaves(saved, region->num_inputs);
    std::vector<at::Tensor> outputs;
    {
      RngFork fork(*region->rng);
      at::AutoGradMode grad(true);
      outputs = region->recompute(leaves);
    }
    TORCH_CHECK(outputs.size() == grad_outputs.size(), "fsdp: a checkpointed module returned ",
                outputs.size(), " tensors when run again in backward but ", grad_outputs.size(),
                " in forward; its forward must compute the same thing from the same inputs");
    run_inner_backward(outputs, grad_outputs, create_graph);
    torch::autograd::variable_list grads;
    for (const at::Tensor& leaf : leaves) grads.push_back(leaf.requires_grad() ? leaf.grad() : at::Tensor());
    grads.resize(saved.size() + 1);  // the grad anchor and the region get none
    return grads;
  }

 private:
  static void run_inner_backward(const std::vector<at::Tensor>& outputs,
                                 const torch::autograd::variable_list& grad_outputs, bool create_graph) {
    torch::autograd::variable_list roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].requires_grad() || !grad_outputs[i].defined()) continue;
      roots.push_back(outputs[i]);
      grads.push_back(grad_outputs[i]);
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads, /*retain_graph=*/false, create_graph);
  }
};

}  // namespace

at::Tensor argument_placeholder() {
  static const at::Tensor* placeholder = new at::Tensor(at::empty({0}));  // never destroyed
  return *placeholder;
}

CheckpointRecorder::CheckpointRecorder(const TensorRefs& inputs, bool has_trainable_params)
    : has_trainable_params_(has_trainable_params) {
  for (at::Tensor* input : inputs) inputs_.push_back(*input);
  rng_ = std::make_shared<const RngSnapshot>(RngSnapshot::capture(inputs_));
}

void CheckpointRecorder::attach(TensorRefs& outputs, Recompute recompute) {
  auto region = c10::make_intrusive<Region>();
  region->recompute = std::move(recompute);
  region->rng = std::move(rng_);
  region->num_inputs = inputs_.size();
  for (at::Tensor* output : outputs) region->first_outputs.push_back(*output);
  bool any_input_needs_grad = false;
  for (const at::Tensor& input : inputs_) any_input_needs_grad |= input.requires_grad();
  if (!any_input_needs_grad && has_trainable_params_) {
    // See [Note: activation checkpointing]: the grad anchor.
    inputs_.push_back(at::empty({0}).requires_grad_(true));
  }
  torch::autograd::variable_list wrapped = CheckpointFunction::apply(at::TensorList(inputs_), region);
  for (size_t i = 0; i < outputs.size(); ++i) *outputs[i] = std::move(wrapped[i]);
  inputs_.clear();
}

}  // namespace fsdp::detail
