#pragma once
// fsdp::Sharded<M>: the one line that marks a unit in a model.
//
//   struct GPTImpl : torch::nn::Module {
//     ...
//     blocks->push_back(fsdp::Sharded<Block>(config));   // was: Block(config)
//   };
//   auto model = fsdp::fully_shard(GPT(config), options);  // the root unit
//
// C++ modules have no forward hooks and forward is not virtual, so the unit
// boundary has to be a module of its own. Sharded<M> wraps an M and has
// exactly M's forward signature, so it drops into Sequential, ModuleList or a
// plain member. It registers M's children, parameters and buffers under their
// own names, so named_parameters() reads as if the wrapper were not there.
//
// Until fully_shard() reaches it, a Sharded<M> is a plain pass-through; the
// same model class therefore serves as the single-process reference.

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "fsdp/options.h"
#include "fsdp/tensor_walk.h"

namespace fsdp {

namespace detail {
class UnitState;
class RootState;
class UnitModuleAccess;
}

// The non-template part of every Sharded<M>.
class UnitModule : public torch::nn::Module {
 public:
  // True once fully_shard has sharded this unit.
  bool is_sharded() const { return state_ != nullptr; }
  // The wrapped module.
  const std::shared_ptr<torch::nn::Module>& wrapped() const { return inner_; }
  // Per-unit overrides of the root's options, read and checked by
  // fully_shard; set them before calling it.
  void set_unit_options(UnitOptions options) { unit_options_ = std::move(options); }
  const UnitOptions& unit_options() const { return unit_options_; }

  // Explicit prefetch (after fully_shard): the units whose gathers this
  // unit issues right after its own forward gather, or before its backward.
  // Replaces the order recorded from the previous step. Every rank must set
  // the same lists.
  void set_forward_prefetch(const std::vector<UnitModule*>& units);
  void set_backward_prefetch(const std::vector<UnitModule*>& units);

  // On the root (after fully_shard), as FSDP2 has them on FSDPModule:
  //
  // Turns gradient synchronization off or on for the next backwards. While
  // off, full (unsharded) gradients accumulate locally, using memory for the
  // whole model's gradients; the next synchronizing backward reduces them
  // all. NoSyncGuard is the scoped form.
  void set_requires_gradient_sync(bool requires_sync);
  // Checks on every step (not only the first) that all ranks run the units
  // in the same order, naming the first differing unit on each rank. Costs
  // one tiny all-gather per unit forward. FSDP_DEBUG=1 in the environment at
  // fully_shard time turns it on too. See [Note: execution order validation].
  void set_validate_execution_order(bool every_step);

  void train(bool on = true) override;
  void pretty_print(std::ostream& stream) const override;

 protected:
  explicit UnitModule(std::shared_ptr<torch::nn::Module> inner);
  // Runs impl.forward(args...) between the unit's pre- and post-forward
  // (a plain call until fully_shard reaches this unit).
  template <class R, class Impl, class... Args>
  R run_forward(Impl& impl, Args&&... args);

  std::shared_ptr<torch::nn::Module> inner_;

 private:
  friend class detail::UnitModuleAccess;
  // Called around the wrapped forward; they take pointers to the tensors in
  // the arguments and results, which they may replace (hooks, casts).
  void before_forward(detail::TensorRefs& inputs);
  void after_forward(detail::TensorRefs& outputs);

