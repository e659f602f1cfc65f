#include "comm/gloo_group.h"

#include <ATen/ATen.h>
#include <signal.h>

#include <algorithm>

#include "comm/backends.h"
#include "comm/collective_checks.h"
#include "comm/deadline_store.h"
#include "comm/member_barrier.h"
#include "fsdp/error_message.h"

namespace fsdp::comm {
namespace {

constexpr auto kCpu = c10::DeviceType::CPU;
// Tags wrap here; every rank wraps at the same point of the same sequence.
constexpr int kTagLimit = 1 << 30;

std::vector<at::Tensor> even_chunks(const at::Tensor& flat, int n) {
  const int64_t k = flat.numel() / n;
  std::vector<at::Tensor> chunks;
  for (int i = 0; i < n; ++i) chunks.push_back(flat.narrow(0, i * k, k));
  return chunks;
}

// n near-equal chunks of any numel, for the all-reduce fallback.
std::vector<at::Tensor> balanced_chunks(const at::Tensor& flat, int n) {
  std::vector<at::Tensor> chunks;
  const int64_t total = flat.numel();
  for (int i = 0; i < n; ++i) {
    const int64_t begin = total * i / n;
    chunks.push_back(flat.narrow(0, begin, total * (i + 1) / n - begin));
  }
  return chunks;
}

// Gloo's native collectives in the LibTorch versions we support handle these
// dtypes; others (bfloat16 in 1.13, bool) use our rings.
bool gloo_reduces_natively(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kInt:
    case at::kLong: case at::kChar: case at::kByte:
      return true;
    default:
      return false;
  }
}

// For the error of a failed creation: the members that never began it,
// asked of the store for a moment only, since it may be the store that
// failed. A peer that never came is then named, not just "Socket Timeout".
std::string members_that_never_began(const c10::intrusive_ptr<c10d::Store>& store, int size) {
  try {
    const auto absent = call_within(std::chrono::seconds(1),
                                    [store, size] { return members_not_joining(*store, size); });
    if (absent) return *absent;
  } catch (const std::exception&) {
    // the store failed too: said below
  }
  return "unknown (the store does not answer)";
}

// The c10d Gloo backend of one rank, once every peer joined through `store`.
c10::intrusive_ptr<c10d::ProcessGroupGloo> join_gloo_peers(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const GroupOptions& options) {
  try {
    announce_joining(*store, rank);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(options.hostname));
    gloo_options->threads = 1;  // our worker runs one collective at a time anyway
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo_options);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "fsdp: creating Gloo group '", options.name, "' (rank ", rank, " of ", size,
                ") failed: ", error_message(e),
                "\nMembers that never began creating it: ", members_that_never_began(store, size),
                ". Check that all ", size,
                " ranks started, use the same store (MASTER_ADDR/"
                "MASTER_PORT), create the same groups in the same order, and joined within the "
                "timeout (",
                options.timeout.count(), " ms)");
  }
}

// [Note: a dead peer must not kill us with SIGPIPE]
// A peer that dies closes its sockets, and Gloo's next write to one of them
// raises SIGPIPE, whose default action ends this process at once: no error
// naming the peer, just a rank killed by signal 13 (seen on LibTorch 2.6's
// Gloo in MultiProcess.DeadRankMakesThePeersFailNotHang). Python ignores
// SIGPIPE at startup, so PyTorch never meets it; a C++ program does. So a
// group that talks to peers ignores SIGPIPE, if the program left it at its
// default: the write then fails with EPIPE and the collective fails with
// its error.
void ignore_sigpipe_if_default() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

GlooGroup::GlooGroup(c10::intrusive_ptr<c10d::Store> store, std::string key_prefix, int rank,
                     int size, GroupOptions options, std::vector<int> global_ranks)
    : StoreBackedGroup(&make_gloo_group, std::move(store), std::move(key_prefix), rank, size,
                       std::move(options), std::move(global_ranks)) {
  // A group of one talks to no one. (`options` has moved into the base.)
  if (size == 1) return;
  ignore_sigpipe_if_default();
  gloo_ = join_gloo_peers(rendezvous_store(), rank, size, this->options());
  // See [Note: a group is ready only when every member has joined] in
  // member_barrier.h.
  wait_for_every_member(rendezvous_store(), rank, size, this->options().name,
                        this->options().timeout);
}

GlooGroup::~GlooGroup() = default;

RingPeers GlooGroup::peers() {
  return RingPeers{*gloo_, rank(), size(), global_ranks(), options().timeout,
                   options().ring_segment_bytes};
}

int GlooGroup::take_tags(int count) {
  if (next_tag_ + count > kTagLimit) next_tag_ = 0;
  const int first = next_tag_;
  next_tag_ += count;
  return first;
}

at::Tensor GlooGroup::scratch(at::ScalarType dtype, int64_t numel) {
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  if (!scratch_.defined() || scratch_.numel() < bytes) {
    scratch_ = at::empty({std::max<int64_t>(bytes, 1)}, at::kByte);
  }
  return scratch_.narrow(0, 0, bytes).view(dtype);
}

