#pragma once
// Argument checks shared by every backend, so that a wrong call reads the
// same on Gloo and NCCL: what was wrong, the values, and the fix.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "fsdp/comm/process_group.h"

namespace fsdp::comm {

// "all_gather on group 'world' (rank 1 of 2)": the prefix of every error.
std::string describe_op(const ProcessGroup& group, const char* op);

// `device`: the device type the backend works on (CPU for Gloo, CUDA for NCCL).
void check_all_gather_args(const ProcessGroup& group, const at::Tensor& output,
                           const at::Tensor& input, c10::DeviceType device);
void check_reduce_scatter_args(const ProcessGroup& group, const at::Tensor& output,
                               const at::Tensor& input, ReduceOp op, c10::DeviceType device);
void check_all_reduce_args(const ProcessGroup& group, const at::Tensor& tensor, ReduceOp op,
                           c10::DeviceType device);
void check_broadcast_args(const ProcessGroup& group, const at::Tensor& tensor, int root,
                          c10::DeviceType device);
void check_all_to_all_args(const ProcessGroup& group, const at::Tensor& output,
                           const at::Tensor& input, c10::DeviceType device);
// Group ranks for new_subgroup: in [0, size), strictly ascending, non-empty.
void check_subgroup_ranks(const ProcessGroup& group, const std::vector<int>& ranks);

}  // namespace fsdp::comm
