// The backend-independent part of fsdp::ProcessGroup: names, the factories,
// the environment bootstrap, the hybrid mesh and the small blocking helpers.

#include "fsdp/comm/process_group.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <numeric>

#include "comm/backends.h"
#include "comm/host_staged_group.h"
#include "fsdp/comm/job_rendezvous.h"
#include "fsdp/comm/launch_env.h"
#include "fsdp/error_message.h"

namespace fsdp {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "unknown";
}

const char* to_string(CommBackend backend) {
  switch (backend) {
    case CommBackend::kGloo: return "gloo";
    case CommBackend::kNccl: return "nccl";
  }
  return "unknown";
}

ProcessGroupPtr make_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, GroupOptions options) {
  TORCH_CHECK(store, "fsdp: make_process_group needs a store, got nullptr");
  TORCH_CHECK(size >= 1, "fsdp: cannot create group '", options.name, "' of size ", size,
              "; a group has at least one rank");
  TORCH_CHECK(rank >= 0 && rank < size, "fsdp: cannot create group '", options.name,
              "': rank ", rank, " is not in [0, ", size, ")");
  TORCH_CHECK(options.timeout.count() > 0, "fsdp: group '", options.name, "' timeout must be ",
              "positive, got ", options.timeout.count(), " ms");
  std::vector<int> global_ranks(size);
  std::iota(global_ranks.begin(), global_ranks.end(), 0);
  // Keys live under the group's name, so differently named groups can share a store.
  const std::string prefix = "fsdp/" + options.name;
  TORCH_CHECK(!options.host_staging || options.backend == CommBackend::kGloo, "fsdp: group '",
              options.name, "' asks for host_staging with the ", to_string(options.backend),
              " backend; host staging is a Gloo option (NCCL moves CUDA tensors itself): "
              "use CommBackend::kGloo with it, or drop it");
  switch (options.backend) {
    case CommBackend::kGloo:
      if (options.host_staging) {
        return std::make_shared<comm::HostStagedGroup>(
            comm::make_gloo_group(store, prefix, rank, size, options, std::move(global_ranks)));
      }
      return comm::make_gloo_group(store, prefix, rank, size, options, std::move(global_ranks));
    case CommBackend::kNccl:
      return comm::make_nccl_group(store, prefix, rank, size, options, std::move(global_ranks));
  }
  TORCH_CHECK(false, "fsdp: unknown CommBackend");
}

ProcessGroupPtr init_process_group_from_env(GroupOptions options) {
  // See [Note: a deadline on every rendezvous wait] in rendezvous_store.h.
  const JobRendezvous meeting(read_launch_env(), /*problems=*/{}, options.timeout);
  return meeting.create_world(std::move(options));
}

ProcessGroupPtr make_single_process_group(GroupOptions options) {
  // No peers to meet: an in-memory store serves the group's only rank.
  return make_process_group(c10::make_intrusive<c10d::HashStore>(), 0, 1, std::move(options));
}

DeviceMesh make_hybrid_mesh(const ProcessGroupPtr& world, int shard_size) {
  TORCH_CHECK(world, "fsdp: make_hybrid_mesh needs a world group, got nullptr");
  const int n = world->size();
  TORCH_CHECK(shard_size >= 1 && n % shard_size == 0, "fsdp: make_hybrid_mesh: shard_size ",
              shard_size, " does not divide the world size ", n,
              "; pick a shard size that divides it (e.g. the ranks per node)");
  const int replicas = n / shard_size;
  DeviceMesh mesh;
  mesh.world = world;
  // Every rank creates every sub-group in the same order (new_subgroup is
  // collective over `world`); each keeps the two it belongs to.
  for (int replica = 0; replica < replicas; ++replica) {
    std::vector<int> ranks(shard_size);
    std::iota(ranks.begin(), ranks.end(), replica * shard_size);
    auto group = world->new_subgroup(ranks, "shard[" + std::to_string(replica) + "]");
    if (group) mesh.shard = group;
  }
  for (int shard_index = 0; shard_index < shard_size; ++shard_index) {
    std::vector<int> ranks;
    for (int replica = 0; replica < replicas; ++replica) {
      ranks.push_back(replica * shard_size + shard_index);
    }
    auto group = world->new_subgroup(ranks, "replicate[" + std::to_string(shard_index) + "]");
    if (group) mesh.replicate = group;
  }
  TORCH_INTERNAL_ASSERT(mesh.shard && mesh.replicate, "every rank is in one shard group and ",
                        "one replicate group");
  return mesh;
}

at::Device collective_device(const ProcessGroup& group, at::Device preferred) {
  const GroupOptions& options = group.options();
  if (options.backend == CommBackend::kNccl || options.host_staging) {
    return preferred.is_cuda() ? preferred : at::Device(at::kCUDA);
  }
  return at::Device(at::kCPU);
}

namespace {

// Control-plane exchanges are tiny: the CPU where the group moves it.
at::TensorOptions control_tensor_options(const ProcessGroup& group, at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(collective_device(group, at::Device(at::kCPU)));
}

}  // namespace

std::vector<int64_t> all_gather_int64(ProcessGroup& group, int64_t mine) {
  const auto opts = control_tensor_options(group, at::kLong);
  const at::Tensor input = at::full({1}, mine, opts);
  const at::Tensor output = at::empty({group.size()}, opts);
  group.all_gather(output, input)->wait();
  const at::Tensor host = output.cpu();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + group.size());
}

std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& mine) {
  const auto lengths = all_gather_int64(group, static_cast<int64_t>(mine.size()));
  const int64_t width = std::max<int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));
  at::Tensor padded = at::zeros({width}, at::kByte);
  std::copy(mine.begin(), mine.end(), padded.data_ptr<uint8_t>());
  const auto opts = control_tensor_options(group, at::kByte);
  const at::Tensor output = at::empty({group.size() * width}, opts);
  group.all_gather(output, padded.to(opts.device()))->wait();
  const at::Tensor host = output.cpu();
  const auto* bytes = reinterpret_cast<const char*>(host.data_ptr<uint8_t>());
  std::vector<std::string> out;
  for (int r = 0; r < group.size(); ++r) out.emplace_back(bytes + r * width, lengths[r]);
  return out;
}

}  // namespace fsdp
