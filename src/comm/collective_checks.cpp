#include "comm/collective_checks.h"

#include <c10/util/Exception.h>

namespace fsdp::comm {
namespace {

const char* backend_fix(c10::DeviceType device) {
  return device == c10::DeviceType::CPU
             ? "the Gloo backend works on CPU tensors; move the tensor with .cpu(), use "
               "CommBackend::kNccl for CUDA tensors, or set GroupOptions::host_staging to move "
               "CUDA tensors through host memory (several ranks on one GPU)"
             : "the NCCL backend works on CUDA tensors; move the tensor with .cuda() or use "
               "CommBackend::kGloo for CPU tensors";
}

void check_tensor(const ProcessGroup& group, const char* op, const char* arg,
                  const at::Tensor& t, c10::DeviceType device) {
  TORCH_CHECK(t.defined(), "fsdp: ", describe_op(group, op), ": ", arg, " is an undefined tensor");
  TORCH_CHECK(t.device().type() == device, "fsdp: ", describe_op(group, op), ": ", arg, " is on ",
              t.device(), " but ", backend_fix(device));
  TORCH_CHECK(t.is_contiguous(), "fsdp: ", describe_op(group, op), ": ", arg,
              " must be contiguous (sizes ", t.sizes(), ", strides ", t.strides(),
              "); pass .contiguous() or a flat buffer");
}

void check_same_dtype(const ProcessGroup& group, const char* op, const at::Tensor& output,
                      const at::Tensor& input) {
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "fsdp: ", describe_op(group, op),
              ": output dtype ", output.scalar_type(), " does not match input dtype ",
              input.scalar_type(), "; cast one of them so both match");
}

void check_reduce_op(const ProcessGroup& group, const char* op, const at::Tensor& t,
                     ReduceOp reduce_op) {
  // Integer averages would have to round; we refuse rather than pick a rounding.
  TORCH_CHECK(reduce_op != ReduceOp::kAvg || at::isFloatingType(t.scalar_type()),
              "fsdp: ", describe_op(group, op), ": ReduceOp::kAvg needs a floating-point dtype, got ",
              t.scalar_type(), "; use ReduceOp::kSum and divide by size() yourself");
}

}  // namespace

std::string describe_op(const ProcessGroup& group, const char* op) {
  return std::string(op) + " on group '" + group.options().name + "' (rank " +
         std::to_string(group.rank()) + " of " + std::to_string(group.size()) + ")";
}

void check_all_gather_args(const ProcessGroup& group, const at::Tensor& output,
                           const at::Tensor& input, c10::DeviceType device) {
  check_tensor(group, "all_gather", "output", output, device);
  check_tensor(group, "all_gather", "input", input, device);
  check_same_dtype(group, "all_gather", output, input);
  TORCH_CHECK(output.numel() == group.size() * input.numel(), "fsdp: ", describe_op(group, "all_gather"),
              ": output has ", output.numel(), " elements but must have size() * input.numel() = ",
              group.size(), " * ", input.numel(), " = ", group.size() * input.numel(),
              "; allocate the output for every rank's shard");
}

void check_reduce_scatter_args(const ProcessGroup& group, const at::Tensor& output,
                               const at::Tensor& input, ReduceOp op, c10::DeviceType device) {
  check_tensor(group, "reduce_scatter", "output", output, device);
  check_tensor(group, "reduce_scatter", "input", input, device);
  check_same_dtype(group, "reduce_scatter", output, input);
  TORCH_CHECK(input.numel() == group.size() * output.numel(),
              "fsdp: ", describe_op(group, "reduce_scatter"), ": input has ", input.numel(),
              " elements but must have size() * output.numel() = ", group.size(), " * ",
              output.numel(), " = ", group.size() * output.numel(),
              "; pad the input to a multiple of the group size");
  check_reduce_op(group, "reduce_scatter", input, op);
}

void check_all_reduce_args(const ProcessGroup& group, const at::Tensor& tensor, ReduceOp op,
                           c10::DeviceType device) {
  check_tensor(group, "all_reduce", "tensor", tensor, device);
  check_reduce_op(group, "all_reduce", tensor, op);
}

void check_broadcast_args(const ProcessGroup& group, const at::Tensor& tensor, int root,
                          c10::DeviceType device) {
  check_tensor(group, "broadcast", "tensor", tensor, device);
  TORCH_CHECK(root >= 0 && root < group.size(), "fsdp: ", describe_op(group, "broadcast"), ": root ", root,
              " is out of range; it is a group rank in [0, ", group.size(), ")");
}

void check_all_to_all_args(const ProcessGroup& group, const at::Tensor& output,
                           const at::Tensor& input, c10::DeviceType device) {
  check_tensor(group, "all_to_all", "output", output, device);
  check_tensor(group, "all_to_all", "input", input, device);
  check_same_dtype(group, "all_to_all", output, input);
  TORCH_CHECK(output.numel() == input.numel() && input.numel() % group.size() == 0, "fsdp: ",
              describe_op(group, "all_to_all"), ": input has ", input.numel(), " elements and output ",
              output.numel(), "; both need the same count, a multiple of the group size ", group.size());
}

void check_subgroup_ranks(const ProcessGroup& group, const std::vector<int>& ranks) {
  const std::string what = "fsdp: " + describe_op(group, "new_subgroup");
  TORCH_CHECK(!ranks.empty(), what, ": the rank list is empty; list at least one group rank");
  for (size_t i = 0; i < ranks.size(); ++i) {
    TORCH_CHECK(ranks[i] >= 0 && ranks[i] < group.size(), what, ": rank ", ranks[i],
                " is out of range; ranks are group ranks in [0, ", group.size(), ")");
    TORCH_CHECK(i == 0 || ranks[i] > ranks[i - 1], what, ": ranks must be strictly ascending ",
                "without duplicates, but ", ranks[i], " follows ", ranks[i - 1],
                "; sort the list and remove duplicates");
  }
}

}  // namespace fsdp::comm
