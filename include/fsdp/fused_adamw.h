#pragma once
// fsdp::FusedAdamW: torch::optim::AdamW with its step done by LibTorch's
// multi-tensor fused kernel. Usable by any LibTorch program, sharded or not.
//
//   std::vector<torch::optim::OptimizerParamGroup> groups = ...;  // as for AdamW
//   fsdp::FusedAdamW opt(std::move(groups), torch::optim::AdamWOptions(3e-4));
//   ... loss.backward(); opt.step(); opt.zero_grad();
//
// It *is* a torch::optim::AdamW: the same AdamWOptions (per group, changed
// between steps as usual), the same AdamWParamState per parameter, the same
// save/load archives, and libfsdp's optimizer state dicts and checkpoints
// read and write it as they do AdamW. A checkpoint saved by one loads into
// the other.
//
// Where LibTorch has the fused kernel (at::_fused_adamw_, LibTorch >= 2.4 on
// CPU and CUDA), step() makes one kernel launch per parameter group, device
// and dtype instead of about ten per parameter, and never waits on the
// device. Elsewhere (LibTorch 1.13) step() is torch::optim::AdamW's own
// for-loop step: the same results, at the for-loop's speed;
// fused_kernel_available() says which this build does.
//
// The results equal torch::optim::AdamW's within rounding: the kernel
// computes each element in one pass in float (double for double
// parameters), where the for-loop rounds after each operation to the
// parameter's dtype. See [Note: fused AdamW] in src/fused_adamw.cpp.

#include <torch/optim/adamw.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace fsdp {

namespace detail {
class DeviceStepCounts;  // src/fused_adamw.cpp
}

class FusedAdamW : public torch::optim::AdamW {
 public:
  // As torch::optim::AdamW's constructors. `maximize` (default false) ascends
  // the objective instead, as Python's AdamW(maximize=True) does; it applies
  // to every group (LibTorch's AdamWOptions has no such field).
  explicit FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                      torch::optim::AdamWOptions defaults = {}, bool maximize = false);
  explicit FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults = {},
                      bool maximize = false);
  ~FusedAdamW() override;

  // One AdamW step on every parameter that has a gradient. `closure`, when
  // given, is called first with gradients enabled and its loss returned.
  at::Tensor step(LossClosure closure = nullptr) override;

  bool maximize() const { return maximize_; }

  // Whether step() uses at::_fused_adamw_ in this build (LibTorch >= 2.4);
  // false means torch::optim::AdamW's for-loop step.
  static bool fused_kernel_available();

 private:
  void fused_step();
  void for_loop_step();

  bool maximize_;
  // The step counts the fused kernel reads, one per parameter, kept equal to
  // AdamWParamState's int64 step. See [Note: fused AdamW step counts].
  std::unique_ptr<detail::DeviceStepCounts> device_steps_;
};

}  // namespace fsdp
