#include "harness/parity.h"

#include <gtest/gtest.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cmath>

#include "fsdp/introspection.h"

namespace fsdp::testing {

std::vector<double> train_steps(torch::optim::Optimizer& opt, int steps,
                                const std::function<at::Tensor(int)>& loss_of_step) {
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    at::Tensor loss = loss_of_step(step);
    opt.zero_grad();
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

const char* to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgdMomentum: return "SgdMomentum";
    case OptimizerKind::kAdamW: return "AdamW";
    case OptimizerKind::kAdam: return "Adam";
    case OptimizerKind::kSgd: return "Sgd";
    case OptimizerKind::kAdagrad:
      return "Adagrad";
    case OptimizerKind::kRmsprop:
      return "Rmsprop";
  }
  return "?";
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(OptimizerKind kind,
                                                        const std::vector<at::Tensor>& params) {
  switch (kind) {
    case OptimizerKind::kSgdMomentum:
      return std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
    case OptimizerKind::kAdamW:
      return std::make_unique<torch::optim::AdamW>(
          params, torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3));
    case OptimizerKind::kAdagrad:
      return std::make_unique<torch::optim::Adagrad>(
          params, torch::optim::AdagradOptions(0.05).lr_decay(0.01).initial_accumulator_value(0.1));
    case OptimizerKind::kRmsprop:
      // eps 1e-3, not LibTorch's 1e-8: a gradient that is rounding noise
      // (|g| ~ 1e-9) would take a step of lr * g / (0.1 |g| + eps), and the
      // runs would differ by 1e-4 where only rounding differs. A lost field
      // still moves a parameter by about lr.
      return std::make_unique<torch::optim::RMSprop>(
          params, torch::optim::RMSpropOptions(1e-3).eps(1e-3).momentum(0.9).centered(true));
  }
  return nullptr;
}

void copy_state(torch::nn::Module& dst, const torch::nn::Module& src) {
  at::NoGradGuard no_grad;
  auto src_params = src.named_parameters();
  for (auto& p : dst.named_parameters()) {
    const at::Tensor* s = src_params.find(p.key());
    TORCH_CHECK(s, "copy_state: no parameter '", p.key(), "' in the source");
    p.value().copy_(*s);
  }
  auto src_buffers = src.named_buffers();
  for (auto& b : dst.named_buffers()) {
    const at::Tensor* s = src_buffers.find(b.key());
    TORCH_CHECK(s, "copy_state: no buffer '", b.key(), "' in the source");
    b.value().copy_(*s);
  }
}

at::Tensor local_rows(const at::Tensor& global, int rank, int world_size) {
  const int64_t rows = global.size(0);
  TORCH_CHECK(rows % world_size == 0, "local_rows: ", rows, " rows do not split over ", world_size);
  const int64_t per = rows / world_size;
  return global.narrow(0, rank * per, per);
}

double global_mean(ProcessGroup& group, double local) {
  // See [Note: a group's device]: on the CPU for Gloo, on the GPU otherwise.
  at::Tensor t = at::full(
      {1}, local,
      at::TensorOptions(at::kDouble).device(collective_device(group, at::Device(at::kCPU))));
  group.all_reduce(t, ReduceOp::kSum)->wait();
  return t.item<double>() / group.size();
}

double relative_diff(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-8});
}

double expect_shards_match(const UnitModule& root, const torch::nn::Module& reference,
                           double rtol, double atol, const std::string& context) {
  auto ref_params = reference.named_parameters();
  double worst = 0;
  for (const auto& shard : param_shards(root)) {
    const at::Tensor* ref = ref_params.find(shard.name);
    EXPECT_NE(ref, nullptr) << context << ": reference has no parameter " << shard.name;
    if (!ref) continue;
    EXPECT_EQ(ref->sizes().vec(), shard.full_shape) << context << ": " << shard.name;
    at::Tensor actual = shard.param.detach().reshape(-1);
    // On the shard's device: offloaded shards live on the host.
    at::Tensor expected =
        ref->detach().reshape(-1).narrow(0, shard.flat_begin, shard.numel).to(actual.device());
    EXPECT_EQ(actual.numel(), shard.numel) << context << ": " << shard.name;
    if (actual.numel() != expected.numel() || actual.numel() == 0) continue;
    const double diff = (actual - expected).abs().max().item<double>();
    worst = std::max(worst, diff);
    EXPECT_TRUE(at::allclose(actual, expected, rtol, atol))
        << context << ": parameter " << shard.name << " differs by up to " << diff;
  }
  return worst;
}

}  // namespace fsdp::testing
