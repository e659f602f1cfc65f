#pragma once
// The checkpoints fsdp-train writes: one every --save-every steps to
// <run-dir>/checkpoints/step-NNNNNNNN, pruned to --keep-last, and the final
// one to <run-dir>/checkpoint. With --async-save the step checkpoints are
// written in the background while training goes on (fsdp::ckpt::AsyncSaver;
// see [Note: saving while training] in fsdp/checkpoint/async_save.h); the
// final one is always written before the run ends.

#include <cstdint>
#include <optional>
#include <string>

#include "fsdp/checkpoint/async_save.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/sharded.h"
#include "progress.h"
#include "train_options.h"

namespace torch::optim {
class AdamW;
class Optimizer;
}

namespace fsdp_train {

class CheckpointSaves {
 public:
  // Collective (with --async-save it makes the saver's group, and reserves
  // the host memory of its copies of `model` and `optimizer`: [Note:
  // reserving the host copies]). `extras_json` goes into every checkpoint
  // (checkpoint_extras, resume_config.h).
  CheckpointSaves(fsdp::ProcessGroup& world, const TrainOptions& options, std::string run_dir,
                  std::string extras_json, const fsdp::UnitModule& model,
                  const torch::optim::AdamW& optimizer);

  // Collective, after `step`'s optimizer step: a step checkpoint if one is
  // due. Rank 0 notes the saves that committed (and prunes after them).
  void after_step(int64_t step, const fsdp::UnitModule& model,
                  const torch::optim::Optimizer& optimizer, Progress& progress);

  // Collective: waits for a background save in flight, noting it.
  void finish_step_saves(Progress& progress);

  // Collective: the final checkpoint, written before it returns. Call
  // finish_step_saves() first.
  void save_final(int64_t step, const fsdp::UnitModule& model,
                  const torch::optim::Optimizer& optimizer);
  std::string final_dir() const;

 private:
  fsdp::ckpt::SaveOptions save_options(int64_t step) const;
  void save(const std::string& dir, int64_t step, const fsdp::UnitModule& model,
            const torch::optim::Optimizer& optimizer);
  // Rank 0: a "saved" line for a step checkpoint, then --keep-last.
  void note_saved(Progress& progress, const std::string& dir, const std::string& how);
  void note_committed(Progress& progress, const std::optional<fsdp::ckpt::FinishedSave>& finished);

  fsdp::ProcessGroup& world_;
  const TrainOptions& o_;
  const std::string run_dir_;
  const std::string extras_json_;
  std::optional<fsdp::ckpt::AsyncSaver> async_;  // --async-save
};

}  // namespace fsdp_train
