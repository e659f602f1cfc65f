#include "deferred_init.h"

#include <c10/util/Exception.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "compat.h"
#include "unit_name.h"

namespace fsdp {

void defer_init(torch::nn::Module& module) {
  for (auto& param : module.parameters(/*recurse=*/true)) {
    if (param.numel() == 0) continue;
    compat::resize_storage_bytes(param.storage().unsafeGetStorageImpl(), 0);
  }
}

bool is_deferred(const at::Tensor& tensor) {
  return tensor.defined() && tensor.numel() > 0 && tensor.storage().nbytes() == 0;
}

}  // namespace fsdp

namespace fsdp::detail {
namespace {

// [Note: deferred initialization]
// A deferred model has parameters with shapes but no storage (see
// fsdp::defer_init). fully_shard builds every unit's shard from the shapes
// alone (zeros), then walks the modules in pre-order, the order LibTorch
// modules are normally constructed in. For each module with deferred
// parameters of its own it (1) gives them full, uninitialized storage, (2)
// runs the user's param_init_fn or the module's reset_parameters(), (3) with
// sync_module_states, broadcasts them from rank 0, (4) copies this rank's
// slice of each into its unit's shard and (5) points them back at the shard,
// freeing the full storage. Every rank initializes every module in full, so
// all ranks consume the random generator identically, and in the same order
// as one process constructing the model whole: the same seed gives the same
// model (if the init functions draw what the constructors would). The most
// full parameter bytes alive at once is one module's; memory_stats reports it
// as peak_init_param_bytes. Ignored parameters that are deferred are
// initialized the same way and kept whole.

struct Slot {
  FlatParamGroup* group;
  int64_t index;
};

// LibTorch's modules whose reset_parameters() initializes their own
// parameters (reset_parameters is not virtual, so each is named here).
bool reset_known_module(torch::nn::Module& module) {
  if (auto* m = dynamic_cast<torch::nn::LinearImpl*>(&module)) return m->reset_parameters(), true;
  if (auto* m = dynamic_cast<torch::nn::BilinearImpl*>(&module)) return m->reset_parameters(), true;
  if (auto* m = dynamic_cast<torch::nn::EmbeddingImpl*>(&module)) return m->reset_parameters(), true;
  if (auto* m = dynamic_cast<torch::nn::EmbeddingBagImpl*>(&module)) return m->reset_parameters(), true;
  if (auto* m = dynamic_cast<torch::nn::LayerNormImpl*>(&module)) return m->reset_parameters(), true;
  if (auto* m = dynamic_cast<torch::nn::GroupNormImpl*>(&module)) return m->reset_parameters(), true;
  if (auto* m = dynamic_cast<torch::nn::Conv1dImpl*>(&module)) return m->reset_parameters(), true;
  if (auto* m = dynamic_cast<torch::nn::Conv2dImpl*>(&module)) return m->reset_parameters(), true;
  if (auto* m = dynamic_cast<torch::nn::Conv3dImpl*>(&module)) return m->reset_parameters(), true;
  return false;
}

class Materializer {
 public:
  Materializer(RootState& state, const DeferredParams& deferred, const FullyShardOptions& options)
      : state_(state), deferred_(deferred), options_(options) {
    for (const auto& unit : state.units()) {
      auto& group = unit->params();
      for (size_t i = 0; i < group.params().size(); ++i) {
        slots_.emplace(group.params()[i].unsafeGetTensorImpl(),
                       Slot{&group, static_cast<int64_t>(i)});
      }
    }
  }

  void visit(torch::nn::Module& module, const std::string& path) {
    if (!seen_.insert(&module).second) return;
    // A unit's wrapper mirrors its wrapped module's parameters and children;
    // initialize the wrapped module itself (its type has reset_parameters).
    auto* unit = dynamic_cast<UnitModule*>(&module);
    torch::nn::Module& target = unit ? *unit->wrapped() : module;
    materialize_own(target, path);
    for (const auto& child : module.named_children())
      visit(*child.value(), join_module_path(path, child.key()));
  }

 private:
  void materialize_own(torch::nn::Module& module, const std::string& path) {
    std::vector<std::pair<std::string, at::Tensor>> own;
    for (const auto& p : module.named_parameters(/*recurse=*/false)) {
      const auto* impl = p.value().unsafeGetTensorImpl();
      if (done_.count(impl)) continue;
      if (deferred_.count(impl) || is_deferred(p.value())) own.emplace_back(p.key(), p.value());
    }
    if (own.empty()) return;
    at::NoGradGuard no_grad;
    int64_t bytes = 0;
    for (auto& [name, param] : own) {
      const auto it = slots_.find(param.unsafeGetTensorImpl());
      const std::vector<int64_t> shape =
          it == slots_.end() ? param.sizes().vec() : it->second.group->shapes()[it->second.index];
      const at::Device device = it == slots_.end() ? param.device() : it->second.group->params()[0].device();
      if (it == slots_.end()) {  // ignored parameter: storage back in place, kept whole
        compat::resize_storage_bytes(param.storage().unsafeGetStorageImpl(), param.nbytes());
      } else {
        param.set_data(at::empty(shape, param.options().device(device)));
      }
      bytes += static_cast<int64_t>(param.nbytes());
    }
    state_.counters()->init_bytes.add(bytes);
    const std::string& shown = display_name(path);
    if (options_.param_init_fn()) {
      options_.param_init_fn()(module);
    } else {
      TORCH_CHECK(reset_known_module(module), "fsdp: module '", shown, "' (", module.name(),
                  ") has deferred parameters ('", own.front().first,
                  "'...) and no reset_parameters() fsdp knows; pass "
                  "FullyShardOptions().param_init_fn(fn) that initializes a module's own "
                  "parameters");
    }
    for (auto& [name, param] : own) {
      TORCH_CHECK(!is_deferred(param), "fsdp: param_init_fn left parameter '",
                  join_module_path(path, name),
                  "' without storage; initialize parameters in place (e.g. p.normal_()), do not "
                  "replace them");
      if (options_.sync_module_states() && state_.world().size() > 1) {
        state_.world().broadcast(param.data(), 0)->wait();
      }
      done_.insert(param.unsafeGetTensorImpl());
      const auto it = slots_.find(param.unsafeGetTensorImpl());
      if (it != slots_.end()) it->second.group->load_full_param(it->second.index, param);
    }
    for (auto& [name, param] : own) {
      const auto it = slots_.find(param.unsafeGetTensorImpl());
      if (it != slots_.end()) it->second.group->expose_shards();
    }
    state_.counters()->init_bytes.sub(bytes);
  }

  RootState& state_;
  const DeferredParams& deferred_;
  const FullyShardOptions& options_;
  std::unordered_map<const c10::TensorImpl*, Slot> slots_;
  std::unordered_set<const c10::TensorImpl*> done_;
  std::unordered_set<const torch::nn::Module*> seen_;
};

}  // namespace

DeferredParams find_deferred_params(const DiscoveredModel& model) {
  DeferredParams deferred;
  for (const auto& unit : model.units) {
    for (const auto& p : unit.params) {
      if (is_deferred(p)) deferred.insert(p.unsafeGetTensorImpl());
    }
  }
  return deferred;
}

void materialize_deferred(UnitModule& root, RootState& state, const DeferredParams& deferred,
                          const FullyShardOptions& options) {
  Materializer(state, deferred, options).visit(root, "");
}

}  // namespace fsdp::detail
