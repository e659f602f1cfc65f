#pragma once
// The training loop: build the sharded model and its optimizer, optionally
// resume, train step by step on each rank's slice of the global batch,
// evaluate, checkpoint, and at the end generate a sample and report.

#include <cstdint>
#include <string>
#include <vector>

#include "corpus.h"
#include "fault_injection.h"
#include "fsdp/comm/process_group.h"
#include "restart_env.h"
#include "train_options.h"

namespace fsdp_train {

// Everything main() settled before training: the checked options, where
// this process sits in the job, and the data.
struct TrainSetup {
  TrainOptions options;
  BatchLayout layout;
  fsdp::ProcessGroupPtr world;  // Gloo on the CPU, NCCL with --device cuda
  c10::Device device = c10::kCPU;  // where this rank computes (training_device.h)
  std::string launcher;     // "standalone", "torchrun", "openmpi" or "slurm"
  int threads = 1;          // intra-op threads of this rank
  ByteCorpus corpus;
  std::string resume_dir;   // "" unless --resume
  std::vector<std::string> resume_rejected;  // newer checkpoints of the run dir that did not verify
  int64_t resume_step = 0;  // the checkpoint's step
  // "" unless --resume auto found the training complete: the line that says
  // so, printed instead of training (main.cpp, [Note: a finished run under
  // --resume auto]).
  std::string finished;
  std::string resume_warning;
  int local_rank = 0;      // on this node; local rank 0 writes the progress file
  RestartEnv restart;      // which start of the job this is (restart_env.h)
  StartTimeline timeline;  // when this start's phases ended, for the restart latency
  FaultInjection faults;   // the FSDP_TRAIN_TEST_SIGKILL_AT test seam
};

// Collective: every rank calls it. Returns the process exit code; throws on
// failures (every rank that can see them).
int train(TrainSetup& setup);

}  // namespace fsdp_train
