#pragma once
// Ring all-gather and reduce-scatter over point-to-point send/recv.
// See [Note: ring collectives on Gloo].

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "compat.h"
#include "fsdp/comm/process_group.h"

namespace fsdp::comm {

// [Note: ring collectives on Gloo]
// LibTorch 1.13's Gloo backend has no _allgather_base and no reduce_scatter.
// The fallback PyTorch later adopted, all-reduce and then slice, moves twice
// the bytes a reduce-scatter needs. Instead both run as rings over Gloo's
// send/recv, which move the optimal (n-1)/n of the buffer per rank:
//
//   all-gather, step s = 0..n-2: rank r sends chunk (r-s) to r+1 and receives
//     chunk (r-s-1) from r-1 straight into its slice of the output (a
//     narrow() view, so nothing is copied but the rank's own input).
//   reduce-scatter, step s = 0..n-2: rank r sends chunk (r-s-1) to r+1,
//     receives chunk (r-s-2) from r-1 into a scratch chunk and reduces it
//     into the input, which is the accumulator (the caller allows it to be
//     clobbered). After the last step chunk r holds the full reduction.
//
// In both rings the chunk a rank sends at step s+1 is the one it received
// at step s, and no chunk changes after it was sent. So each step is split
// into segments: as soon as segment j of step s has arrived (and been
// reduced), segment j of step s+1 goes out and the next receive of segment j
// is posted. The reduction of one segment then overlaps the transfer of the
// others, and the scratch space is one chunk however many segments there are.
//
// Every send/recv waits at most the group timeout, so a peer that never
// shows up fails the collective instead of hanging it.

struct RingPeers {
  compat::C10dBackend& backend;  // has send/recv (ProcessGroupGloo)
  int rank;
  int size;
  const std::vector<int>& global_ranks;  // of the group's ranks, for error messages
  std::chrono::milliseconds timeout;
  int64_t segment_bytes;  // target size of one pipelined message; see the note
};

// `chunks[i]` is the contiguous block that belongs to rank i; the caller has
// already put its own block in chunks[rank]. Chunks may differ in size.
// `tag` is the first of ring_tags_needed() tags this call may use.
void ring_all_gather(const RingPeers& peers, const std::vector<at::Tensor>& chunks, int tag);

// On return `result` (1-D, chunks[rank].numel() elements) holds the
// reduction (kSum, kMax or kMin) of every rank's chunks[rank]; the last step
// reduces straight into it, which saves a copy. With `result` undefined the
// reduction stays in chunks[rank]. Other chunks hold partial results.
// `scratch` has at least ring_scratch_numel() elements and the chunks' dtype.
void ring_reduce_scatter(const RingPeers& peers, const std::vector<at::Tensor>& chunks,
                         const at::Tensor& scratch, ReduceOp op, int tag,
                         const at::Tensor& result = {});

// The scratch reduce-scatter needs: about the largest chunk (a few elements
// more when the segments do not divide it evenly).
int64_t ring_scratch_numel(const RingPeers& peers, const std::vector<at::Tensor>& chunks);

// How many consecutive tags one ring call over `chunks` uses.
int ring_tags_needed(const RingPeers& peers, const std::vector<at::Tensor>& chunks);

}  // namespace fsdp::comm
