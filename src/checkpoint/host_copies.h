#pragma once
// Host memory for an AsyncSaver's copies of the pieces, kept from one save to
// the next. Internal to src/checkpoint.
//
// [Note: host copies outside the heap]
// AsyncSaver::save() copies every piece to host memory before the background
// write. Taken from the heap (at::empty), the copies held memory that
// training frees and takes back every step ([Note: freed CPU memory kept for
// reuse] in fsdp/cpu_heap.h), so while a save was written training faulted
// fresh pages in instead. On the 2-core VM, with a 57 M-parameter GPT at two
// ranks, a quarter of all CPU samples during a save were page faults (none
// between saves), and the step that overlapped the write took 1.3 s (80%)
// longer. HostCopies keeps the copies in one anonymous mapping of their own,
// reused by every save that fits in it, so that only the first save faults
// pages in. It asks for transparent huge pages there (THP is often in
// madvise mode): on that VM a 342 MB memcpy into fresh memory took 1.17 s in
// 4 KiB pages and 0.05 s in 2 MiB pages, once the hypervisor had backed the
// memory (the first save of a training run took 0.3 to 0.9 s to copy).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fsdp/checkpoint/save.h"

namespace fsdp::ckpt::detail {

class HostCopies {
 public:
  // Points each piece's data at a contiguous host copy of it, detached from
  // autograd. The memory of the previous call's copies is reused once none
  // of them is alive and the pieces fit; otherwise a new mapping is made,
  // and the old one goes when its last copy does.
  void copy(std::vector<TensorPiece>& pieces);

  // Maps at least `bytes` now and touches every page of it, so that a later
  // copy() that fits faults no fresh pages in (see [Note: reserving the host
  // copies] in fsdp/checkpoint/async_save.h). Keeps the mapping it has if
  // that is as large and no copy holds it.
  void reserve(int64_t bytes);

  // Bytes mapped for the latest copies (0 before the first).
  size_t mapped_bytes() const;

 private:
  struct Mapping;
  // Whether the mapping held can take `bytes` of copies now.
  bool fits(int64_t bytes) const;
  // Drops the mapping held and maps at least `bytes` anew.
  void map(int64_t bytes);

  std::shared_ptr<Mapping> mapping_;  // also held by every copy made in it
};

}  // namespace fsdp::ckpt::detail
