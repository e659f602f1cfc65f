#pragma once
// Activation checkpointing of one call: run a region (a module's forward)
// without keeping its activations, and run it again in backward.
// Users reach it through fsdp::Checkpointed<M> (fsdp/checkpointed.h) or
// UnitModule::set_activation_checkpointing; this header holds the machinery.
//
// [Note: activation checkpointing]
// Forward runs the region under no grad and keeps only its inputs (saved as
// autograd saves any tensor, so an in-place edit of one before backward is
// caught), the RNG state it started from, and its non-tensor arguments. The
// outputs come out of one autograd node, built with LibTorch's own
// torch::autograd::Function (it handles outputs that are views or inputs,
// and integer outputs). When backward reaches that node it restores the RNG
// state (dropout draws the same masks; the RNG stream after backward is as if
// nothing was recomputed), runs the region again with grad from detached
// copies of the inputs, and backpropagates the output gradients through it:
// the region's parameters get their gradients from that inner backward, and
// the node returns the inputs' gradients to the outer graph. Everything the
// region computes is computed again with the same values, so gradients are
// bitwise those of an uncheckpointed run on the CPU.
//
// Composition with FSDP: a checkpointed unit's pre-backward hook sits on the
// node's outputs, so it runs before the node does: the backward all-gather
// FSDP issues anyway brings the parameters the recomputation uses, and no
// extra collective is needed. The recomputation runs only the wrapped
// module's forward, never a unit's pre-forward, so a checkpointed region
// must not contain a unit (fully_shard refuses it, naming both).
//
// A region none of whose inputs requires grad (say, the first layer after an
// integer input) would give outputs that require no grad, and its parameters
// no gradient: the classic trap of re-entrant checkpointing. Such a region
// with trainable parameters gets one empty tensor that requires grad as an
// extra input, so its node always runs.

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fsdp/tensor_walk.h"

namespace fsdp::detail {

struct RngSnapshot;

// Runs the region again, with grad, from the given tensors in place of its
// tensor inputs (in collect_tensors order); returns its tensor outputs in
// the same order as the first run's.
using Recompute = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

// One checkpointed call, in two halves around the region's first run.
class CheckpointRecorder {
 public:
  // Before the region runs: notes its inputs and the RNG state.
  CheckpointRecorder(const TensorRefs& inputs, bool has_trainable_params);
  // After it ran under no grad: replaces each output by one that backward
  // reaches through the recomputing node.
  void attach(TensorRefs& outputs, Recompute recompute);

 private:
  std::vector<at::Tensor> inputs_;
  std::shared_ptr<const RngSnapshot> rng_;
  bool has_trainable_params_;
};

// A tensor of no elements standing in for each tensor argument in the copy
// of the arguments the node keeps, so the arguments' structure (and
// collect_tensors order) survives while their data lives only in autograd's
// saved variables.
at::Tensor argument_placeholder();

// fn(args...) with activation checkpointing (a plain call without grad).
template <class R, class F, class... Args>
R checkpoint_call(bool has_trainable_params, F fn, Args&&... args) {
  if (!at::GradMode::is_enabled()) return fn(args...);
  auto arguments = std::make_shared<std::tuple<std::decay_t<Args>...>>(std::forward<Args>(args)...);
  TensorRefs inputs;
  collect_tensors(inputs, *arguments);
  CheckpointRecorder recorder(inputs, has_trainable_params);
  R out = [&] {
    at::NoGradGuard no_grad;
    return std::apply(fn, *arguments);
  }();
  for (at::Tensor* input : inputs) *input = argument_placeholder();
  TensorRefs outputs;
  collect_tensors(outputs, out);
  recorder.attach(outputs, [fn, arguments](const std::vector<at::Tensor>& tensors) mutable {
    auto local = *arguments;
    TensorRefs slots;
    collect_tensors(slots, local);
    for (size_t i = 0; i < slots.size(); ++i) *slots[i] = tensors[i];
    R again = std::apply(fn, local);
    TensorRefs results;
    collect_tensors(results, again);
    std::vector<at::Tensor> values;
    for (at::Tensor* t : results) values.push_back(*t);
    return values;
  });
  return out;
}

}  // namespace fsdp::detail
