// Compressed all-gather, reduce-scatter and all-reduce (fsdp/comm/compression.h),
// built on ProcessGroup's own collectives over encoded bytes.
//
// [Note: compressed reduce-scatter]
// A ring reduce-scatter adds as it goes: each hop receives a partial sum and
// passes on a bigger one. Compressed, each hop would have to requantize that
// partial sum, and with p ranks the result carries p - 1 requantizations of
// ever larger sums: the error of the average grows with p. Instead, like
// qgZ, every rank encodes each of its p rows once, an all-to-all delivers row
// r of every rank to rank r, and rank r decodes and adds them in fp32, in
// rank order. Each contribution is quantized exactly once, by its owner, with
// an error bounded by its own block's magnitude / 254 (int8), so the sum's
// error is at most the sum of those bounds and the average's at most their
// mean: it does not grow with the number of ranks. An all-to-all sends
// (p - 1)/p of the encoded buffer per rank, what a ring sends.
//
// The received bytes are decoded when the work is waited for, on the waiting
// thread; compressed all-reduce also issues its all-gather there. Every rank
// waits in the same order (FSDP's reductions finish in issue order), so the
// ranks still issue the same collectives in the same order.

#include <ATen/ATen.h>

#include <functional>
#include <mutex>

#include "comm/compression_codec.h"

namespace fsdp {
namespace {

// A collective whose result needs one more step, run once, by the first wait.
class FinishingWork final : public Work {
 public:
  FinishingWork(WorkPtr inner, std::function<void()> finish)
      : inner_(std::move(inner)), finish_(std::move(finish)) {}

  void wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (inner_) inner_->wait();
    if (finish_) {
      auto finish = std::move(finish_);
      finish_ = nullptr;
      finish();
    }
  }
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !finish_;
  }

 private:
  mutable std::mutex mu_;
  WorkPtr inner_;
  std::function<void()> finish_;
};

at::Tensor byte_buffer(int64_t numel, const at::Tensor& like) {
  return at::empty({numel}, like.options().dtype(at::kByte));
}

// One row's slot on the wire: its encoded head, then its exact tail (fp32),
// 4-byte aligned so each row's parts can be viewed in place.
struct RowLayout {
  int64_t head = 0, tail = 0, head_bytes = 0, tail_at = 0, bytes = 0;

  RowLayout(const Compression& c, int64_t row_numel, int64_t exact_tail)
      : head(row_numel - exact_tail), tail(exact_tail), head_bytes(encoded_bytes(c, head)),
        tail_at(round_up(head_bytes, 4)), bytes(round_up(tail_at + 4 * tail, 4)) {}
};

void encode_row(const Compression& c, const RowLayout& l, const at::Tensor& row,
                const at::Tensor& slot) {
  encode(c, row.narrow(0, 0, l.head), slot.narrow(0, 0, l.head_bytes));
  if (l.tail > 0) slot.narrow(0, l.tail_at, 4 * l.tail).view(at::kFloat).copy_(row.narrow(0, l.head, l.tail));
}

void check_flat(const at::Tensor& t, const char* what, const char* name) {
  TORCH_CHECK(t.dim() == 1 && t.is_contiguous() && at::isFloatingType(t.scalar_type()), "fsdp: ",
              what, ": ", name, " must be 1-D, contiguous and floating point, got ", t.sizes(),
              " ", t.scalar_type());
}

}  // namespace

WorkPtr compressed_all_gather(ProcessGroup& group, const at::Tensor& output,
                              const at::Tensor& input, const Compression& c) {
  if (!c.enabled()) return group.all_gather(output, input);
  check_flat(output, "compressed_all_gather", "output");
  check_flat(input, "compressed_all_gather", "input");
  const int p = group.size();
  const int64_t k = input.numel();
  TORCH_CHECK(output.numel() == p * k, "fsdp: compressed_all_gather: output has ", output.numel(),
              " elements; it needs group size x input = ", p * k);
  const RowLayout row(c, k, 0);
  at::Tensor send = byte_buffer(row.bytes, input);
  encode(c, input, send.narrow(0, 0, row.head_bytes));
  at::Tensor received = byte_buffer(p * row.bytes, input);
  WorkPtr inner = group.all_gather(received, send);
  return std::make_shared<FinishingWork>(std::move(inner), [c, row, received, output, p, k] {
    for (int r = 0; r < p; ++r) {
      decode(c, received.narrow(0, r * row.bytes, row.head_bytes), output.narrow(0, r * k, k));
    }
  });
}

