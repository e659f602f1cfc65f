#pragma once
// fsdp::ProcessGroup: the collectives FSDP needs, over flat contiguous
// buffers, on every backend and LibTorch version we support.
//
// Gloo (CPU tensors) and NCCL (CUDA tensors) are hidden behind one interface.
// LibTorch 1.13's Gloo has no _allgather_base and no reduce_scatter, so on
// Gloo both run as rings over send/recv that move the optimal (n-1)/n of the
// data per rank. See [Note: ring collectives on Gloo] in src/comm.
//
// Every collective is asynchronous and returns a Work. Collectives of one
// group run in the order they were issued, on every rank, so ranks that issue
// the same sequence always match up.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm/work.h"

namespace c10d {
class Store;
}

namespace fsdp {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

enum class CommBackend { kGloo, kNccl };

const char* to_string(ReduceOp op);
const char* to_string(CommBackend backend);

// The default of GroupOptions::timeout: FSDP_COMM_TIMEOUT seconds when that
// environment variable is set (fsdp-run --timeout sets it for its workers),
// else 5 minutes. Throws c10::Error naming a value that is not a number of
// seconds in (0, 86400].
std::chrono::milliseconds default_comm_timeout();

struct GroupOptions {
  // How long rendezvous, group creation and any collective may wait for
  // peers before failing with an error that names the missing peer.
  std::chrono::milliseconds timeout = default_comm_timeout();
  // kGloo for CPU tensors; kNccl for CUDA tensors (needs a CUDA build).
  CommBackend backend = CommBackend::kGloo;
  // kGloo only: the collectives take CUDA tensors (only those, as NCCL),
  // copied through pinned host memory and ordered against the current CUDA
  // stream. It lets several ranks share one GPU, which NCCL refuses: for
  // running and debugging a multi-rank CUDA job on one GPU, not for speed
  // (each collective waits for the stream). Never chosen unless set; with
  // kNccl it is an error.
  // See [Note: collectives of CUDA tensors through host memory] in src/comm.
  bool host_staging = false;
  // Shown in error messages, e.g. "world" or "shard[0]".
  std::string name = "world";
  // The local address Gloo binds to and peers connect to. The default suits
  // one host; init_process_group_from_env() replaces the default with the
  // address this host reaches MASTER_ADDR from (or GLOO_SOCKET_IFNAME's), so
  // jobs across hosts work unchanged. Example: .hostname = "10.0.0.5".
  std::string hostname = "127.0.0.1";
  // Gloo rings: the size of one pipelined message. Each ring step is split
  // into segments of about this size (at most 16), so reducing one segment
  // overlaps the transfer of the next. See [Note: ring collectives on Gloo].
  int64_t ring_segment_bytes = int64_t{1} << 20;
};

// Counts of collectives issued, for tests that assert how many a step makes.
struct CommCounters {
  int64_t all_gather = 0;
  int64_t reduce_scatter = 0;
  int64_t all_reduce = 0;
  int64_t broadcast = 0;
  int64_t barrier = 0;
  int64_t all_to_all = 0;
  int64_t bytes_sent = 0;  // payload bytes this rank put on the wire
};

// What was issued between two readings: `after - before`, field by field.
inline CommCounters operator-(const CommCounters& after, const CommCounters& before) {
  CommCounters d;
  d.all_gather = after.all_gather - before.all_gather;
  d.reduce_scatter = after.reduce_scatter - before.reduce_scatter;
  d.all_reduce = after.all_reduce - before.all_reduce;
  d.broadcast = after.broadcast - before.broadcast;
  d.barrier = after.barrier - before.barrier;
  d.all_to_all = after.all_to_all - before.all_to_all;
  d.bytes_sent = after.bytes_sent - before.bytes_sent;
  return d;
}

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  // This process's rank in the group and the number of ranks in it.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const GroupOptions& options() const = 0;
  // The global ranks of this group's members, in group-rank order.
  virtual const std::vector<int>& global_ranks() const = 0;

  // All-gather: every rank contributes `input` (numel k); `output` (numel
  // size()*k, same dtype and device, contiguous) receives rank r's input at
  // offset r*k.
  virtual WorkPtr all_gather(const at::Tensor& output, const at::Tensor& input) = 0;

