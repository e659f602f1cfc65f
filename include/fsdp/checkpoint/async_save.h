#pragma once
// Checkpoints written while training goes on (what PyTorch's
// torch.distributed.checkpoint.async_save does for DCP).
//
//   fsdp::ckpt::AsyncSaver saver(*world);  // collective: the saver's own group
//   saver.reserve(bytes);  // optional: the copies' memory, now (see below)
//   for (int64_t step = 1; step <= steps; ++step) {
//     train_step();
//     if (step % 100 == 0) {
//       fsdp::ckpt::SaveOptions options;
//       options.step = step;
//       auto pieces = fsdp::ckpt::training_state_pieces(*model, &optimizer);
//       // Returns once this rank's shards are copied; the writing goes on.
//       // It waits for the save before, and returns it if poll() did not.
//       if (auto done = saver.save(dir_for(step), std::move(pieces), options))
//         log("saved", done->dir);
//     }
//     if (auto done = saver.poll()) log("saved", done->dir);
//   }
//   if (auto done = saver.wait()) log("saved", done->dir);  // throws if the last save failed
//
// [Note: saving while training]
// save() copies this rank's pieces to host memory and returns; a background
// thread then runs fsdp::ckpt::save() (save.h) on the copies, so a kill
// during it leaves what a kill during a synchronous save leaves: the last
// committed checkpoint whole, and a "<dir>.partial-*" that
// clean_partial_checkpoints (run_dir.h) removes.
// - The copies are taken when save() is called, so the caller chooses the
//   moment: between optimizer steps, when the shards and the optimizer state
//   belong to one step. Training may change them as soon as save() returns.
// - The background save's collectives run on a group of the saver's own,
//   made by the constructor. Collectives on one group must be issued in the
//   same order on every rank; training's, on the world group, come from
//   another thread, so sharing that group would interleave the two streams
//   differently on different ranks.
// - The background thread writes the data files around the page cache
//   (SaveOptions::bypass_page_cache, whatever the caller passed): copying
//   them into the cache is most of a write's CPU time, which it would take
//   from training.
// - The copies cost one more copy of this rank's pieces in host memory, kept
//   for the saver's life in a mapping of its own that each save reuses: from
//   the heap, they took the memory training reuses every step, which then
//   faulted in fresh pages while the save was written ([Note: host copies
//   outside the heap] in src/checkpoint/host_copies.h). From CUDA they are
//   synchronous copies to pageable memory; the background
//   thread then runs on the CUDA device that was current at save(), which an
//   NCCL group's control tensors use.
// - reserve() takes that memory before training starts (see [Note:
//   reserving the host copies]).
// - At most one save is in flight: save() first waits for the one before.
//   A save slower than the interval between saves delays training there,
//   rather than piling up copies of the model in host memory.
// - Each committed save is returned once, by the first of poll(), save() and
//   wait() to see it commit, so a caller that logs each (or prunes old
//   checkpoints after each) misses none. That is why save() returns the
//   save it waited for.
// - A failed save throws on every rank at the same place: the next save() or
//   wait(), which every rank calls at the same step. poll() never throws,
//   since ranks poll at different moments of the background work.
//
// [Note: reserving the host copies]
// The first save() maps the copies' memory and, in copying, faults every
// page of it in while training waits: 0.73 s for 342 MB per rank on this
// project's VM, where the hypervisor backs fresh guest memory slowly, against
// 0.02 to 0.06 s for each later save into the same memory. reserve(bytes)
// maps and touches that memory at once, before training starts, so that
// every save copies into memory the machine already backs; and a rank short
// of host memory fails there, naming the bytes, rather than at its first
// save, maybe hours later. host_copy_bytes() gives the bytes for a list of
// pieces; a caller whose optimizer creates its state at its first step
// (AdamW) counts that state too (fsdp-train:
// tools/fsdp-train/async_copy_bytes.h). A save whose pieces outgrow the
// reservation maps anew, as without one.

#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/checkpoint/save.h"

namespace fsdp {
class ProcessGroup;
}

namespace fsdp::ckpt {

namespace detail {
class HostCopies;
}

// The host memory AsyncSaver::save() copies `pieces` into: each one's bytes,
// rounded up to a cache line (64 bytes).
int64_t host_copy_bytes(const std::vector<TensorPiece>& pieces);

// A save that committed.
struct FinishedSave {
  std::string dir;
  int64_t step = 0;          // SaveOptions::step
  double copy_seconds = 0;   // in save(): copying the pieces to host memory
  double write_seconds = 0;  // on the background thread: fsdp::ckpt::save()
};

// Used from one thread (the training loop's); every rank calls save() and
// wait() at the same points, as with fsdp::ckpt::save.
class AsyncSaver {
 public:
  // Collective over `world`: makes the group the background saves use (see
  // [Note: saving while training]).
  explicit AsyncSaver(ProcessGroup& world);
  // Waits for a save in flight. A failure nobody collected with wait() is
  // printed to stderr, since a destructor cannot throw it.
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Maps and touches `bytes` of host memory for the copies now, unless the
  // saver holds that much already; see [Note: reserving the host copies].
  // Not while a save is in flight (before the first save(), or after
  // wait()). Throws, naming the bytes, if the memory cannot be mapped.
  void reserve(int64_t bytes);

  // Collective. Waits for the previous save (throwing if it failed), copies
  // `pieces` to host memory and starts writing them to `dir`. Returns the
  // previous save if it committed and poll() had not returned it.
  [[nodiscard]] std::optional<FinishedSave> save(const std::string& dir,
                                                 std::vector<TensorPiece> pieces,
                                                 const SaveOptions& options = {});

  // The save that committed and was not yet returned, if any. Never blocks
  // and never throws: a failure waits for save() or wait().
  std::optional<FinishedSave> poll();

  // Waits for the save in flight, which every rank must let finish at the
  // same point (it is collective); throws if it failed, else returns what
  // poll() would.
  std::optional<FinishedSave> wait();

  // Whether a save is still being written (or written and not yet looked
  // at by poll(), save() or wait()).
  bool in_flight() const { return pending_.valid(); }

 private:
  struct Outcome {
    std::optional<FinishedSave> finished;
    std::exception_ptr failure;
  };
  // Takes the outcome of the save in flight, waiting for it.
  void collect();
  // collect(), then throws the failure if the save failed.
  void finish_pending();

  std::shared_ptr<ProcessGroup> group_;   // the background saves' own
  std::unique_ptr<detail::HostCopies> host_copies_;  // what save() copies the pieces into
  std::future<Outcome> pending_;          // the save in flight
  std::optional<FinishedSave> finished_;  // committed, not yet returned
  std::exception_ptr failure_;            // failed, not yet thrown
};

}  // namespace fsdp::ckpt
