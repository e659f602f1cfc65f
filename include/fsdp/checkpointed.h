#pragma once
// fsdp::Checkpointed<M>: activation checkpointing of any submodule, in one
// line, in the style of fsdp::Sharded<M>.
//
//   layers->push_back(fsdp::Checkpointed<Block>(config));   // was: Block(config)
//
// Forward keeps only the module's inputs; backward runs its forward again
// with gradients on and backpropagates through it, trading one extra forward
// for the module's activations. Dropout draws the same masks both times.
// It works with or without FSDP, inside a unit too. For a whole unit, use
// UnitModule::set_activation_checkpointing instead: a Checkpointed<M> whose M
// holds units is refused by fully_shard, since running it again would run
// those units' forward inside backward. See [Note: activation checkpointing]
// and docs/activation-checkpointing.md.

#include <torch/nn/pimpl.h>

#include <memory>
#include <utility>

#include "fsdp/checkpoint.h"
#include "fsdp/module_wrapper.h"

namespace fsdp {

// The non-template part of every Checkpointed<M>.
class CheckpointedModule : public ModuleWrapper {
 protected:
  explicit CheckpointedModule(std::shared_ptr<torch::nn::Module> inner)
      : ModuleWrapper("fsdp::Checkpointed", std::move(inner)) {}

  template <class R, class Impl, class... Args>
  R run_forward(const std::shared_ptr<Impl>& impl, Args&&... args) {
    return detail::checkpoint_call<R>(
        has_trainable_params(),
        [impl](auto&&... a) -> R { return impl->forward(std::forward<decltype(a)>(a)...); },
        std::forward<Args>(args)...);
  }
  template <class R, class Impl, class Method, class... Args>
  R run_method(const std::shared_ptr<Impl>& impl, Method method, Args&&... args) {
    return detail::checkpoint_call<R>(
        has_trainable_params(),
        [impl, method](auto&&... a) -> R { return ((*impl).*method)(std::forward<decltype(a)>(a)...); },
        std::forward<Args>(args)...);
  }
};

// An alias, as fsdp::ShardedImpl is (see there).
template <class Impl, class Forward = typename unit_forward<Impl>::type>
using CheckpointedImpl = detail::TypedWrapper<CheckpointedModule, Impl, Forward>;

// The holder: fsdp::Checkpointed<Block>(args...) builds a Block inside;
// fsdp::Checkpointed<Block>(existing_block) wraps an existing one.
template <class Holder>
class Checkpointed : public detail::WrapperHolder<CheckpointedModule, Holder> {
 public:
  using detail::WrapperHolder<CheckpointedModule, Holder>::WrapperHolder;
};

}  // namespace fsdp
