#pragma once
// Where a process sits in a job, read from the environment its launcher set.
// Three conventions are understood, tried in this order:
//   torchrun / fsdp-run: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                        MASTER_ADDR, MASTER_PORT
//   OpenMPI (mpirun):    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                        OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//   Slurm (srun):        SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//                        SLURM_NTASKS_PER_NODE
// MASTER_ADDR and MASTER_PORT are needed in every case (mpirun and srun do
// not set them; export them, or let fsdp-run do it).

#include <string>

namespace fsdp {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  std::string source;  // "torchrun", "openmpi" or "slurm"
};

// Reads the environment. Throws c10::Error naming the missing or malformed
// variables and the launcher convention it was looking for.
LaunchEnv read_launch_env();

// True when any of the conventions above is present (RANK,
// OMPI_COMM_WORLD_RANK or SLURM_PROCID is set).
bool launched_distributed();

}  // namespace fsdp
