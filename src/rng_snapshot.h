#pragma once
// The default random generators' states, taken before a checkpointed region
// runs and put back while it runs again (see [Note: activation
// checkpointing]): the CPU generator always, and the generator of each CUDA
// device a region's input lives on.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <utility>
#include <vector>

namespace fsdp::detail {

struct RngSnapshot {
  std::vector<std::pair<c10::Device, at::Tensor>> states;

  static RngSnapshot capture(const std::vector<at::Tensor>& inputs);
};

// Sets the generators to `snapshot` for its lifetime and back to what they
// were after, so the recomputation draws what the first run drew and leaves
// the RNG stream as if it had not run.
class RngFork {
 public:
  explicit RngFork(const RngSnapshot& snapshot);
  ~RngFork();
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  RngSnapshot saved_;
};

}  // namespace fsdp::detail
