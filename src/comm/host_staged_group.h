#pragma once
// A Gloo group that also takes CUDA tensors, moving them through pinned host
// memory (GroupOptions::host_staging). Internal to src/comm.
//
// [Note: collectives of CUDA tensors through host memory]
// NCCL cannot put two ranks on one GPU, so a multi-rank CUDA job on a
// machine with one GPU (a developer's, or the test lane of `ctest -L gpu`)
// needs another transport. A staged collective:
//   1. copies each CUDA argument into a pinned host tensor on the calling
//      thread's current stream and waits for that stream, so the copy holds
//      what every kernel queued before the collective wrote;
//   2. runs the Gloo collective on the host tensors, asynchronously as usual;
//   3. in Work::wait(), copies the results back on the waiting thread's
//      current stream without blocking: kernels queued after wait() on that
//      stream see them, as after NCCL's wait(). The caching host allocator
//      keeps the pinned buffer until that copy has run.
// So a staged collective is ordered against the compute stream on both
// sides, and costs a host sync at issue: a debugging and testing transport,
// never a fast one, and never chosen unless asked for (NCCL is the backend
// for CUDA tensors). Like NCCL it takes CUDA tensors only: a multi-rank
// test on it then catches the tensor a NCCL job would refuse (a CPU scalar
// handed to a group, say), which is what the lane of tests/gpu/ is for.

#include "fsdp/comm/process_group.h"

namespace fsdp::comm {

class HostStagedGroup final : public ProcessGroup {
 public:
  // `host_group`: a Gloo group whose options have host_staging set.
  // `device_type`: the tensors it takes, CUDA; the CPU suite's tests of the
  // staging itself pass kCPU (then the host copies are not pinned).
  explicit HostStagedGroup(ProcessGroupPtr host_group,
                           c10::DeviceType device_type = c10::DeviceType::CUDA);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const GroupOptions& options() const override { return host_->options(); }
  const std::vector<int>& global_ranks() const override { return host_->global_ranks(); }
  CommCounters counters() const override { return host_->counters(); }

  WorkPtr all_gather(const at::Tensor& output, const at::Tensor& input) override;
  WorkPtr reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  WorkPtr all_reduce(const at::Tensor& tensor, ReduceOp op) override;
  WorkPtr all_to_all(const at::Tensor& output, const at::Tensor& input) override;
  WorkPtr broadcast(const at::Tensor& tensor, int root) override;
  WorkPtr barrier() override { return host_->barrier(); }
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks,
                                             const std::string& name) override;

 private:
  ProcessGroupPtr host_;  // Gloo, CPU tensors only
  const c10::DeviceType device_type_;
};

}  // namespace fsdp::comm
