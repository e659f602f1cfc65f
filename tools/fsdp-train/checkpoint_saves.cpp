#include "checkpoint_saves.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "async_copy_bytes.h"
#include "fsdp/checkpoint/training_state.h"
#include "phase_times.h"
#include "run_dir.h"

namespace fsdp_train {
namespace {

using Clock = std::chrono::steady_clock;

// Checkpoints go to a new directory of the run dir: its parent may be new too.
void create_parent(const std::string& dir) {
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path());
}

}  // namespace

CheckpointSaves::CheckpointSaves(fsdp::ProcessGroup& world, const TrainOptions& options,
                                 std::string run_dir, std::string extras_json,
                                 const fsdp::UnitModule& model,
                                 const torch::optim::AdamW& optimizer)
    : world_(world),
      o_(options),
      run_dir_(std::move(run_dir)),
      extras_json_(std::move(extras_json)) {
  if (!o_.async_save) return;
  async_.emplace(world_);
  async_->reserve(async_copy_bytes(model, optimizer, world_.rank()));
}

void CheckpointSaves::after_step(int64_t step, const fsdp::UnitModule& model,
                                 const torch::optim::Optimizer& optimizer, Progress& progress) {
  if (async_) note_committed(progress, async_->poll());
  if (o_.save_every <= 0 || step % o_.save_every != 0) return;
  const std::string dir = step_checkpoint_dir(run_dir_, step);
  if (async_) {
    create_parent(dir);
    // Returns once the shards are copied (see [Note: saving while training]),
    // and the save before this one if it committed since the poll above.
    note_committed(progress, async_->save(dir, fsdp::ckpt::training_state_pieces(model, &optimizer),
                                          save_options(step)));
    return;
  }
  const auto start = Clock::now();
  save(dir, step, model, optimizer);
  note_saved(progress, dir, fmt::format("{:.1f}s", seconds_since(start)));
}

void CheckpointSaves::finish_step_saves(Progress& progress) {
  if (async_) note_committed(progress, async_->wait());
}

void CheckpointSaves::save_final(int64_t step, const fsdp::UnitModule& model,
                                 const torch::optim::Optimizer& optimizer) {
  save(final_dir(), step, model, optimizer);
}

std::string CheckpointSaves::final_dir() const { return final_checkpoint_dir(run_dir_); }

fsdp::ckpt::SaveOptions CheckpointSaves::save_options(int64_t step) const {
  fsdp::ckpt::SaveOptions options;
  options.step = step;
  options.extras_json = extras_json_;
  options.overwrite = true;
  return options;
}

void CheckpointSaves::save(const std::string& dir, int64_t step, const fsdp::UnitModule& model,
                           const torch::optim::Optimizer& optimizer) {
  create_parent(dir);
  fsdp::ckpt::save_training_state(world_, dir, model, &optimizer, save_options(step));
}

void CheckpointSaves::note_committed(Progress& progress,
                                     const std::optional<fsdp::ckpt::FinishedSave>& finished) {
  if (!finished) return;
  note_saved(progress, finished->dir,
             fmt::format("{:.1f}s in the background after {:.2f}s copying", finished->write_seconds,
                         finished->copy_seconds));
}

void CheckpointSaves::note_saved(Progress& progress, const std::string& dir,
                                 const std::string& how) {
  if (world_.rank() != 0) return;
  progress.note(fmt::format("  saved {} ({})", dir, how));
  for (const std::string& old : prune_step_checkpoints(run_dir_, o_.keep_last)) {
    progress.note(fmt::format("  removed {} (--keep-last {})", old, o_.keep_last));
  }
}

}  // namespace fsdp_train
