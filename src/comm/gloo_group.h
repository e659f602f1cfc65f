#pragma once
// fsdp::ProcessGroup on Gloo (CPU tensors). All-gather and reduce-scatter
// are rings over send/recv (see [Note: ring collectives on Gloo]); every
// collective runs on the group's one worker thread (see [Note: one worker
// per group]).

#include <mutex>

#include "comm/ring.h"
#include "comm/work_queue.h"
#include "compat.h"
#include "fsdp/comm/process_group.h"

namespace fsdp::comm {

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(c10::intrusive_ptr<c10d::Store> store, std::string key_prefix, int rank, int size,
            GroupOptions options, std::vector<int> global_ranks);
  ~GlooGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const GroupOptions& options() const override { return options_; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }

  WorkPtr all_gather(const at::Tensor& output, const at::Tensor& input) override;
  WorkPtr reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                         ReduceOp op) override;
  WorkPtr all_reduce(const at::Tensor& tensor, ReduceOp op) override;
  WorkPtr broadcast(const at::Tensor& tensor, int root) override;
  WorkPtr barrier() override;
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks,
                                             const std::string& name) override;
  CommCounters counters() const override;

 private:
  // The calls below run on the worker thread only.
  RingPeers peers();
  int take_tags(int count);
  at::Tensor scratch(at::ScalarType dtype, int64_t numel);
  void ring_all_reduce(const at::Tensor& flat, ReduceOp op);

  void count(int64_t CommCounters::*op, int64_t bytes_sent);

  const c10::intrusive_ptr<c10d::Store> store_;  // the root store; sub-groups prefix it
  const std::string key_prefix_;                  // e.g. "fsdp/world/sub2"
  const int rank_;
  const int size_;
  const GroupOptions options_;
  const std::vector<int> global_ranks_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;  // null when size_ == 1
  int subgroups_created_ = 0;                       // caller thread (new_subgroup)

  int next_tag_ = 0;        // worker thread; same sequence on every rank
  at::Tensor scratch_;      // worker thread; 1-D kByte, grown to the largest chunk seen

  mutable std::mutex counters_mu_;
  CommCounters counters_;

  WorkQueue queue_;  // last member: its worker stops before anything above goes away
};

}  // namespace fsdp::comm