  // Reduce-scatter: `input` (numel size()*k, contiguous) is reduced across
  // ranks elementwise, and rank r gets elements [r*k, (r+1)*k) in `output`
  // (numel k). `input` is used as scratch space and is clobbered.
  virtual WorkPtr reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                 ReduceOp op) = 0;

  // In-place all-reduce of a contiguous tensor.
  virtual WorkPtr all_reduce(const at::Tensor& tensor, ReduceOp op) = 0;

  // All-to-all: `input` and `output` (contiguous, same dtype, device and
  // numel, a multiple of size()) are size() equal chunks; chunk j of rank
  // r's input becomes chunk r of rank j's output. Compressed reduce-scatter
  // is built on it (fsdp/comm/compression.h).
  virtual WorkPtr all_to_all(const at::Tensor& output, const at::Tensor& input) = 0;

  // In-place broadcast from group rank `root`.
  virtual WorkPtr broadcast(const at::Tensor& tensor, int root) = 0;

  virtual WorkPtr barrier() = 0;

  // A new group over the listed ranks of this group (group ranks, ascending).
  // Collective over this group: every member of this group must call it, in
  // the same order, with the same list. Ranks not in the list get nullptr.
  virtual std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks,
                                                     const std::string& name) = 0;

  // Counters since creation. Thread-safe.
  virtual CommCounters counters() const = 0;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// [Note: a group's device]
// A tensor handed to a group lives on a device the group moves: CUDA for
// NCCL and for Gloo with host_staging, the CPU for plain Gloo. That holds for
// scalars too (a loss or a norm to all-reduce): build them with
// collective_device(). Each collective refuses a tensor elsewhere, naming
// the operation, the group and the fix.
//
// The device a tensor for `group` should live on: `preferred` when the group
// moves tensors there, else the group's own (the current CUDA device for
// NCCL, the CPU for Gloo).
at::Device collective_device(const ProcessGroup& group, at::Device preferred);

// A group over an existing store (FileStore, TCPStore, HashStore...).
ProcessGroupPtr make_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, GroupOptions options = {});

// A group from the launcher's environment (see launch_env.h): a TCPStore on
// MASTER_ADDR:MASTER_PORT, served by rank 0. Unless options.hostname was
// changed, Gloo binds to GLOO_SOCKET_IFNAME's IPv4 address if that is set,
// else to 127.0.0.1 when MASTER_ADDR is loopback, else to the local address
// of the route to MASTER_ADDR. A program whose ranks check their inputs
// first, so that one of them may have to stop, meets through
// fsdp::JobRendezvous (fsdp/comm/job_rendezvous.h) instead.
ProcessGroupPtr init_process_group_from_env(GroupOptions options = {});

// A group of one rank, this process alone: training or testing without a
// launcher, or a step that needs no peers. Its collectives are local copies.
//   auto world = fsdp::make_single_process_group();
//   auto model = fsdp::fully_shard(Net(), fsdp::FullyShardOptions(world));
ProcessGroupPtr make_single_process_group(GroupOptions options = {});

// A 2-D mesh for hybrid sharding: ranks are laid out as replicate x shard,
// rank = replica_index * shard_size + shard_index. Parameters are sharded in
// `shard` and replicated across `replicate`. Collective over `world`.
struct DeviceMesh {
  ProcessGroupPtr world;
  ProcessGroupPtr shard;      // the shard_size ranks of this replica
  ProcessGroupPtr replicate;  // the ranks holding the same shard index
};
DeviceMesh make_hybrid_mesh(const ProcessGroupPtr& world, int shard_size);
// The mesh with one shard group per node: shard_size = LOCAL_WORLD_SIZE (or
// the mpirun / srun equivalent) read by read_launch_env(). Throws if the
// launcher environment is missing or disagrees with `world`'s size.
DeviceMesh make_hybrid_mesh_from_env(const ProcessGroupPtr& world);

// Helpers built on the collectives, for small control-plane exchanges
// (fingerprints, execution orders, save results). Blocking.
std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& mine);
std::vector<int64_t> all_gather_int64(ProcessGroup& group, int64_t mine);

}  // namespace fsdp