WorkPtr GlooGroup::all_gather(const at::Tensor& output, const at::Tensor& input) {
  check_all_gather_args(*this, output, input, kCpu);
  count_all_gather(input);
  return queue_.enqueue(describe_op(*this, "all_gather"), [this, output, input] {
    const at::Tensor in = input.reshape({-1});
    if (in.numel() == 0) return;
    const auto chunks = even_chunks(output.reshape({-1}), size());
    if (chunks[rank()].data_ptr() != in.data_ptr()) chunks[rank()].copy_(in);
    if (size() == 1) return;
    auto p = peers();
    ring_all_gather(p, chunks, take_tags(ring_tags_needed(p, chunks)));
  });
}

WorkPtr GlooGroup::reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                  ReduceOp op) {
  check_reduce_scatter_args(*this, output, input, op, kCpu);
  count_reduce_scatter(output);
  return queue_.enqueue(describe_op(*this, "reduce_scatter"), [this, output, input, op] {
    const at::Tensor out = output.reshape({-1});
    if (out.numel() == 0) return;
    const auto chunks = even_chunks(input.reshape({-1}), size());
    if (size() == 1) {
      out.copy_(chunks[0]);
    } else {
      auto p = peers();
      ring_reduce_scatter(p, chunks, scratch(input.scalar_type(), ring_scratch_numel(p, chunks)),
                          op == ReduceOp::kAvg ? ReduceOp::kSum : op,
                          take_tags(ring_tags_needed(p, chunks)), out);
    }
    // Average = sum, then one division by the group size.
    if (op == ReduceOp::kAvg) out.div_(size());
  });
}

void GlooGroup::ring_all_reduce(const at::Tensor& flat, ReduceOp op) {
  // Reduce-scatter then all-gather over the same n chunks: 2(n-1)/n per rank,
  // what Gloo's native ring moves too.
  const auto chunks = balanced_chunks(flat, size());
  auto p = peers();
  ring_reduce_scatter(p, chunks, scratch(flat.scalar_type(), ring_scratch_numel(p, chunks)), op,
                      take_tags(ring_tags_needed(p, chunks)));
  ring_all_gather(p, chunks, take_tags(ring_tags_needed(p, chunks)));
}

WorkPtr GlooGroup::all_reduce(const at::Tensor& tensor, ReduceOp op) {
  check_all_reduce_args(*this, tensor, op, kCpu);
  count_all_reduce(tensor);
  return queue_.enqueue(describe_op(*this, "all_reduce"), [this, tensor, op] {
    if (size() == 1 || tensor.numel() == 0) return;
    const ReduceOp reduce = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
    if (gloo_reduces_natively(tensor.scalar_type())) {
      std::vector<at::Tensor> tensors{tensor};
      c10d::AllreduceOptions opts;
      opts.reduceOp = to_c10d(reduce);
      opts.timeout = options().timeout;
      gloo_->allreduce(tensors, opts)->wait();
    } else {
      ring_all_reduce(tensor.reshape({-1}), reduce);
    }
    if (op == ReduceOp::kAvg) tensor.div_(size());
  });
}

WorkPtr GlooGroup::all_to_all(const at::Tensor& output, const at::Tensor& input) {
  check_all_to_all_args(*this, output, input, kCpu);
  count_all_to_all(input);
  return queue_.enqueue(describe_op(*this, "all_to_all"), [this, output, input] {
    if (size() == 1 || input.numel() == 0) {
      output.copy_(input);
      return;
    }
    // Gloo's all-to-all moves bytes, so any dtype goes through as kByte.
    at::Tensor out = output.reshape({-1}).view(at::kByte), in = input.reshape({-1}).view(at::kByte);
    std::vector<int64_t> equal_chunks;  // empty: size() equal chunks
    c10d::AllToAllOptions opts;
    opts.timeout = options().timeout;
    gloo_->alltoall_base(out, in, equal_chunks, equal_chunks, opts)->wait();
  });
}

WorkPtr GlooGroup::broadcast(const at::Tensor& tensor, int root) {
  check_broadcast_args(*this, tensor, root, kCpu);
  count_broadcast(tensor, root);
  return queue_.enqueue(describe_op(*this, "broadcast"), [this, tensor, root] {
    if (size() == 1 || tensor.numel() == 0) return;
    // Broadcast copies bytes, so any dtype goes through as kByte.
    std::vector<at::Tensor> tensors{tensor.reshape({-1}).view(at::kByte)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = options().timeout;
    gloo_->broadcast(tensors, opts)->wait();
  });
}

WorkPtr GlooGroup::barrier() {
  count_barrier();
  return queue_.enqueue(describe_op(*this, "barrier"), [this] {
    if (size() == 1) return;
    c10d::BarrierOptions opts;
    opts.timeout = options().timeout;
    gloo_->barrier(opts)->wait();
  });
}

ProcessGroupPtr make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                const std::string& key_prefix, int rank, int size,
                                const GroupOptions& options, std::vector<int> global_ranks) {
  return std::make_shared<GlooGroup>(store, key_prefix, rank, size, options,
                                     std::move(global_ranks));
}

}  // namespace fsdp::comm
