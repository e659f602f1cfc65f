#include "comm/ring.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "fsdp/error_message.h"

namespace fsdp::comm {
namespace {

// Messages per ring step; more only adds per-message overhead.
constexpr int64_t kMaxSegments = 16;

int64_t max_chunk_bytes(const std::vector<at::Tensor>& chunks) {
  int64_t bytes = 0;
  for (const auto& c : chunks) bytes = std::max(bytes, static_cast<int64_t>(c.nbytes()));
  return bytes;
}

// Segments per ring step. Taken from the largest chunk, which is the same on
// every rank, so all ranks split every step the same way.
int segment_count(const RingPeers& peers, const std::vector<at::Tensor>& chunks) {
  const int64_t target = std::max<int64_t>(peers.segment_bytes, 1);
  const int64_t wanted = (max_chunk_bytes(chunks) + target - 1) / target;
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, kMaxSegments));
}

int64_t max_chunk_numel(const std::vector<at::Tensor>& chunks) {
  int64_t numel = 0;
  for (const auto& c : chunks) numel = std::max(numel, c.numel());
  return numel;
}

// Scratch elements for one segment of the largest chunk. The reduce-scatter
// receives segment j of every step into slot j of its scratch.
int64_t scratch_slot_numel(const RingPeers& peers, const std::vector<at::Tensor>& chunks) {
  const int m = segment_count(peers, chunks);
  return (max_chunk_numel(chunks) + m - 1) / m;
}

// Segment j of m of a 1-D chunk; empty when the chunk has fewer than m elements.
at::Tensor segment(const at::Tensor& chunk, int j, int m) {
  const int64_t n = chunk.numel();
  const int64_t begin = n * j / m;
  const int64_t end = n * (j + 1) / m;
  return chunk.narrow(0, begin, end - begin);
}

int mod(int a, int n) { return ((a % n) + n) % n; }

class Transfers {
 public:
  explicit Transfers(const RingPeers& peers) : peers_(peers) {}

  c10::intrusive_ptr<c10d::Work> send(const at::Tensor& t, int tag) {
    std::vector<at::Tensor> tensors{t};
    return peers_.backend.send(tensors, mod(peers_.rank + 1, peers_.size), tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(const at::Tensor& t, int tag) {
    std::vector<at::Tensor> tensors{t};
    return peers_.backend.recv(tensors, mod(peers_.rank - 1, peers_.size), tag);
  }
  // A failure or timeout names the peer this rank was waiting for: in a
  // ring, the rank that stopped (or the first rank after it) is the one a
  // survivor's receive never heard from.
  void wait_recv(const c10::intrusive_ptr<c10d::Work>& work) {
    wait(work, "receiving from", mod(peers_.rank - 1, peers_.size));
  }
  void wait_send(const c10::intrusive_ptr<c10d::Work>& work) {
    wait(work, "sending to", mod(peers_.rank + 1, peers_.size));
  }

 private:
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* direction, int peer) {
    try {
      work->wait(peers_.timeout);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, direction, " rank ", peer, describe_global(peer), " (timeout ",
                  peers_.timeout.count(), " ms): ", error_message(e), ". Check that rank ", peer,
                  " is alive and runs the same collectives in the same order");
    }
  }
  std::string describe_global(int peer) const {
    const int global = peers_.global_ranks[static_cast<size_t>(peer)];
    return global == peer ? "" : " (global rank " + std::to_string(global) + ")";
  }

  const RingPeers& peers_;
};

// out = op(acc, incoming); `out` may be `acc` itself.
void reduce_into(at::Tensor out, const at::Tensor& acc, const at::Tensor& incoming, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      at::add_out(out, acc, incoming);
      return;
    case ReduceOp::kMax:
      at::maximum_out(out, acc, incoming);
      return;
    case ReduceOp::kMin:
      at::minimum_out(out, acc, incoming);
      return;
    case ReduceOp::kAvg:
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "ring_reduce_scatter: kAvg is a sum followed by a division");
}

}  // namespace

int ring_tags_needed(const RingPeers& peers, const std::vector<at::Tensor>& chunks) {
  return (peers.size - 1) * segment_count(peers, chunks);
}

int64_t ring_scratch_numel(const RingPeers& peers, const std::vector<at::Tensor>& chunks) {
  return segment_count(peers, chunks) * scratch_slot_numel(peers, chunks);
}

