#pragma once
// What every backend group shares, the way c10d's ProcessGroupGloo and
// ProcessGroupNCCL share c10d::Backend: who the group is (rank, size,
// options, global ranks), the store it and its sub-groups meet in, the
// counters, and new_subgroup(). A backend (GlooGroup, NcclGroup) adds only
// the collectives.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "comm/backends.h"
#include "fsdp/comm/process_group.h"

namespace fsdp::comm {

class StoreBackedGroup : public ProcessGroup {
 public:
  int rank() const final { return rank_; }
  int size() const final { return size_; }
  const GroupOptions& options() const final { return options_; }
  const std::vector<int>& global_ranks() const final { return global_ranks_; }

  // Builds the child with `make_group_`, so it has this group's backend.
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks,
                                             const std::string& name) final;
  CommCounters counters() const final;

 protected:
  // `make_group` is the factory of the backend itself (make_gloo_group or
  // make_nccl_group); see backends.h for the other arguments.
  StoreBackedGroup(GroupFactory make_group, c10::intrusive_ptr<c10d::Store> store,
                   std::string key_prefix, int rank, int size, GroupOptions options,
                   std::vector<int> global_ranks);

  // The root store seen through this group's key prefix: where the backend
  // meets its peers.
  c10::intrusive_ptr<c10d::Store> rendezvous_store() const;

  // Each collective counts itself when it is issued, with the payload bytes
  // this rank puts on the wire. One rule for every backend, so a test's bound
  // holds whichever one ran.
  void count_all_gather(const at::Tensor& input);
  void count_reduce_scatter(const at::Tensor& output);
  void count_all_reduce(const at::Tensor& tensor);
  void count_broadcast(const at::Tensor& tensor, int root);
  void count_barrier();
  void count_all_to_all(const at::Tensor& input);

 private:
  void count(int64_t CommCounters::*op, int64_t bytes_sent);

  const GroupFactory make_group_;
  const c10::intrusive_ptr<c10d::Store> store_;  // the root store; sub-groups prefix it
  const std::string key_prefix_;                  // e.g. "fsdp/world/sub2"
  const int rank_;
  const int size_;
  const GroupOptions options_;
  const std::vector<int> global_ranks_;
  int subgroups_created_ = 0;  // caller thread (new_subgroup)

  mutable std::mutex counters_mu_;
  CommCounters counters_;
};

// The c10d reduction for `op`. Gloo has no AVG: GlooGroup sums, then divides
// by the group size itself, so only NCCL is ever handed kAvg.
c10d::ReduceOp to_c10d(ReduceOp op);

}  // namespace fsdp::comm
