#include "comm/host_staged_group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <initializer_list>
#include <utility>

#include "comm/collective_checks.h"

namespace fsdp::comm {
namespace {

at::Tensor pinned_like(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(t.is_cuda()));
}

// A pinned host copy of `t`, complete when this returns.
// See [Note: collectives of CUDA tensors through host memory].
at::Tensor stage_in(const at::Tensor& t) {
  at::Tensor host = pinned_like(t);
  host.copy_(t);  // blocking: waits for the current stream, then for the copy
  return host;
}

// Refuses, with the fix, a tensor the group does not take: one not on
// `device_type`, or on another device than the first.
void check_staged_tensors(const ProcessGroup& group, const char* op, c10::DeviceType device_type,
                          std::initializer_list<const at::Tensor*> tensors) {
  const at::Tensor& first = **tensors.begin();
  for (const at::Tensor* t : tensors) {
    TORCH_CHECK(t->defined(), "fsdp: ", describe_op(group, op), ": a tensor is undefined");
    TORCH_CHECK(t->device().type() == device_type, "fsdp: ", describe_op(group, op),
                ": a tensor is on ", t->device(), " but a host-staged Gloo group takes ",
                c10::DeviceTypeName(device_type, /*lower_case=*/true),
                " tensors only, as NCCL does; build it there (fsdp::collective_device names ",
                "the device for a group)");
    TORCH_CHECK(t->device() == first.device(), "fsdp: ", describe_op(group, op),
                ": the tensors are on ", first.device(), " and ", t->device(),
                "; put every tensor of one collective on the same device");
  }
}

// Waits for the host collective, then queues the copy of its result back to
// the CUDA tensor on the current stream.
class StagedWork final : public Work {
 public:
  StagedWork(WorkPtr host_work, at::Tensor device_result, at::Tensor host_result)
      : host_work_(std::move(host_work)),
        device_result_(std::move(device_result)),
        host_result_(std::move(host_result)) {}

  void wait() override {
    host_work_->wait();
    if (copied_back_) return;  // waiting twice copies once
    device_result_.copy_(host_result_, /*non_blocking=*/true);
    copied_back_ = true;
  }
  bool is_completed() const override { return host_work_->is_completed(); }

 private:
  WorkPtr host_work_;
  at::Tensor device_result_;  // where the caller expects the result
  at::Tensor host_result_;    // pinned, written by the Gloo collective
  bool copied_back_ = false;
};

WorkPtr copied_back(WorkPtr host_work, const at::Tensor& device_result,
                    const at::Tensor& host_result) {
  return std::make_shared<StagedWork>(std::move(host_work), device_result, host_result);
}

}  // namespace

HostStagedGroup::HostStagedGroup(ProcessGroupPtr host_group, c10::DeviceType device_type)
    : host_(std::move(host_group)), device_type_(device_type) {
  TORCH_INTERNAL_ASSERT(host_ && host_->options().backend == CommBackend::kGloo &&
                        host_->options().host_staging);
}

WorkPtr HostStagedGroup::all_gather(const at::Tensor& output, const at::Tensor& input) {
  check_staged_tensors(*this, "all_gather", device_type_, {&output, &input});
  const at::Tensor host_output = pinned_like(output);
  return copied_back(host_->all_gather(host_output, stage_in(input)), output, host_output);
}

WorkPtr HostStagedGroup::reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                        ReduceOp op) {
  check_staged_tensors(*this, "reduce_scatter", device_type_, {&output, &input});
  const at::Tensor host_output = pinned_like(output);
  return copied_back(host_->reduce_scatter(host_output, stage_in(input), op), output, host_output);
}

WorkPtr HostStagedGroup::all_reduce(const at::Tensor& tensor, ReduceOp op) {
  check_staged_tensors(*this, "all_reduce", device_type_, {&tensor});
  const at::Tensor host = stage_in(tensor);
  return copied_back(host_->all_reduce(host, op), tensor, host);
}

WorkPtr HostStagedGroup::all_to_all(const at::Tensor& output, const at::Tensor& input) {
  check_staged_tensors(*this, "all_to_all", device_type_, {&output, &input});
  const at::Tensor host_output = pinned_like(output);
  return copied_back(host_->all_to_all(host_output, stage_in(input)), output, host_output);
}

WorkPtr HostStagedGroup::broadcast(const at::Tensor& tensor, int root) {
  check_staged_tensors(*this, "broadcast", device_type_, {&tensor});
  const at::Tensor host = stage_in(tensor);
  return copied_back(host_->broadcast(host, root), tensor, host);
}

std::shared_ptr<ProcessGroup> HostStagedGroup::new_subgroup(const std::vector<int>& ranks,
                                                            const std::string& name) {
  ProcessGroupPtr child = host_->new_subgroup(ranks, name);
  return child ? std::make_shared<HostStagedGroup>(std::move(child), device_type_) : nullptr;
}

}  // namespace fsdp::comm
