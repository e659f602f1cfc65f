#pragma once
// The machinery shared by fsdp::Sharded<M> and fsdp::Checkpointed<M>: a
// module that stands in for another one, invisibly, with its exact forward.
//
// C++ modules have no forward hooks and forward is not virtual, so a wrapper
// that acts around a forward has to be a module of its own. A ModuleWrapper
// registers the wrapped module's children, parameters and buffers under
// their own names, so named_parameters() of any enclosing module reads as if
// the wrapper were not there, and state dicts are unchanged by wrapping.
// TypedWrapper<Base, M> gives it M's forward signature, so it drops into
// Sequential, ModuleList or a plain member; each call goes through
// Base::run_forward, where the wrapper does its work.

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

namespace fsdp {

class ModuleWrapper : public torch::nn::Module {
 public:
  // The wrapped module.
  const std::shared_ptr<torch::nn::Module>& wrapped() const { return inner_; }

  void train(bool on = true) override;
  void pretty_print(std::ostream& stream) const override;

 protected:
  // `kind` names the wrapper in errors and printing, e.g. "fsdp::Sharded".
  ModuleWrapper(const std::string& kind, std::shared_ptr<torch::nn::Module> inner);
  // Whether any parameter of the wrapped module is trainable (activation
  // checkpointing needs to know when no input requires a gradient).
  bool has_trainable_params() const;

  std::shared_ptr<torch::nn::Module> inner_;

 private:
  std::string kind_;
};

// The forward a wrapper of an Impl exposes, as a member-function pointer
// type. By default Impl::forward itself; when that is overloaded or a
// template, there is no one signature to copy (NoSingleForward), except for
// LibTorch's Sequential, whose wrappers take and return one tensor, its
// common use. For another such module, specialize this trait, or name the
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

namespace detail {

// Base (a ModuleWrapper with `template <class R, class Impl, class... Args>
// R run_forward(const std::shared_ptr<Impl>&, Args&&...)`) wrapping an Impl
// and exposing the forward signature `Forward`.
template <class Base, class Impl, class Forward>
class TypedWrapper;

template <class Base, class Impl>
class TypedWrapper<Base, Impl, NoSingleForward> {
  static_assert(sizeof(Impl) == 0,
                "fsdp::Sharded<M> / fsdp::Checkpointed<M>: M::forward is overloaded or a "
                "template, so the wrapper has no one signature to copy. Name the one to use, "
                "e.g. fsdp::ShardedImpl<M, at::Tensor (M::*)(const at::Tensor&)>, or specialize "
                "fsdp::unit_forward<M> (include/fsdp/module_wrapper.h)");
};

// The wrapper's forward has the wrapped module's exact signature (AnyModule
// and Sequential look at it).
template <class Base, class Impl, class Class, class R, class... Args>
class TypedWrapper<Base, Impl, R (Class::*)(Args...)> : public Base {
 public:
  using Wrapped = Impl;

  explicit TypedWrapper(std::shared_ptr<Impl> inner) : Base(inner), typed_(std::move(inner)) {}
  explicit TypedWrapper(const torch::nn::ModuleHolder<Impl>& inner) : TypedWrapper(inner.ptr()) {}

  // Builds the wrapped module from its own constructor arguments.
  template <class First, class... Rest,
            class = std::enable_if_t<
                !std::is_convertible<std::decay_t<First>, std::shared_ptr<Impl>>::value &&
                !std::is_base_of<torch::nn::ModuleHolder<Impl>, std::decay_t<First>>::value>>
  explicit TypedWrapper(First&& first, Rest&&... rest)
      : TypedWrapper(std::make_shared<Impl>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}

  template <class I = Impl, class = std::enable_if_t<std::is_default_constructible<I>::value>>
  TypedWrapper() : TypedWrapper(std::make_shared<Impl>()) {}

  R forward(Args... args) { return this->template run_forward<R>(typed_, std::forward<Args>(args)...); }

  // Runs another method of the wrapped module the way forward runs, e.g.
  // unit->call(&Block::forward_with_cache, x, cache): a unit gathers its
  // parameters around it (FSDP2's register_fsdp_forward_method), a
  // checkpointed module recomputes it in backward.
  template <class Method, class... A>
  auto call(Method method, A&&... args) {
    using Result = std::invoke_result_t<Method, Impl&, std::decay_t<A>&...>;
    static_assert(!std::is_void<Result>::value && !std::is_reference<Result>::value,
                  "call(): the method must return a value (tensors, or tuples and vectors of them)");
    return this->template run_method<Result>(typed_, method, std::forward<A>(args)...);
  }

  // The wrapped module, e.g. to reach its members.
  const std::shared_ptr<Impl>& module() const { return typed_; }

 private:
  std::shared_ptr<Impl> typed_;  // == inner_, typed (Impl may derive virtually from Module)
};

template <class Base, class Impl, class Class, class R, class... Args>
class TypedWrapper<Base, Impl, R (Class::*)(Args...) const>
    : public TypedWrapper<Base, Impl, R (Class::*)(Args...)> {
 public:
  using TypedWrapper<Base, Impl, R (Class::*)(Args...)>::TypedWrapper;
};

// The holder of a wrapper around Holder's module: W<Block>(args...) builds a
// Block inside; W<Block>(existing_block) wraps an existing one.
template <class Base, class Holder>
class WrapperHolder
    : public torch::nn::ModuleHolder<TypedWrapper<Base, typename Holder::ContainedType,
                                                  typename unit_forward<typename Holder::ContainedType>::type>> {
  using Impl = TypedWrapper<Base, typename Holder::ContainedType,
                            typename unit_forward<typename Holder::ContainedType>::type>;
  using Held = torch::nn::ModuleHolder<Impl>;

 public:
  using Held::Held;
  WrapperHolder(const Holder& inner)  // NOLINT: implicit by design, like holders
      : Held(std::make_shared<Impl>(inner.ptr())) {}
};

}  // namespace detail
}  // namespace fsdp
