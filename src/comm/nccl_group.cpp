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

#include <cstdlib>

#include "comm/collective_checks.h"
#include "comm/store_backed_group.h"
#include "compat.h"
#include "fsdp/error_message.h"

namespace fsdp::comm {
namespace {

constexpr auto kCuda = c10::DeviceType::CUDA;

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

class NcclGroup final : public StoreBackedGroup {
 public:
  NcclGroup(c10::intrusive_ptr<c10d::Store> store, std::string key_prefix, int rank, int size,
            GroupOptions options, std::vector<int> global_ranks)
      : StoreBackedGroup(&make_nccl_group, std::move(store), std::move(key_prefix), rank, size,
                         std::move(options), std::move(global_ranks)) {
    // By default ProcessGroupNCCL calls record_stream on every tensor it is
    // given, so a freed buffer is not reused until the NCCL stream has also
    // finished the collectives queued after it: gathered units then hold
    // their memory well past their reshard (pytorch#147168). FSDP never
    // frees a buffer before waiting on its collective, which orders the
    // reuse on the compute stream, so record_stream buys nothing here. A
    // value the user set is left alone. Read by the constructor below.
    setenv("TORCH_NCCL_AVOID_RECORD_STREAMS", "1", /*overwrite=*/0);
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = this->options().timeout;  // `options` has moved into the base
    nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(rendezvous_store(), rank, size,
                                                        nccl_options);
  }

  ~NcclGroup() override {
    try {
      compat::shutdown_nccl(*nccl_);
    } catch (const std::exception& e) {
      TORCH_WARN("fsdp: shutting down NCCL group '", options().name,
                 "' failed: ", error_message(e));
    }
  }

  WorkPtr all_gather(const at::Tensor& output, const at::Tensor& input) override {
    check_all_gather_args(*this, output, input, kCuda);
    count_all_gather(input);
    at::Tensor out = output, in = input;
    return wrap(nccl_->_allgather_base(out, in), "all_gather");
  }

  WorkPtr reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                         ReduceOp op) override {
    check_reduce_scatter_args(*this, output, input, op, kCuda);
    count_reduce_scatter(output);
    at::Tensor out = output, in = input;
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = to_c10d(op);
    return wrap(nccl_->_reduce_scatter_base(out, in, opts), "reduce_scatter");
  }

  WorkPtr all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    check_all_reduce_args(*this, tensor, op, kCuda);
    count_all_reduce(tensor);
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    return wrap(nccl_->allreduce(tensors, opts), "all_reduce");
  }

  WorkPtr all_to_all(const at::Tensor& output, const at::Tensor& input) override {
    check_all_to_all_args(*this, output, input, kCuda);
    count_all_to_all(input);
    at::Tensor out = output, in = input;
    std::vector<int64_t> equal_chunks;  // empty: size() equal chunks
    return wrap(nccl_->alltoall_base(out, in, equal_chunks, equal_chunks), "all_to_all");
  }

  WorkPtr broadcast(const at::Tensor& tensor, int root) override {
    check_broadcast_args(*this, tensor, root, kCuda);
    count_broadcast(tensor, root);
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return wrap(nccl_->broadcast(tensors, opts), "broadcast");
  }

  WorkPtr barrier() override {
    count_barrier();
    return wrap(nccl_->barrier(), "barrier");
  }

 private:
  WorkPtr wrap(c10::intrusive_ptr<c10d::Work> work, const char* op) {
    return std::make_shared<NcclWork>(std::move(work), describe_op(*this, op));
  }

  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_;
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
