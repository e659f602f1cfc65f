#pragma once
// Bitwise comparison of gradients, for tests whose reference computes the
// same values by another route (activation checkpointing recomputes them).

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace fsdp::testing {

// Every parameter's gradient, cloned (undefined stays undefined).
inline std::vector<at::Tensor> grads_of(const torch::nn::Module& module) {
  std::vector<at::Tensor> grads;
  for (const auto& p : module.parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return grads;
}

// Expects the same tensors to the last bit, naming the first that differ.
inline void expect_bitwise(const std::vector<at::Tensor>& expected, const std::vector<at::Tensor>& actual,
                    const std::string& where) {
  ASSERT_EQ(expected.size(), actual.size()) << where;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].defined(), actual[i].defined()) << where << ": tensor " << i;
    if (!expected[i].defined()) continue;
    EXPECT_TRUE(at::equal(expected[i], actual[i]))
        << where << ": tensor " << i << " differs by up to "
        << (expected[i].to(at::kDouble) - actual[i].to(at::kDouble)).abs().max().item<double>();
  }
}

}  // namespace fsdp::testing