WorkPtr compressed_reduce_scatter(ProcessGroup& group, const at::Tensor& output,
                                  const at::Tensor& input, const Compression& c,
                                  int64_t exact_tail) {
  check_flat(output, "compressed_reduce_scatter", "output");
  check_flat(input, "compressed_reduce_scatter", "input");
  const int p = group.size();
  const int64_t row_numel = output.numel();
  TORCH_CHECK(input.numel() == p * row_numel && exact_tail >= 0 && exact_tail <= row_numel,
              "fsdp: compressed_reduce_scatter: input has ", input.numel(),
              " elements and output ", row_numel, " with an exact tail of ", exact_tail,
              "; input needs group size x output, and the tail at most output's");
  if (!c.enabled()) return group.reduce_scatter(output, input, ReduceOp::kSum);
  const RowLayout row(c, row_numel, exact_tail);
  const at::Tensor rows = input.view({p, row_numel});
  at::Tensor send = byte_buffer(p * row.bytes, input);
  for (int r = 0; r < p; ++r) encode_row(c, row, rows[r], send.narrow(0, r * row.bytes, row.bytes));
  at::Tensor received = byte_buffer(p * row.bytes, input);
  WorkPtr inner = group.all_to_all(received, send);
  return std::make_shared<FinishingWork>(std::move(inner), [c, row, received, output, p] {
    at::Tensor sum = at::zeros({output.numel()}, output.options().dtype(at::kFloat));
    for (int r = 0; r < p; ++r) {
      const at::Tensor slot = received.narrow(0, r * row.bytes, row.bytes);
      decode_add(c, slot.narrow(0, 0, row.head_bytes), sum.narrow(0, 0, row.head));
      if (row.tail > 0) sum.narrow(0, row.head, row.tail).add_(slot.narrow(0, row.tail_at, 4 * row.tail).view(at::kFloat));
    }
    output.copy_(sum);
  });
}

WorkPtr compressed_all_reduce(ProcessGroup& group, const at::Tensor& tensor, const Compression& c,
                              int64_t exact_tail) {
  check_flat(tensor, "compressed_all_reduce", "tensor");
  TORCH_CHECK(exact_tail >= 0 && exact_tail <= tensor.numel(), "fsdp: compressed_all_reduce: ",
              "an exact tail of ", exact_tail, " in a tensor of ", tensor.numel());
  if (!c.enabled()) return group.all_reduce(tensor, ReduceOp::kSum);
  // Row r: part r of the head (zero-padded to equal parts), then the whole
  // exact tail, so every rank's reduced row carries the tail's full sum.
  const int p = group.size();
  const int64_t head = tensor.numel() - exact_tail, part = (head + p - 1) / p;
  at::Tensor rows = at::zeros({p, part + exact_tail}, tensor.options().dtype(at::kFloat));
  for (int r = 0; r < p; ++r) {
    const int64_t begin = std::min<int64_t>(head, r * part), end = std::min<int64_t>(head, begin + part);
    rows[r].narrow(0, 0, end - begin).copy_(tensor.narrow(0, begin, end - begin));
    rows[r].narrow(0, part, exact_tail).copy_(tensor.narrow(0, head, exact_tail));
  }
  at::Tensor reduced = at::empty({part + exact_tail}, rows.options());
  WorkPtr first = compressed_reduce_scatter(group, reduced, rows.view(-1), c, exact_tail);
  ProcessGroup* g = &group;  // the caller keeps the group alive while the work is
  return std::make_shared<FinishingWork>(std::move(first), [g, c, tensor, reduced, head, part, exact_tail, p] {
    at::Tensor gathered = at::empty({p * part}, reduced.options());
    compressed_all_gather(*g, gathered, reduced.narrow(0, 0, part).contiguous(), c)->wait();
    tensor.narrow(0, 0, head).copy_(gathered.narrow(0, 0, head));
    tensor.narrow(0, head, exact_tail).copy_(reduced.narrow(0, part, exact_tail));
  });
}

}  // namespace fsdp
