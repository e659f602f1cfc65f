#pragma once
// fsdp::Sharded<M>: the one line that marks a unit in a model.
//
//   struct GPTImpl : torch::nn::Module {
//     ...
//     blocks->push_back(fsdp::Sharded<Block>(config));   // was: Block(config)
//   };
//   auto model = fsdp::fully_shard(GPT(config), options);  // the root unit
//
// Sharded<M> wraps an M and has exactly M's forward signature (see
// fsdp/module_wrapper.h), so it drops into Sequential, ModuleList or a plain
// member, and named_parameters() reads as if the wrapper were not there.
//
// Until fully_shard() reaches it, a Sharded<M> is a plain pass-through; the
// same model class therefore serves as the single-process reference.

#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/checkpoint.h"
#include "fsdp/module_wrapper.h"
#include "fsdp/options.h"
#include "fsdp/tensor_walk.h"

namespace fsdp {

namespace detail {
class UnitState;
class RootState;
class UnitModuleAccess;
}

// See UnitModule::set_all_reduce_hook.
using AllReduceHook = std::function<void(const at::Tensor& reduced_grad_shard)>;

// What UnitModule::unshard(/*async_op=*/true) returns. wait() finishes the
// gathers it started; a unit's next forward waits for its own anyway.
class UnshardHandle {
 public:
  void wait();

 private:
  friend class UnitModule;
  std::vector<std::weak_ptr<detail::UnitState>> units_;
};

// The non-template part of every Sharded<M>.
class UnitModule : public ModuleWrapper {
 public:
  // True once fully_shard has sharded this unit.
  bool is_sharded() const { return state_ != nullptr; }
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

  // Runtime switches (after fully_shard), as FSDP2 has them on FSDPModule.
  // Each applies to this unit and, with `recurse`, to every unit inside its
  // module; they take effect from the next forward or backward. See
  // [Note: runtime switches] in src/unit_state.h.
  //
  // Turns gradient synchronization off or on for the next backwards. While
  // off, the unit's full (unsharded) gradients accumulate locally, using
  // memory for its whole gradients; its next synchronizing backward reduces
  // them all. NoSyncGuard is the scoped form.
  void set_requires_gradient_sync(bool requires_sync, bool recurse = true);
  // Hybrid strategies (and kNoShard): whether the reduced gradients are
  // all-reduced across replicas. While off, each backward still
  // reduce-scatters within the shard group, and the results are summed
  // aside; the next backward with it on all-reduces them together with its
  // own. .grad() is complete only after that backward. No effect on units
  // that have no replicas.
  void set_requires_all_reduce(bool requires_all_reduce, bool recurse = true);
  // Frees the gathered parameters after forward (true) or keeps them until
  // the end of backward (false), as FullyShardOptions::reshard_after_forward
  // chose at fully_shard time.
  void set_reshard_after_forward(bool reshard, bool recurse = true);
  // Frees the gathered parameters after backward (true, the default) or
  // keeps them for the next forward (false), which then gathers nothing:
  // for gradient accumulation, at the memory of the gathered units in
  // between. A forward after the shards changed (an optimizer step, a load)
  // gathers afresh; reshard() frees what is kept. As FSDP2's
  // set_reshard_after_backward. See [Note: keeping the parameters gathered
  // after backward] in src/unit_state.cpp.
  void set_reshard_after_backward(bool reshard, bool recurse = true);
  // The reduction divides the summed gradient by `factor` instead of by the
  // number of ranks it was summed over (for example 1.0 to sum, when the loss
  // is already normalized by the global token count). factor > 0.
  void set_gradient_divide_factor(double factor, bool recurse = true);
  // Called with the unit's reduced gradient shard (1-D, reduce dtype, already
  // divided) once it is complete: after the reduce-scatter, or after the
  // all-reduce across replicas; it may change the tensor in place. An empty
  // function removes it.
  void set_all_reduce_hook(AllReduceHook hook, bool recurse = true);
  // Gathers the unit's parameters and keeps them gathered until reshard():
  // the forwards in between gather and free nothing (FSDP2's unshard(), for
  // generation loops: unshard once, decode many tokens, reshard). Only
  // forwards without grad may run while held, and the shards must not change
  // (optimizer steps, checkpoint loads): each forward checks, and says to
  // reshard() first. Collective over the unit's shard group: every rank
  // makes the same calls. With `async_op`, the gathers are started and the
  // handle's wait() (or the next forward) finishes them. Not recursive unless
  // asked, as in FSDP2. See [Note: holding a unit unsharded] in
  // src/unit_state.cpp.
  UnshardHandle unshard(bool async_op = false, bool recurse = false);
  // Frees what unshard() gathered, or what set_reshard_after_backward(false)
  // kept; a no-op on a unit that holds neither.
  void reshard(bool recurse = false);
  // Checks on every step (not only the first) that all ranks run the units
  // in the same order, naming the first differing unit on each rank. Costs
  // one tiny all-gather per unit forward. FSDP_DEBUG=1 in the environment at
  // fully_shard time turns it on too. See [Note: execution order validation].
  void set_validate_execution_order(bool every_step);

