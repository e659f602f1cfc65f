// fsdp::ProcessGroup on NCCL (CUDA tensors). NCCL has every collective we
// need natively (_allgather_base, _reduce_scatter_base, allreduce with AVG),
// so this is a thin adapter: no worker thread, no rings. NCCL orders
// collectives on its own stream, and Work::wait() follows c10d's stream
// semantics: the caller's current CUDA stream waits for the collective.
//
// Compiled only into CUDA builds (FSDP_WITH_NCCL); elsewhere
// make_nccl_group() says how to get one.

#include "comm/backends.h"

#if defined(FSDP_WITH_NCCL)

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "comm/collective_checks.h"
#include "compat.h"
#include "fsdp/error_message.h"

namespace fsdp::comm {
namespace {

constexpr auto kCuda = c10::DeviceType::CUDA;

int64_t nbytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg: return c10d::ReduceOp::AVG;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown ReduceOp");
}

class NcclWork final : public Work {
 public:
  NcclWork(c10::intrusive_ptr<c10d::Work> work, std::string what)
      : work_(std::move(work)), what_(std::move(what)) {}
  void wait() override {
    try {
      work_->wait();
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "fsdp: ", what_, " failed: ", error_message(e));
    }
  }
  bool is_completed() const override { return work_->isCompleted(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(c10::intrusive_ptr<c10d::Store> store, std::string key_prefix, int rank, int size,
            GroupOptions options, std::vector<int> global_ranks)
      : store_(std::move(store)),
        key_prefix_(std::move(key_prefix)),
        rank_(rank),
        size_(size),
        options_(std::move(options)),
        global_ranks_(std::move(global_ranks)) {
    // By default ProcessGroupNCCL calls record_stream on every tensor it is
    // given, so a freed buffer is not reused until the NCCL stream has also
    // finished the collectives queued after it: gathered units then hold
    // their memory well past their reshard (pytorch#147168). FSDP never
    // frees a buffer before waiting on its collective, which orders the
    // reuse on the compute stream, so record_stream buys nothing here. A
    // value the user set is left alone. Read by the constructor below.
    setenv("TORCH_NCCL_AVOID_RECORD_STREAMS", "1", /*overwrite=*/0);
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = options_.timeout;
    nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(
        c10::make_intrusive<c10d::PrefixStore>(key_prefix_, store_), rank_, size_, nccl_options);
  }

  ~NcclGroup() override {
    try {
      compat::shutdown_nccl(*nccl_);
    } catch (const std::exception& e) {
      TORCH_WARN("fsdp: shutting down NCCL group '", options_.name, "' failed: ", error_message(e));
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const GroupOptions& options() const override { return options_; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }

  WorkPtr all_gather(const at::Tensor& output, const at::Tensor& input) override {
    check_all_gather_args(*this, output, input, kCuda);
    count(&CommCounters::all_gather, (size_ - 1) * nbytes(input));
    at::Tensor out = output, in = input;
    return wrap(nccl_->_allgather_base(out, in), "all_gather");
  }

  WorkPtr reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                         ReduceOp op) override {
    check_reduce_scatter_args(*this, output, input, op, kCuda);
    count(&CommCounters::reduce_scatter, (size_ - 1) * nbytes(output));
    at::Tensor out = output, in = input;
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = to_c10d(op);
    return wrap(nccl_->_reduce_scatter_base(out, in, opts), "reduce_scatter");
  }

  WorkPtr all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    check_all_reduce_args(*this, tensor, op, kCuda);
    count(&CommCounters::all_reduce, 2 * (size_ - 1) * nbytes(tensor) / size_);
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    return wrap(nccl_->allreduce(tensors, opts), "all_reduce");
  }

  WorkPtr broadcast(const at::Tensor& tensor, int root) override {
    check_broadcast_args(*this, tensor, root, kCuda);
    count(&CommCounters::broadcast, rank_ == root ? (size_ - 1) * nbytes(tensor) : 0);
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return wrap(nccl_->broadcast(tensors, opts), "broadcast");
  }

  WorkPtr barrier() override {
    count(&CommCounters::barrier, 0);
    return wrap(nccl_->barrier(), "barrier");
  }

  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks,
                                             const std::string& name) override {
    check_subgroup_ranks(*this, ranks);
    const std::string prefix = key_prefix_ + "/sub" + std::to_string(subgroups_created_++);
    const auto me = std::find(ranks.begin(), ranks.end(), rank_);
    if (me == ranks.end()) return nullptr;
    std::vector<int> globals;
    for (int r : ranks) globals.push_back(global_ranks_[r]);
    GroupOptions sub_options = options_;
    sub_options.name = name;
    return make_nccl_group(store_, prefix, static_cast<int>(me - ranks.begin()),
                           static_cast<int>(ranks.size()), sub_options, std::move(globals));
  }

  CommCounters counters() const override {
    std::lock_guard<std::mutex> lock(counters_mu_);
    return counters_;
  }

 private:
  WorkPtr wrap(c10::intrusive_ptr<c10d::Work> work, const char* op) {
    return std::make_shared<NcclWork>(std::move(work), describe_op(*this, op));
  }
  void count(int64_t CommCounters::*op, int64_t bytes_sent) {
    std::lock_guard<std::mutex> lock(counters_mu_);
    ++(counters_.*op);
    counters_.bytes_sent += bytes_sent;
  }

  const c10::intrusive_ptr<c10d::Store> store_;
  const std::string key_prefix_;
  const int rank_;
  const int size_;
  const GroupOptions options_;
  const std::vector<int> global_ranks_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_;
  int subgroups_created_ = 0;
  mutable std::mutex counters_mu_;
  CommCounters counters_;
};

}  // namespace

ProcessGroupPtr make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                const std::string& key_prefix, int rank, int size,
                                const GroupOptions& options, std::vector<int> global_ranks) {
  try {
    return std::make_shared<NcclGroup>(store, key_prefix, rank, size, options,
                                       std::move(global_ranks));
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "fsdp: creating NCCL group '", options.name, "' (rank ", rank, " of ", size,
                ") failed: ", error_message(e));
  }
}

}  // namespace fsdp::comm

#else  // !FSDP_WITH_NCCL

#include <c10/util/Exception.h>

namespace fsdp::comm {

ProcessGroupPtr make_nccl_group(const c10::intrusive_ptr<c10d::Store>&, const std::string&, int,
                                int, const GroupOptions& options, std::vector<int>) {
  TORCH_CHECK(false, "fsdp: group '", options.name, "' asks for CommBackend::kNccl, but this ",
              "libfsdp was built against a LibTorch without CUDA. Use CommBackend::kGloo for CPU "
              "tensors, or rebuild against a CUDA LibTorch (e.g. a torch wheel's "
              "torch.utils.cmake_prefix_path)");
}

}  // namespace fsdp::comm

#endif
