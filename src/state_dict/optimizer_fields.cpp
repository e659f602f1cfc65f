#include "state_dict/optimizer_fields.h"

#include <c10/util/Exception.h>
#include <c10/util/Optional.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <memory>

#include "compat.h"

namespace fsdp::detail {
namespace {

// Every torch::optim optimizer whose state is tensors kept per parameter;
// LBFGS keeps one history for all parameters, which cannot be sharded.
constexpr const char* kSupported =
    "supported are torch::optim::Adam, AdamW, SGD, Adagrad and RMSprop (every torch::optim "
    "optimizer with per-parameter state; LBFGS keeps one history for all parameters)";

// The optimizers whose state libfsdp can read and create.
enum class SupportedOptimizer { kAdam, kAdamW, kSgd, kAdagrad, kRmsprop };

// The one place that tells the supported optimizers apart; nullopt for any other.
c10::optional<SupportedOptimizer> supported_kind(const torch::optim::Optimizer& optimizer) {
  // AdamW is not derived from Adam, so the order does not matter.
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return SupportedOptimizer::kAdamW;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return SupportedOptimizer::kAdam;
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return SupportedOptimizer::kSgd;
  if (dynamic_cast<const torch::optim::Adagrad*>(&optimizer)) return SupportedOptimizer::kAdagrad;
  if (dynamic_cast<const torch::optim::RMSprop*>(&optimizer)) return SupportedOptimizer::kRmsprop;
  return c10::nullopt;
}

// The per-parameter state of a supported optimizer, as its own class.
template <class State>
const State& state_as(const torch::optim::OptimizerParamState& state) {
  const auto* typed = dynamic_cast<const State*>(&state);
  TORCH_INTERNAL_ASSERT(typed, "optimizer state of an unexpected class for its optimizer");
  return *typed;
}

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

std::unique_ptr<torch::optim::SGDParamState> make_sgd(const std::map<std::string, at::Tensor>& tensors) {
  auto s = std::make_unique<torch::optim::SGDParamState>();
  s->momentum_buffer(field(tensors, "momentum_buffer"));
  return s;
}

void read_adagrad(const torch::optim::AdagradParamState& s, OptimizerFields* out) {
  out->tensors = {{"sum", s.sum()}};
  out->step = s.step();
}

std::unique_ptr<torch::optim::AdagradParamState> make_adagrad(
    const std::map<std::string, at::Tensor>& tensors, int64_t step) {
  auto s = std::make_unique<torch::optim::AdagradParamState>();
  s->sum(field(tensors, "sum"));
  s->step(std::max<int64_t>(step, 0));
  return s;
}

// RMSprop keeps momentum_buffer with momentum > 0 and grad_avg when centered.
void read_rmsprop(const torch::optim::RMSpropParamState& s, OptimizerFields* out) {
  out->tensors = {{"square_avg", s.square_avg()}};
  if (s.momentum_buffer().defined()) out->tensors["momentum_buffer"] = s.momentum_buffer();
  if (s.grad_avg().defined()) out->tensors["grad_avg"] = s.grad_avg();
  out->step = s.step();
}

std::unique_ptr<torch::optim::RMSpropParamState> make_rmsprop(
    const std::map<std::string, at::Tensor>& tensors, int64_t step) {
  auto s = std::make_unique<torch::optim::RMSpropParamState>();
  s->square_avg(field(tensors, "square_avg"));
  s->momentum_buffer(field(tensors, "momentum_buffer"));
  s->grad_avg(field(tensors, "grad_avg"));
  s->step(std::max<int64_t>(step, 0));
  return s;
}

}  // namespace

const std::vector<std::string>& optimizer_tensor_fields() {
  static const std::vector<std::string> fields = {"exp_avg",         "exp_avg_sq", "max_exp_avg_sq",
                                                  "momentum_buffer", "sum",        "square_avg",
                                                  "grad_avg"};
  return fields;
}

void check_supported_optimizer(const torch::optim::Optimizer& optimizer, const char* what) {
  TORCH_CHECK(supported_kind(optimizer), "fsdp: ", what, " does not support this optimizer; ", kSupported);
}

bool read_optimizer_state(const torch::optim::Optimizer& optimizer, const at::Tensor& param,
                          OptimizerFields* out) {
  const auto& state = optimizer.state();
  auto it = state.find(compat::optimizer_state_key(state, param));
  if (it == state.end()) return false;
  const auto kind = supported_kind(optimizer);
  TORCH_CHECK(kind, "fsdp: cannot read the state of this optimizer; ", kSupported);
  const torch::optim::OptimizerParamState& base = *it->second;
  *out = OptimizerFields{};
  switch (*kind) {
    case SupportedOptimizer::kAdamW:
      read_adam(state_as<torch::optim::AdamWParamState>(base), out);
      break;
    case SupportedOptimizer::kAdam:
      read_adam(state_as<torch::optim::AdamParamState>(base), out);
      break;
    case SupportedOptimizer::kSgd:
      out->tensors = {{"momentum_buffer", state_as<torch::optim::SGDParamState>(base).momentum_buffer()}};
      break;
    case SupportedOptimizer::kAdagrad:
      read_adagrad(state_as<torch::optim::AdagradParamState>(base), out);
      break;
    case SupportedOptimizer::kRmsprop:
      read_rmsprop(state_as<torch::optim::RMSpropParamState>(base), out);
      break;
  }
  return true;
}

void install_optimizer_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                             const std::map<std::string, at::Tensor>& tensors, int64_t step) {
  const auto kind = supported_kind(optimizer);
  TORCH_CHECK(kind, "fsdp: cannot load optimizer state into this optimizer; ", kSupported);
  auto& state = optimizer.state();
  const auto key = compat::optimizer_state_key(state, param);
  switch (*kind) {
    case SupportedOptimizer::kAdamW:
      state[key] = make_adam<torch::optim::AdamWParamState>(tensors, step);
      break;
    case SupportedOptimizer::kAdam:
      state[key] = make_adam<torch::optim::AdamParamState>(tensors, step);
      break;
    case SupportedOptimizer::kSgd:
      state[key] = make_sgd(tensors);
      break;
    case SupportedOptimizer::kAdagrad:
      state[key] = make_adagrad(tensors, step);
      break;
    case SupportedOptimizer::kRmsprop:
      state[key] = make_rmsprop(tensors, step);
      break;
  }
}

}  // namespace fsdp::detail
