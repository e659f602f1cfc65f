// The default hybrid-sharding mesh: shard within a node, replicate across
// nodes (FSDP1's HYBRID_SHARD default), with the node size taken from the
// launcher's environment.

#include <c10/util/Exception.h>

#include "fsdp/comm/launch_env.h"
#include "fsdp/comm/process_group.h"

namespace fsdp {

DeviceMesh make_hybrid_mesh_from_env(const ProcessGroupPtr& world) {
  TORCH_CHECK(world, "fsdp: make_hybrid_mesh_from_env needs a world group, got nullptr");
  const LaunchEnv env = read_launch_env();
  TORCH_CHECK(env.world_size == world->size(), "fsdp: make_hybrid_mesh_from_env: the launcher ("
              , env.source, ") says the world has ", env.world_size, " ranks but the group has ",
              world->size(), "; pass the world group the launcher started, or call "
              "make_hybrid_mesh(world, shard_size) with an explicit shard size");
  TORCH_CHECK(env.local_world_size >= 1 && world->size() % env.local_world_size == 0,
              "fsdp: make_hybrid_mesh_from_env: ", env.local_world_size,
              " ranks per node (local world size from ", env.source,
              ") do not divide the world size ", world->size(),
              "; launch the same number of ranks on every node, or call make_hybrid_mesh(world, "
              "shard_size)");
  return make_hybrid_mesh(world, env.local_world_size);
}

}  // namespace fsdp
