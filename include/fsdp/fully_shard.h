#pragma once
// fully_shard: turn a model (and every fsdp::Sharded<> unit inside it) into
// FSDP units, each rank keeping 1/N of every parameter.
//
//   auto world = fsdp::init_process_group_from_env();
//   auto model = fsdp::fully_shard(GPT(config),
//                                  fsdp::FullyShardOptions(world));
//   torch::optim::AdamW opt(model->parameters(), ...);   // after sharding
//   auto loss = loss_fn(model(x), y);
//   loss.backward();     // gradients reduce-scattered; .grad() is the shard
//   opt.step();          // steps the local shards
//
// Every rank must call it, in the same order, on the same model structure.
// After it returns, each parameter is a 1-D view of its local shard (possibly
// empty) with its original name and identity; build the optimizer over
// model->parameters() only after sharding.

#include <type_traits>
#include <vector>

#include "fsdp/options.h"
#include "fsdp/sharded.h"

namespace fsdp {

// Shards `root` in place. The workhorse behind the templates below.
void fully_shard(UnitModule& root, const FullyShardOptions& options);

template <class T>
struct is_sharded_holder : std::false_type {};
template <class H>
struct is_sharded_holder<Sharded<H>> : std::true_type {};

template <class T, class = void>
struct is_module_holder : std::false_type {};
template <class T>
struct is_module_holder<T, std::void_t<typename T::ContainedType>>
    : std::is_base_of<torch::nn::ModuleHolder<typename T::ContainedType>, T> {};

// Wraps an existing model (a module holder such as GPT) as the root unit and
// shards it.
template <class Holder, class = std::enable_if_t<is_module_holder<Holder>::value &&
                                                 !is_sharded_holder<Holder>::value>>
Sharded<Holder> fully_shard(const Holder& model, const FullyShardOptions& options) {
  Sharded<Holder> root(model);
  fully_shard(*root, options);
  return root;
}

// Shards a model that was declared as a unit itself.
template <class Holder>
Sharded<Holder>& fully_shard(Sharded<Holder>& root, const FullyShardOptions& options) {
  fully_shard(*root, options);
  return root;
}

// set_requires_gradient_sync(false) for a scope, on a unit and every unit
// inside it (the whole model, given the root); restores each one's previous
// setting:
//   for (micro-batches but the last) { fsdp::NoSyncGuard g(*model); ... }
class NoSyncGuard {
 public:
  explicit NoSyncGuard(UnitModule& unit);
  ~NoSyncGuard();
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  UnitModule& unit_;
  std::vector<bool> previous_;  // per unit, in units' pre-order
};

}  // namespace fsdp
