#pragma once
// Deterministic tensors of every dtype, for the checkpoint tests.

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

#include <vector>

namespace fsdp::testing {

inline at::Tensor make_tensor(const std::vector<int64_t>& shape, at::ScalarType dtype, int seed) {
  const int64_t n = c10::multiply_integers(shape);
  at::Tensor base = at::arange(n, at::kDouble).mul(0.37).add(seed).sin().mul(100);
  if (dtype == at::kBool) return base.gt(0).reshape(shape);
  return base.to(dtype).reshape(shape);
}

}  // namespace fsdp::testing
