#include "fsdp/comm/launch_env.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace fsdp {
namespace {

// One launcher's names for the four per-process variables.
struct Convention {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

// Tried in this order; see launch_env.h.
constexpr Convention kConventions[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int parse_int(const char* name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const long parsed = std::strtol(value.c_str(), &end, 10);
  TORCH_CHECK(errno == 0 && end != value.c_str() && *end == '\0' && parsed >= INT32_MIN &&
                  parsed <= INT32_MAX,
              "fsdp: environment variable ", name, "='", value, "' is not an integer");
  return static_cast<int>(parsed);
}

// srun sets SLURM_NTASKS_PER_NODE only when given --ntasks-per-node, but
// always sets SLURM_TASKS_PER_NODE, a run-length list of the tasks on each
// node ("4(x2),3": four on each of the first two nodes, then three) and
// SLURM_NODEID. This node's entry is its local world size.
std::optional<std::string> slurm_tasks_on_this_node() {
  const auto list = env("SLURM_TASKS_PER_NODE");
  if (!list) return std::nullopt;
  const auto node_id = env("SLURM_NODEID");
  const int node = node_id ? parse_int("SLURM_NODEID", *node_id) : 0;
  int first_node = 0;
  size_t pos = 0;
  while (pos < list->size()) {
    const size_t comma = std::min(list->find(',', pos), list->size());
    const std::string entry = list->substr(pos, comma - pos);
    const size_t paren = entry.find("(x");
    const std::string tasks = entry.substr(0, paren);
    const int repeat = paren == std::string::npos
                           ? 1
                           : parse_int("SLURM_TASKS_PER_NODE",
                                       entry.substr(paren + 2, entry.size() - paren - 3));
    parse_int("SLURM_TASKS_PER_NODE", tasks);  // validates the count
    if (node < first_node + repeat) return tasks;
    first_node += repeat;
    pos = comma + 1;
  }
  return std::nullopt;
}

// A convention's variable, with the Slurm fallback above.
std::optional<std::string> launch_var(const char* name) {
  auto value = env(name);
  if (!value && std::string(name) == "SLURM_NTASKS_PER_NODE") value = slurm_tasks_on_this_node();
  return value;
}

std::string convention_help(const Convention& c) {
  return std::string(c.source) + " sets " + c.rank + ", " + c.world_size + ", " + c.local_rank +
         " and " + c.local_world_size + "; MASTER_ADDR and MASTER_PORT must be set as well";
}

}  // namespace

bool launched_distributed() {
  for (const auto& c : kConventions) {
    if (env(c.rank)) return true;
  }
  return false;
}

LaunchEnv read_launch_env() {
  const Convention* found = nullptr;
  for (const auto& c : kConventions) {
    if (env(c.rank)) {
      found = &c;
      break;
    }
  }
  TORCH_CHECK(found != nullptr,
              "fsdp: no launcher environment found. Set RANK, WORLD_SIZE, LOCAL_RANK, "
              "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun and fsdp-run do), or run "
              "under mpirun (OMPI_COMM_WORLD_*) or srun (SLURM_*) with MASTER_ADDR and "
              "MASTER_PORT exported");
  const Convention& c = *found;

  const char* required[] = {c.rank,  c.world_size,   c.local_rank, c.local_world_size,
                            "MASTER_ADDR", "MASTER_PORT"};
  std::string missing;
  for (const char* name : required) {
    if (!launch_var(name)) missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  TORCH_CHECK(missing.empty(), "fsdp: the ", c.source, " launch environment (", c.rank,
              " is set) is incomplete: missing ", missing, ". ", convention_help(c));

  LaunchEnv out;
  out.source = c.source;
  out.rank = parse_int(c.rank, *launch_var(c.rank));
  out.world_size = parse_int(c.world_size, *launch_var(c.world_size));
  out.local_rank = parse_int(c.local_rank, *launch_var(c.local_rank));
  out.local_world_size = parse_int(c.local_world_size, *launch_var(c.local_world_size));
  out.master_addr = *env("MASTER_ADDR");
  out.master_port = parse_int("MASTER_PORT", *env("MASTER_PORT"));

  TORCH_CHECK(out.world_size >= 1, "fsdp: ", c.world_size, "=", out.world_size,
              " must be at least 1");
  TORCH_CHECK(out.rank >= 0 && out.rank < out.world_size, "fsdp: ", c.rank, "=", out.rank,
              " is not in [0, ", c.world_size, "=", out.world_size, ")");
  TORCH_CHECK(out.local_world_size >= 1 && out.local_world_size <= out.world_size, "fsdp: ",
              c.local_world_size, "=", out.local_world_size, " must be in [1, ", c.world_size,
              "=", out.world_size, "]");
  TORCH_CHECK(out.local_rank >= 0 && out.local_rank < out.local_world_size, "fsdp: ",
              c.local_rank, "=", out.local_rank, " is not in [0, ", c.local_world_size, "=",
              out.local_world_size, ")");
  TORCH_CHECK(out.master_port >= 1 && out.master_port <= 65535, "fsdp: MASTER_PORT=",
              out.master_port, " is not a TCP port (1..65535)");
  return out;
}

}  // namespace fsdp