void ring_all_gather(const RingPeers& peers, const std::vector<at::Tensor>& chunks, int tag) {
  const int n = peers.size;
  const int r = peers.rank;
  if (n == 1) return;
  const int m = segment_count(peers, chunks);
  Transfers io(peers);
  // Every receive has its own place in the output, so all are posted now.
  std::vector<c10::intrusive_ptr<c10d::Work>> recvs((n - 1) * m);
  for (int s = 0; s + 1 < n; ++s) {
    for (int j = 0; j < m; ++j) {
      auto seg = segment(chunks[mod(r - s - 1, n)], j, m);
      if (seg.numel() > 0) recvs[s * m + j] = io.recv(seg, tag + s * m + j);
    }
  }
  std::vector<c10::intrusive_ptr<c10d::Work>> sends;
  sends.reserve((n - 1) * m);
  for (int j = 0; j < m; ++j) {
    auto seg = segment(chunks[r], j, m);
    if (seg.numel() > 0) sends.push_back(io.send(seg, tag + j));
  }
  for (int s = 0; s + 1 < n; ++s) {
    for (int j = 0; j < m; ++j) {
      if (!recvs[s * m + j]) continue;
      io.wait_recv(recvs[s * m + j]);
      // What arrived at step s is what goes out at step s+1.
      if (s + 2 < n) {
        sends.push_back(io.send(segment(chunks[mod(r - s - 1, n)], j, m), tag + (s + 1) * m + j));
      }
    }
  }
  for (auto& w : sends) io.wait_send(w);
}

void ring_reduce_scatter(const RingPeers& peers, const std::vector<at::Tensor>& chunks,
                         const at::Tensor& scratch, ReduceOp op, int tag,
                         const at::Tensor& result) {
  const int n = peers.size;
  const int r = peers.rank;
  TORCH_INTERNAL_ASSERT(!result.defined() || result.numel() == chunks[r].numel(),
                        "ring result must match this rank's chunk");
  if (n == 1) {
    if (result.defined()) result.copy_(chunks[r]);
    return;
  }
  const int m = segment_count(peers, chunks);
  const int64_t slot = scratch_slot_numel(peers, chunks);
  TORCH_INTERNAL_ASSERT(scratch.numel() >= slot * m, "ring scratch too small");
  // Segment j of every step lands in scratch slot j, so a slot is reused
  // only after its previous contents were reduced.
  auto slot_for = [&](const at::Tensor& seg, int j) {
    return scratch.narrow(0, j * slot, seg.numel());
  };
  auto recv_index = [&](int s) { return mod(r - s - 2, n); };

  Transfers io(peers);
  std::vector<c10::intrusive_ptr<c10d::Work>> recvs(m);
  std::vector<c10::intrusive_ptr<c10d::Work>> sends;
  sends.reserve((n - 1) * m);
  for (int j = 0; j < m; ++j) {
    auto incoming = segment(chunks[recv_index(0)], j, m);
    if (incoming.numel() > 0) recvs[j] = io.recv(slot_for(incoming, j), tag + j);
    auto outgoing = segment(chunks[mod(r - 1, n)], j, m);
    if (outgoing.numel() > 0) sends.push_back(io.send(outgoing, tag + j));
  }
  for (int s = 0; s + 1 < n; ++s) {
    for (int j = 0; j < m; ++j) {
      const int next_tag = tag + (s + 1) * m + j;
      auto acc = segment(chunks[recv_index(s)], j, m);
      if (acc.numel() > 0) {
        io.wait_recv(recvs[j]);
        // The last step completes chunks[r]: write it where the caller wants it.
        const bool last = s + 2 == n && result.defined();
        reduce_into(last ? segment(result, j, m) : acc, acc, slot_for(acc, j), op);
        // The chunk just reduced is the one this rank sends next step.
        if (s + 2 < n) sends.push_back(io.send(acc, next_tag));
      }
      if (s + 2 < n) {
        auto incoming = segment(chunks[recv_index(s + 1)], j, m);
        recvs[j] = incoming.numel() > 0 ? io.recv(slot_for(incoming, j), next_tag)
                                         : c10::intrusive_ptr<c10d::Work>();
      }
    }
  }
  for (auto& w : sends) io.wait_send(w);
}

}  // namespace fsdp::comm
