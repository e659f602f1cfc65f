#pragma once
// The training loop: build the sharded model and its optimizer, optionally
// resume, train step by step on each rank's slice of the global batch,
// evaluate, checkpoint, and at the end generate a sample and report.

#include <cstdint>
#include <string>
#include <vector>

#include "corpus.h"
#include "fsdp/comm/process_group.h"
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
  std::string corpus_warning;
};

// Collective: every rank calls it. Returns the process exit code; throws on
// failures (every rank that can see them).
int train(TrainSetup& setup);

}  // namespace fsdp_train
