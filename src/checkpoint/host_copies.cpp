// See [Note: host copies outside the heap] in host_copies.h.

#include "checkpoint/host_copies.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "checkpoint/atomic_file.h"
#include "fsdp/checkpoint/async_save.h"
#include "round_up.h"

namespace fsdp::ckpt::detail {
namespace {

constexpr int64_t kCopyAlignment = 64;                // each copy starts on a cache line
constexpr int64_t kHugePageBytes = int64_t{2} << 20;  // the mapping's size is a multiple

int64_t copy_bytes(const at::Tensor& data) {
  if (!data.defined()) return 0;  // left for save() to refuse by name
  return round_up(data.numel() * static_cast<int64_t>(data.element_size()), kCopyAlignment);
}

}  // namespace

struct HostCopies::Mapping {
  explicit Mapping(size_t size);
  ~Mapping() { ::munmap(data, bytes); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  void* data = nullptr;
  size_t bytes = 0;
};

HostCopies::Mapping::Mapping(size_t size) : bytes(size) {
  data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TORCH_CHECK(data != MAP_FAILED, "fsdp: cannot map ", bytes,
              " bytes of host memory for an asynchronous checkpoint save's copies of the shards: ",
              errno_text(),
              "; free host memory, or save synchronously (fsdp::ckpt::save, or "
              "fsdp-train without --async-save)");
  // Best effort: where the kernel has no transparent huge pages (EINVAL), the
  // mapping keeps 4 KiB pages, as the heap would have.
  (void)::madvise(data, bytes, MADV_HUGEPAGE);
}

bool HostCopies::fits(int64_t bytes) const {
  // A copy still alive (it holds the mapping too) may still be read.
  return mapping_ && mapping_.use_count() == 1 && mapping_->bytes >= static_cast<size_t>(bytes);
}

void HostCopies::map(int64_t bytes) {
  mapping_.reset();  // unmapped now if nothing else holds it, before mapping more
  const int64_t size = round_up(std::max<int64_t>(bytes, 1), kHugePageBytes);
  mapping_ = std::make_shared<Mapping>(static_cast<size_t>(size));
}

void HostCopies::reserve(int64_t bytes) {
  if (fits(bytes)) return;
  map(bytes);
  std::memset(mapping_->data, 0, mapping_->bytes);  // faults every page in, here
}

void HostCopies::copy(std::vector<TensorPiece>& pieces) {
  const int64_t needed = host_copy_bytes(pieces);
  if (!fits(needed)) map(needed);
  char* next = static_cast<char*>(mapping_->data);
  for (TensorPiece& piece : pieces) {
    if (!piece.data.defined()) continue;
    const at::Tensor source = piece.data.detach();
    at::Tensor copy = at::from_blob(
        next, source.sizes(), [keep = mapping_](void*) {},
        at::TensorOptions().dtype(source.scalar_type()));
    copy.copy_(source);
    next += copy_bytes(source);
    piece.data = std::move(copy);
  }
}

size_t HostCopies::mapped_bytes() const { return mapping_ ? mapping_->bytes : 0; }

}  // namespace fsdp::ckpt::detail

namespace fsdp::ckpt {

int64_t host_copy_bytes(const std::vector<TensorPiece>& pieces) {
  int64_t bytes = 0;
  for (const TensorPiece& piece : pieces) bytes += detail::copy_bytes(piece.data);
  return bytes;
}

}  // namespace fsdp::ckpt
