#include "state_dict/optimizer_fields.h"

#include <c10/util/Exception.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <memory>

#include "compat.h"

namespace fsdp::detail {
namespace {

constexpr const char* kSupported = "supported are torch::optim::Adam, AdamW and SGD";

at::Tensor field(const std::map<std::string, at::Tensor>& tensors, const char* name) {
  auto it = tensors.find(name);
  return it == tensors.end() ? at::Tensor() : it->second;
}

// Adam and AdamW keep the same fields under different state classes.
template <class State>
void read_adam(const State& s, OptimizerFields* out) {
  out->tensors = {{"exp_avg", s.exp_avg()}, {"exp_avg_sq", s.exp_avg_sq()}};
  if (s.max_exp_avg_sq().defined()) out->tensors["max_exp_avg_sq"] = s.max_exp_avg_sq();
  out->step = s.step();
}

template <class State>
std::unique_ptr<State> make_adam(const std::map<std::string, at::Tensor>& tensors, int64_t step) {
  auto s = std::make_unique<State>();
  s->step(std::max<int64_t>(step, 0));
  s->exp_avg(field(tensors, "exp_avg"));
  s->exp_avg_sq(field(tensors, "exp_avg_sq"));
  if (field(tensors, "max_exp_avg_sq").defined()) s->max_exp_avg_sq(field(tensors, "max_exp_avg_sq"));
  return s;
}

}  // namespace

const std::vector<std::string>& optimizer_tensor_fields() {
  static const std::vector<std::string> fields = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq",
                                                  "momentum_buffer"};
  return fields;
}

void check_supported_optimizer(const torch::optim::Optimizer& optimizer, const char* what) {
  TORCH_CHECK(dynamic_cast<const torch::optim::AdamW*>(&optimizer) ||
                  dynamic_cast<const torch::optim::Adam*>(&optimizer) ||
                  dynamic_cast<const torch::optim::SGD*>(&optimizer),
              "fsdp: ", what, " does not support this optimizer; ", kSupported);
}

bool read_optimizer_state(const torch::optim::Optimizer& optimizer, const at::Tensor& param,
                          OptimizerFields* out) {
  const auto& state = optimizer.state();
  auto it = state.find(compat::optimizer_state_key(state, param));
  if (it == state.end()) return false;
  const auto* base = it->second.get();
  *out = OptimizerFields{};
  if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(base)) {
    read_adam(*s, out);
  } else if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(base)) {
    read_adam(*s, out);
  } else if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(base)) {
    out->tensors = {{"momentum_buffer", s->momentum_buffer()}};
  } else {
    TORCH_CHECK(false, "fsdp: cannot read the state of this optimizer; ", kSupported);
  }
  return true;
}

void install_optimizer_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                             const std::map<std::string, at::Tensor>& tensors, int64_t step) {
  auto& state = optimizer.state();
  const auto key = compat::optimizer_state_key(state, param);
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    state[key] = make_adam<torch::optim::AdamWParamState>(tensors, step);
  } else if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    state[key] = make_adam<torch::optim::AdamParamState>(tensors, step);
  } else if (dynamic_cast<torch::optim::SGD*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(field(tensors, "momentum_buffer"));
    state[key] = std::move(s);
  } else {
    TORCH_CHECK(false, "fsdp: cannot load optimizer state into this optimizer; ", kSupported);
  }
}

}  // namespace fsdp::detail
