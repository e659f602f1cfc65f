#include "autograd_hooks.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>

#include "unit_state.h"

namespace fsdp::detail {
namespace {

class PostBackwardNode : public torch::autograd::Node {
 public:
  explicit PostBackwardNode(std::weak_ptr<UnitState> unit) : unit_(std::move(unit)) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (auto unit = unit_.lock()) unit->post_backward();
    return std::move(grads);
  }

  std::string name() const override { return "fsdp::PostBackward"; }

 private:
  std::weak_ptr<UnitState> unit_;
};

// Shared by the hooks on one forward's outputs; dies with the last of them,
// i.e. with the graph. See [Note: abandoned forwards].
class ForwardOutputsToken {
 public:
  explicit ForwardOutputsToken(std::weak_ptr<UnitState> unit) : unit_(std::move(unit)) {}
  ~ForwardOutputsToken() {
    if (reached_.load()) return;
    if (auto state = unit_.lock()) state->forward_abandoned();
  }
  void reached() { reached_.store(true); }

 private:
  std::weak_ptr<UnitState> unit_;
  std::atomic<bool> reached_{false};
};

}  // namespace

bool attach_pre_backward_hooks(TensorRefs& outputs, const std::weak_ptr<UnitState>& unit) {
  auto token = std::make_shared<ForwardOutputsToken>(unit);
  bool any = false;
  for (at::Tensor* output : outputs) {
    if (!output->requires_grad()) continue;
    output->register_hook([unit, token](const at::Tensor&) {
      token->reached();
      if (auto state = unit.lock()) state->pre_backward();
    });
    any = true;
  }
  return any;
}

bool attach_post_backward_node(TensorRefs& inputs, const std::weak_ptr<UnitState>& unit) {
  c10::SmallVector<at::Tensor*, 4> targets;
  for (at::Tensor* input : inputs) {
    if (input->requires_grad()) targets.push_back(input);
  }
  if (targets.empty()) return false;
  std::shared_ptr<PostBackwardNode> node(new PostBackwardNode(unit), torch::autograd::deleteNode);
  torch::autograd::edge_list edges;
  edges.reserve(targets.size());
  for (at::Tensor* t : targets) edges.push_back(torch::autograd::impl::gradient_edge(*t));
  node->set_next_edges(std::move(edges));
  for (at::Tensor* t : targets) {
    // An alias, made without grad mode, takes the node as its grad_fn; this
    // is how LibTorch's own custom functions return their inputs.
    at::Tensor alias;
    {
      at::NoGradGuard no_grad;
      alias = t->view_as(*t);
    }
    torch::autograd::set_history(alias, node);
    *t = std::move(alias);
  }
  return true;
}

}  // namespace fsdp::detail