  // Activation checkpointing of this unit: forward keeps only the unit's
  // inputs, and backward runs the forward again, on the parameters its
  // all-gather brings back anyway. Takes effect from the next forward, with
  // or without fully_shard. A unit that holds other units cannot be
  // checkpointed (fully_shard says so). See docs/activation-checkpointing.md.
  void set_activation_checkpointing(bool on) { checkpoint_activations_ = on; }
  bool activation_checkpointing() const { return checkpoint_activations_; }

  // One unit over several sibling modules (FSDP2's fully_shard([a, b])):
  // before fully_shard, this unit's parameters join `leader`'s unit, in one
  // flat buffer; either module's forward gathers it. Weights tied between
  // the two (an embedding and its output head) can then live in a unit
  // other than the root. Neither module may hold the other; the leader's
  // UnitOptions apply. Each call is one forward of the unit: it gathers and
  // frees around each (reshard_after_forward(false) keeps it gathered from
  // the first call to the end of backward).
  void share_unit_with(UnitModule& leader);
  // The unit this one joined, or nullptr.
  UnitModule* shared_unit_leader() const { return unit_leader_; }

 protected:
  explicit UnitModule(std::shared_ptr<torch::nn::Module> inner);
  // Runs impl->forward(args...) between the unit's pre- and post-forward
  // (a plain call until fully_shard reaches this unit), checkpointed if set.
  template <class R, class Impl, class... Args>
  R run_forward(const std::shared_ptr<Impl>& impl, Args&&... args) {
    return run_unit<R>([impl](auto&&... a) -> R { return impl->forward(std::forward<decltype(a)>(a)...); },
                       std::forward<Args>(args)...);
  }
  // The same for another method of the wrapped module (ShardedImpl::call).
  template <class R, class Impl, class Method, class... Args>
  R run_method(const std::shared_ptr<Impl>& impl, Method method, Args&&... args) {
    return run_unit<R>(
        [impl, method](auto&&... a) -> R { return ((*impl).*method)(std::forward<decltype(a)>(a)...); },
        std::forward<Args>(args)...);
  }

 private:
  friend class detail::UnitModuleAccess;
  // Called around the wrapped forward; they take pointers to the tensors in
  // the arguments and results, which they may replace (hooks, casts).
  void before_forward(detail::TensorRefs& inputs);
  void after_forward(detail::TensorRefs& outputs);
  // An exception is leaving the wrapped forward: free what the unit
  // gathered. See [Note: recovery after an exception].
  void forward_failed() noexcept;

  // Calls forward_failed() unless dismissed.
  class ForwardFailureGuard {
   public:
    explicit ForwardFailureGuard(UnitModule& unit) : unit_(unit) {}
    ~ForwardFailureGuard() {
      if (armed_) unit_.forward_failed();
    }
    ForwardFailureGuard(const ForwardFailureGuard&) = delete;
    ForwardFailureGuard& operator=(const ForwardFailureGuard&) = delete;
    void dismiss() { armed_ = false; }

   private:
    UnitModule& unit_;
    bool armed_ = true;
  };

  template <class R, class Fn, class... Args>
  R run_unit(Fn fn, Args&&... args);

  // fn(args...), checkpointed when set.
  template <class R, class Fn, class... Args>
  R call_checkpointed(Fn& fn, Args&&... args) {
    if (!checkpoint_activations_) return fn(std::forward<Args>(args)...);
    return detail::checkpoint_call<R>(has_trainable_params(), fn, std::forward<Args>(args)...);
  }
  std::shared_ptr<detail::UnitState> state_;           // set by fully_shard
  std::shared_ptr<detail::RootState> root_state_;      // on the root only
  UnitOptions unit_options_;
  bool checkpoint_activations_ = false;
  UnitModule* unit_leader_ = nullptr;
};

template <class R, class Fn, class... Args>
R UnitModule::run_unit(Fn fn, Args&&... args) {
  if (!is_sharded()) return call_checkpointed<R>(fn, std::forward<Args>(args)...);
  std::tuple<std::decay_t<Args>...> local(std::forward<Args>(args)...);
  detail::TensorRefs inputs;
  detail::collect_tensors(inputs, local);
  before_forward(inputs);
  ForwardFailureGuard guard(*this);
  R out = std::apply([this, &fn](auto&... a) -> R { return call_checkpointed<R>(fn, a...); }, local);
  detail::TensorRefs outputs;
  detail::collect_tensors(outputs, out);
  after_forward(outputs);
  guard.dismiss();
  return out;
}

// A unit wrapping an Impl, with Impl's forward signature. When Impl::forward
// is overloaded or a template, name the one to use:
// fsdp::ShardedImpl<M, at::Tensor (M::*)(const at::Tensor&)>. An alias, not
// a derived class: AnyModule (inside Sequential) files a module under the
// class that declares its forward.
template <class Impl, class Forward = typename unit_forward<Impl>::type>
using ShardedImpl = detail::TypedWrapper<UnitModule, Impl, Forward>;

// The holder: fsdp::Sharded<Block>(args...) builds a Block inside a unit;
// fsdp::Sharded<Block>(existing_block) wraps an existing one.
template <class Holder>
class Sharded : public detail::WrapperHolder<UnitModule, Holder> {
 public:
  using detail::WrapperHolder<UnitModule, Holder>::WrapperHolder;
};

}  // namespace fsdp