  std::shared_ptr<detail::UnitState> state_;           // set by fully_shard
  std::shared_ptr<detail::RootState> root_state_;      // on the root only
  UnitOptions unit_options_;
};

template <class R, class Impl, class... Args>
R UnitModule::run_forward(Impl& impl, Args&&... args) {
  if (!is_sharded()) return impl.forward(std::forward<Args>(args)...);
  std::tuple<std::decay_t<Args>...> local(std::forward<Args>(args)...);
  detail::TensorRefs inputs;
  detail::collect_tensors(inputs, local);
  before_forward(inputs);
  R out = std::apply([&impl](auto&... a) -> R { return impl.forward(a...); }, local);
  detail::TensorRefs outputs;
  detail::collect_tensors(outputs, out);
  after_forward(outputs);
  return out;
}

// The forward a unit wrapping an Impl exposes, as a member-function pointer
// type. By default Impl::forward itself; when that is overloaded or a
// template, there is no one signature to copy (NoSingleForward), except for
// LibTorch's Sequential, whose units take and return one tensor, its common
// use. For another such module, specialize this trait, or name the
// signature: fsdp::ShardedImpl<M, at::Tensor (M::*)(const at::Tensor&)>.
struct NoSingleForward {};
template <class Impl, class = void>
struct unit_forward {
  using type = NoSingleForward;
};
template <class Impl>
struct unit_forward<Impl, std::void_t<decltype(&Impl::forward)>> {
  using type = decltype(&Impl::forward);
};
template <>
struct unit_forward<torch::nn::SequentialImpl> {
  using type = at::Tensor (torch::nn::SequentialImpl::*)(const at::Tensor&);
};

template <class Impl, class Forward = typename unit_forward<Impl>::type>
class ShardedImpl;

template <class Impl>
class ShardedImpl<Impl, NoSingleForward> {
  static_assert(sizeof(Impl) == 0,
                "fsdp::Sharded<M>: M::forward is overloaded or a template, so the unit has no "
                "one signature to copy. Name the one to use, e.g. "
                "fsdp::ShardedImpl<M, at::Tensor (M::*)(const at::Tensor&)>, or specialize "
                "fsdp::unit_forward<M> (include/fsdp/sharded.h)");
};

// The wrapper's forward has the wrapped module's exact signature (AnyModule
// and Sequential look at it).
template <class Impl, class Class, class R, class... Args>
class ShardedImpl<Impl, R (Class::*)(Args...)> : public UnitModule {
 public:
  using Wrapped = Impl;

  explicit ShardedImpl(std::shared_ptr<Impl> inner) : UnitModule(inner), typed_(std::move(inner)) {}
  explicit ShardedImpl(const torch::nn::ModuleHolder<Impl>& inner) : ShardedImpl(inner.ptr()) {}

  // Builds the wrapped module from its own constructor arguments.
  template <class First, class... Rest,
            class = std::enable_if_t<
                !std::is_convertible<std::decay_t<First>, std::shared_ptr<Impl>>::value &&
                !std::is_base_of<torch::nn::ModuleHolder<Impl>, std::decay_t<First>>::value>>
  explicit ShardedImpl(First&& first, Rest&&... rest)
      : ShardedImpl(std::make_shared<Impl>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}

  template <class I = Impl, class = std::enable_if_t<std::is_default_constructible<I>::value>>
  ShardedImpl() : ShardedImpl(std::make_shared<Impl>()) {}

  R forward(Args... args) { return this->template run_forward<R>(*module(), std::forward<Args>(args)...); }

  // The wrapped module, e.g. to reach its members.
  const std::shared_ptr<Impl>& module() const { return typed_; }

 private:
  std::shared_ptr<Impl> typed_;  // == inner_, typed (Impl may derive virtually from Module)
};

template <class Impl, class Class, class R, class... Args>
class ShardedImpl<Impl, R (Class::*)(Args...) const>
    : public ShardedImpl<Impl, R (Class::*)(Args...)> {
 public:
  using ShardedImpl<Impl, R (Class::*)(Args...)>::ShardedImpl;
};

// The holder: fsdp::Sharded<Block>(args...) builds a Block inside a unit;
// fsdp::Sharded<Block>(existing_block) wraps an existing one.
template <class Holder>
class Sharded : public torch::nn::ModuleHolder<ShardedImpl<typename Holder::ContainedType>> {
  using Base = torch::nn::ModuleHolder<ShardedImpl<typename Holder::ContainedType>>;

 public:
  using Base::Base;
  Sharded(const Holder& inner)  // NOLINT: implicit by design, like holders
      : Base(std::make_shared<ShardedImpl<typename Holder::ContainedType>>(inner.ptr())) {}
};

}  // namespace fsdp
