#include "comm/store_backed_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>

#include "comm/collective_checks.h"

namespace fsdp::comm {
namespace {

int64_t nbytes(const at::Tensor& t) { return static_cast<int64_t>(t.nbytes()); }

}  // namespace

StoreBackedGroup::StoreBackedGroup(GroupFactory make_group, c10::intrusive_ptr<c10d::Store> store,
                                   std::string key_prefix, int rank, int size,
                                   GroupOptions options, std::vector<int> global_ranks)
    : make_group_(make_group),
      store_(std::move(store)),
      key_prefix_(std::move(key_prefix)),
      rank_(rank),
      size_(size),
      options_(std::move(options)),
      global_ranks_(std::move(global_ranks)) {
  TORCH_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "fsdp: cannot create group '",
              options_.name, "': rank ", rank_, " is not in [0, ", size_, ")");
}

c10::intrusive_ptr<c10d::Store> StoreBackedGroup::rendezvous_store() const {
  return c10::make_intrusive<c10d::PrefixStore>(key_prefix_, store_);
}

std::shared_ptr<ProcessGroup> StoreBackedGroup::new_subgroup(const std::vector<int>& ranks,
                                                             const std::string& name) {
  check_subgroup_ranks(*this, ranks);
  // Every member calls this in the same order, so the counter names the same
  // rendezvous namespace on every rank, members or not.
  const std::string prefix = key_prefix_ + "/sub" + std::to_string(subgroups_created_++);
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) return nullptr;
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(global_ranks_[r]);
  GroupOptions sub_options = options_;
  sub_options.name = name;
  return make_group_(store_, prefix, static_cast<int>(me - ranks.begin()),
                     static_cast<int>(ranks.size()), sub_options, std::move(globals));
}

CommCounters StoreBackedGroup::counters() const {
  std::lock_guard<std::mutex> lock(counters_mu_);
  return counters_;
}

void StoreBackedGroup::count(int64_t CommCounters::*op, int64_t bytes_sent) {
  std::lock_guard<std::mutex> lock(counters_mu_);
  ++(counters_.*op);
  counters_.bytes_sent += bytes_sent;
}

// A ring all-gather or reduce-scatter sends every chunk but the one that
// ends here: (n-1) chunks.
void StoreBackedGroup::count_all_gather(const at::Tensor& input) {
  count(&CommCounters::all_gather, (size_ - 1) * nbytes(input));
}

void StoreBackedGroup::count_reduce_scatter(const at::Tensor& output) {
  count(&CommCounters::reduce_scatter, (size_ - 1) * nbytes(output));
}

// A ring all-reduce is a reduce-scatter then an all-gather: 2(n-1)/n of it.
void StoreBackedGroup::count_all_reduce(const at::Tensor& tensor) {
  count(&CommCounters::all_reduce, 2 * (size_ - 1) * nbytes(tensor) / size_);
}

// Counted as the root sending the payload to each peer.
void StoreBackedGroup::count_broadcast(const at::Tensor& tensor, int root) {
  count(&CommCounters::broadcast, rank_ == root ? (size_ - 1) * nbytes(tensor) : 0);
}

void StoreBackedGroup::count_barrier() { count(&CommCounters::barrier, 0); }

void StoreBackedGroup::count_all_to_all(const at::Tensor& input) {
  count(&CommCounters::all_to_all, (size_ - 1) * nbytes(input) / size_);
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg: return c10d::ReduceOp::AVG;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown ReduceOp");
}

}  // namespace fsdp::comm
