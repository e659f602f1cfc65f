#pragma once
// fsdp::ProcessGroup on Gloo (CPU tensors). All-gather and reduce-scatter
// are rings over send/recv (see [Note: ring collectives on Gloo]); every
// collective runs on the group's one worker thread (see [Note: one worker
// per group]).

#include "comm/ring.h"
#include "comm/store_backed_group.h"
#include "comm/work_queue.h"
#include "compat.h"

namespace fsdp::comm {

class GlooGroup final : public StoreBackedGroup {
 public:
  GlooGroup(c10::intrusive_ptr<c10d::Store> store, std::string key_prefix, int rank, int size,
            GroupOptions options, std::vector<int> global_ranks);
  ~GlooGroup() override;

  WorkPtr all_gather(const at::Tensor& output, const at::Tensor& input) override;
  WorkPtr reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                         ReduceOp op) override;
  WorkPtr all_reduce(const at::Tensor& tensor, ReduceOp op) override;
  WorkPtr all_to_all(const at::Tensor& output, const at::Tensor& input) override;
  WorkPtr broadcast(const at::Tensor& tensor, int root) override;
  WorkPtr barrier() override;

 private:
  // The calls below run on the worker thread only.
  RingPeers peers();
  int take_tags(int count);
  at::Tensor scratch(at::ScalarType dtype, int64_t numel);
  void ring_all_reduce(const at::Tensor& flat, ReduceOp op);

  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;  // null when size() == 1

  int next_tag_ = 0;        // worker thread; same sequence on every rank
  at::Tensor scratch_;      // worker thread; 1-D kByte, grown to the largest chunk seen

  // Last member: its worker stops before anything above, or in the base
  // class, goes away.
  WorkQueue queue_;
};

}  // namespace fsdp::comm
