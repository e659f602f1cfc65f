// The training loop. See trainer.h; the data order is explained in
// [Note: batches independent of the world size] (corpus.h).

#include "trainer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "checkpoint_saves.h"
#include "config_json.h"
#include "fsdp/checkpoint/run_dir.h"
#include "fsdp/checkpoint/training_state.h"
#include "fsdp/clip_grad.h"
#include "fsdp/fully_shard.h"
#include "fsdp/introspection.h"
#include "fsdp/models/gpt.h"
#include "gpt_setup.h"
#include "lr_schedule.h"
#include "memory_check.h"
#include "metrics_log.h"
#include "phase_times.h"
#include "plot.h"
#include "progress.h"
#include "rank_memory.h"
#include "report.h"
#include "resume_config.h"
#include "run_dir.h"
#include "run_dir_lock.h"
#include "sample_file.h"
#include "step_measures.h"
#include "training_device.h"

namespace fsdp_train {
namespace {

using Clock = std::chrono::steady_clock;
using fsdp::models::GPT;
using fsdp::models::GPTConfig;

// What the loop leaves for the summary.
struct LoopOutcome {
  int64_t last_step = 0;
  bool stopped_by_budget = false;
  double train_seconds = 0;
  double first_loss = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> last_losses;  // global mean loss of the last 10 steps
  std::optional<double> last_val;

  void note_loss(double loss) {
    if (std::isnan(first_loss)) first_loss = loss;
    last_losses.push_back(loss);
    if (last_losses.size() > 10) last_losses.erase(last_losses.begin());
  }
  double final_loss() const {
    double tail = 0;
    for (double l : last_losses) tail += l;
    return last_losses.empty() ? 0 : tail / static_cast<double>(last_losses.size());
  }
};

// One optimizer step as every rank agrees on it.
struct AgreedStep {
  double loss = 0;  // mean over the global batch
  double grad_norm = 0;
  bool over_budget = false;  // some rank ran out of --time-budget
};

class Trainer {
 public:
  explicit Trainer(TrainSetup& setup)
      : s_(setup),
        o_(setup.options),
        world_(*setup.world),
        rank0_(world_.rank() == 0),
        sampler_(setup.corpus, o_.context, o_.seed),
        schedule_{o_.lr, o_.min_lr, o_.warmup, o_.steps},
        tokens_per_step_(static_cast<double>(o_.batch * o_.context)),
        measures_(setup.device),
        phases_(setup.device, o_.phase_times) {}

  int run();

 private:
  // Before the loop.
  void build_model();
  void resume_if_asked();
  void start_outputs(const fsdp::MemoryStats& initial);
  ProgressConfig progress_config() const;
  // The loop.
  LoopOutcome train_loop(Progress& progress);
  void note_restart_latency(Progress& progress);
  void record_progress(int64_t last_completed_step) const;
  AgreedStep optimizer_step(int64_t step, Clock::time_point train_start);
  at::Tensor train_step(int64_t step);  // this rank's mean loss, on the device
  // A batch tensor on the training device: on CUDA through pinned memory,
  // without waiting for the GPU.
  at::Tensor to_device(const at::Tensor& host) const {
    if (!s_.device.is_cuda()) return host;
    return host.pin_memory().to(s_.device, /*non_blocking=*/true);
  }
  StepRecord step_record(int64_t step, const AgreedStep& agreed, Clock::time_point step_start);
  void show_step(Progress& progress, const StepRecord& record, bool last);
  double evaluate();
  std::vector<int64_t> gather(int64_t mine) { return fsdp::all_gather_int64(world_, mine); }
  double estimate_eta(int64_t step, double elapsed) const;
  // After the loop.
  void report(const LoopOutcome& loop, std::vector<RankMemory> memory, const std::string& final_dir,
              const std::string& sample);
  // Small tensors for the trainer's own collectives. See [Note: a group's device].
  at::TensorOptions collective_options(at::ScalarType dtype) const {
    return at::TensorOptions().dtype(dtype).device(fsdp::collective_device(world_, s_.device));
  }

  TrainSetup& s_;
  const TrainOptions& o_;
  fsdp::ProcessGroup& world_;
  const bool rank0_;
  BatchSampler sampler_;
  LrSchedule schedule_;
  const double tokens_per_step_;
  std::optional<fsdp::Sharded<GPT>> model_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::string run_dir_;
  fsdp::tools::RunDirLock run_dir_lock_;  // rank 0 only
  fsdp::ckpt::CleanReport cleaned_;     // rank 0 only: partial saves removed at start
  std::optional<CheckpointSaves> saves_;  // once the run dir is agreed on
  std::optional<MetricsLog> metrics_;   // rank 0 only
  std::vector<int64_t> sharded_bytes_;  // per rank, as built
  int64_t start_step_ = 0;
  double recent_step_s_ = 0;  // moving average of the step time
  double loop_start_ = 0;     // epoch seconds: the model built and loaded, for the restart latency
  StepMeasures measures_;  // constructed before the model is built
  PhaseTimer phases_;      // --phase-times
};

// Every collective below runs on every rank in the same order; only what
// rank 0 prints and writes is guarded by rank0_.
int Trainer::run() {
  build_model();
  resume_if_asked();
  run_dir_ = agree_on_run_dir(world_, o_.run_dir);
  // See [Note: one run per run dir] in tools/run_dir_lock.h.
  fail_together(world_, rank0_ ? run_dir_lock_.acquire(run_dir_) : "");
  // Safe under the lock: no other run saves here. Partial saves of a killed
  // run can be as large as the model; nothing can resume from them.
  if (rank0_) cleaned_ = fsdp::ckpt::clean_partial_checkpoints(run_dir_);
  saves_.emplace(world_, o_, run_dir_, checkpoint_extras(o_, s_.corpus, world_.size()), **model_,
                 *optimizer_);
  const fsdp::MemoryStats initial = fsdp::memory_stats(**model_);
  sharded_bytes_ = gather(initial.sharded_param_bytes);
  if (rank0_) start_outputs(initial);

  Progress progress(progress_config());
  if (o_.hook_times) measures_.start_hook_timer();
  const LoopOutcome loop = train_loop(progress);
  measures_.stop_hook_timer();
  saves_->finish_step_saves(progress);
  progress.finish();

  const std::string final_dir = saves_->final_dir();
  saves_->save_final(loop.last_step, **model_, *optimizer_);
  std::string sample;
  if (o_.sample_bytes > 0) sample = generate_sample(*model_, o_, s_.device);
  std::vector<RankMemory> memory =
      gather_rank_memory(world_, **model_, *optimizer_, measures_.run_peaks());
  if (rank0_) report(loop, std::move(memory), final_dir, sample);
  return 0;
}

void Trainer::build_model() {
  // Every rank builds the same full model from the same seed, then keeps its
  // shards: the initial weights do not depend on the world size. Deferred,
  // each rank initializes one module at a time, drawing the same values.
  at::manual_seed(o_.seed);
  const GPTConfig config = model_config(o_);
  fsdp::FullyShardOptions options;
  if (o_.deferred_init) options.param_init_fn(fsdp::models::init_gpt_module);
  options.process_group(s_.world)
      .strategy(sharding_strategy(o_))
      .mp(mixed_precision_policy(o_))
      .compression(comm_compression(o_))
      .offload(fsdp::OffloadPolicy().offload_params(o_.offload).pin_memory(s_.device.is_cuda()))
      .prefetch(!o_.no_prefetch);
  GPT gpt(config);
  // Initialized on the CPU from the seed, then moved: the same initial
  // weights on every device (deferred init is refused with CUDA: validate_device).
  if (!s_.device.is_cpu()) gpt->to(s_.device);
  model_.emplace(fsdp::fully_shard(std::move(gpt), options));
  model_->get()->train();
  optimizer_ = make_optimizer((*model_)->named_parameters(), o_);  // over the shards
}

void Trainer::resume_if_asked() {
  if (s_.resume_dir.empty()) return;
  const auto loaded =
      fsdp::ckpt::load_training_state(world_, s_.resume_dir, **model_, optimizer_.get());
  start_step_ = loaded.step;
}

// Rank 0: the header, config.json and metrics.jsonl.
void Trainer::start_outputs(const fsdp::MemoryStats& initial) {
  if (!s_.resume_warning.empty()) fmt::print("fsdp-train: {}\n", s_.resume_warning);
  RunHeader header;
  header.options = &o_;
  header.layout = &s_.layout;
  header.corpus = &s_.corpus;
  header.launcher = s_.launcher;
  header.threads = s_.threads;
  header.num_params = model_config(o_).num_params();
  header.unsharded_param_bytes = initial.unsharded_param_bytes;
  header.run_dir = run_dir_;
  header.resume_dir = s_.resume_dir;
  header.resume_rejected = s_.resume_rejected;
  header.cleaned = cleaned_;
  header.start_step = start_step_;
  header.rank_memory_limit = rank_memory_limit_bytes().value_or(0);
  print_header(header);
  write_config_json(s_, world_.size(), start_step_, run_dir_);
  metrics_.emplace(run_dir_, start_step_, s_.restart.restart_count);
}

ProgressConfig Trainer::progress_config() const {
  ProgressConfig pc;
  pc.enabled = rank0_ && !o_.quiet;
  pc.terminal = ::isatty(STDOUT_FILENO) != 0;
  pc.total_steps = o_.steps;
  pc.log_every =
      o_.log_every > 0 ? o_.log_every : std::max<int64_t>(1, (o_.steps - start_step_) / 25);
  pc.time_budget = o_.time_budget;
  if (metrics_ && !metrics_->restarts().empty()) pc.restarts = metrics_->restarts().back();
  return pc;
}

LoopOutcome Trainer::train_loop(Progress& progress) {
  LoopOutcome outcome;
  const auto train_start = Clock::now();
  loop_start_ = epoch_seconds_now();
  int64_t step = start_step_;
  record_progress(step);
  while (step < o_.steps) {
    ++step;
    s_.faults.kill_if_planned(world_.rank(), step, s_.restart.restart_count);
    const auto step_start = Clock::now();
    const AgreedStep agreed = optimizer_step(step, train_start);
    record_progress(step);
    if (step == start_step_ + 1) note_restart_latency(progress);
    outcome.stopped_by_budget = agreed.over_budget && step < o_.steps;
    const bool last = step == o_.steps || outcome.stopped_by_budget;
    StepRecord record = step_record(step, agreed, step_start);
    if (last || (o_.eval_every > 0 && step % o_.eval_every == 0)) {
      record.val_loss = evaluate();
      outcome.last_val = record.val_loss;
    }
    record.elapsed_s = seconds_since(train_start);
    outcome.note_loss(agreed.loss);
    if (rank0_) show_step(progress, record, last);
    saves_->after_step(step, **model_, *optimizer_, progress);
    if (last) break;
  }
  outcome.last_step = step;
  outcome.train_seconds = seconds_since(train_start);
  return outcome;
}

// One writer per node: see [Note: restarts] in tools/fsdp-run/restarts.h.
void Trainer::record_progress(int64_t last_completed_step) const {
  if (s_.local_rank == 0) write_progress(s_.restart.progress_file, last_completed_step);
}

// Rank 0, after a restart's first step: the time from the failure to it, by
// phase. fsdp-run logs the first part of "start" (stopping the failed group).
void Trainer::note_restart_latency(Progress& progress) {
  if (!rank0_ || !s_.restart.failure_time) return;
  const StartTimeline& t = s_.timeline;
  const double now = epoch_seconds_now();
  progress.note(fmt::format(
      "  restart {}: first step {:.2f} s after the failure (stop and start {:.2f} s, checks "
      "{:.2f} s, rendezvous {:.2f} s, build and load {:.2f} s, first step {:.2f} s)",
      s_.restart.restart_count, now - *s_.restart.failure_time,
      t.process_start - *s_.restart.failure_time, t.inputs_checked - t.process_start,
      t.world_ready - t.inputs_checked, loop_start_ - t.world_ready, now - loop_start_));
}

AgreedStep Trainer::optimizer_step(int64_t step, Clock::time_point train_start) {
  measures_.start_step(**model_);
  phases_.start_step();
  const at::Tensor local_loss = train_step(step);
  const at::Tensor grad_norm = fsdp::clip_grad_norm_tensor_(
      **model_, o_.clip > 0 ? o_.clip : std::numeric_limits<double>::infinity());
  phases_.end_phase(StepPhase::kClip);
  optimizer_->step();
  phases_.end_phase(StepPhase::kOptimizer);

  // [Note: the step's one read-back]
  // The loss and the norm stay on the device through the step; one
  // all-reduce carries the global mean loss and the stop decision (so every
  // rank stops after the same step: clocks differ between ranks), and the
  // host reads its result once, after the whole step is queued.
  const bool over_budget = o_.time_budget > 0 && seconds_since(train_start) >= o_.time_budget;
  const auto options = collective_options(at::kDouble);
  at::Tensor sums =
      at::stack({local_loss.to(options), at::full({}, over_budget ? 1.0 : 0.0, options)});
  world_.all_reduce(sums, fsdp::ReduceOp::kSum)->wait();
  const at::Tensor host_sums = sums.cpu();
  AgreedStep agreed;
  agreed.loss = host_sums[0].item<double>() / world_.size();
  agreed.over_budget = host_sums[1].item<double>() > 0;
  agreed.grad_norm = grad_norm.item<double>();  // computed before the all-reduce: no wait
  phases_.end_phase(StepPhase::kBookkeeping);
  phases_.finish_step();
  return agreed;
}

at::Tensor Trainer::train_step(int64_t step) {
  fsdp::Sharded<GPT>& model = *model_;
  const double lr = schedule_.at(step);
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  zero_gradients(**model_);
  const BatchLayout& b = s_.layout;
  const int64_t first_row = static_cast<int64_t>(world_.rank()) * b.per_rank;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions(at::kDouble).device(s_.device));
  for (int64_t m = 0; m < b.grad_accum; ++m) {
    // Gradients are synchronized once per step: on the last micro-batch.
    std::optional<fsdp::NoSyncGuard> no_sync;
    if (m + 1 < b.grad_accum) no_sync.emplace(*model);
    const Batch batch = sampler_.rows(Split::kTrain, step, first_row + m * b.micro_batch,
                                      b.micro_batch);
    // Both copies queued before the forward, neither waiting for the GPU.
    const at::Tensor inputs = to_device(batch.inputs);
    const at::Tensor targets = to_device(batch.targets);
    at::Tensor logits = model->forward(inputs).to(at::kFloat);
    at::Tensor loss = fsdp::models::lm_loss(logits, targets);
    phases_.end_phase(StepPhase::kForward);
    (loss / static_cast<double>(b.grad_accum)).backward();
    phases_.end_phase(StepPhase::kBackward);
    loss_sum += loss.detach();
  }
  return loss_sum / static_cast<double>(b.grad_accum);
}

// The step's metrics line, but for val_loss and elapsed_s. Collective: it
// gathers every rank's memory figures (after timing the step).
StepRecord Trainer::step_record(int64_t step, const AgreedStep& agreed,
                                Clock::time_point step_start) {
  const double step_s = seconds_since(step_start);  // the step, not its bookkeeping
  recent_step_s_ = recent_step_s_ == 0 ? step_s : 0.9 * recent_step_s_ + 0.1 * step_s;

  StepRecord record;
  record.step = step;
  record.loss = agreed.loss;
  record.lr = schedule_.at(step);
  record.grad_norm = agreed.grad_norm;
  record.ms = 1000.0 * step_s;
  record.tokens_per_s = tokens_per_step_ / step_s;
  record.sharded_param_bytes = sharded_bytes_;
  measures_.finish_step(world_, **model_, record);
  return record;
}

// Rank 0: metrics.jsonl and the progress line.
void Trainer::show_step(Progress& progress, const StepRecord& record, bool last) {
  metrics_->append(record);
  progress.step(record, estimate_eta(record.step, record.elapsed_s), last);
  if (record.val_loss && !last) {
    progress.note(
        fmt::format("  validation loss at step {}: {:.4f}", record.step, *record.val_loss));
  }
}

// Mean loss over --eval-batches fixed global batches of validation bytes.
double Trainer::evaluate() {
  at::NoGradGuard no_grad;
  fsdp::Sharded<GPT>& model = *model_;
  model->eval();
  const BatchLayout& b = s_.layout;
  const int64_t first_row = static_cast<int64_t>(world_.rank()) * b.per_rank;
  double sum = 0;
  for (int64_t i = 0; i < o_.eval_batches; ++i) {
    for (int64_t m = 0; m < b.grad_accum; ++m) {
      const Batch batch = sampler_.rows(Split::kVal, i, first_row + m * b.micro_batch,
                                        b.micro_batch);
      const at::Tensor logits = model->forward(batch.inputs.to(s_.device)).to(at::kFloat);
      sum += fsdp::models::lm_loss(logits, batch.targets.to(s_.device)).item<double>();
    }
  }
  model->train();
  at::Tensor total = at::full({1}, sum / static_cast<double>(o_.eval_batches * b.grad_accum),
                              collective_options(at::kDouble));
  world_.all_reduce(total, fsdp::ReduceOp::kSum)->wait();
  return total.item<double>() / world_.size();
}

double Trainer::estimate_eta(int64_t step, double elapsed) const {
  double eta = recent_step_s_ * static_cast<double>(o_.steps - step);
  if (o_.time_budget > 0) eta = std::min(eta, std::max(0.0, o_.time_budget - elapsed));
  return eta;
}

// Rank 0: the plot, the sample and the summary table.
void Trainer::report(const LoopOutcome& loop, std::vector<RankMemory> memory,
                     const std::string& final_dir, const std::string& sample) {
  RunSummary summary;
  summary.start_step = start_step_;
  summary.last_step = loop.last_step;
  summary.total_steps = o_.steps;
  summary.stopped_by_time_budget = loop.stopped_by_budget;
  summary.train_seconds = loop.train_seconds;
  summary.first_loss = loop.first_loss;
  summary.final_loss = loop.final_loss();
  summary.final_val_loss = loop.last_val;
  const int64_t steps_run = loop.last_step - start_step_;
  summary.mean_tokens_per_s =
      loop.train_seconds > 0
          ? tokens_per_step_ * static_cast<double>(steps_run) / loop.train_seconds
          : 0;
  summary.unsharded_param_bytes = fsdp::memory_stats(**model_).unsharded_param_bytes;
  summary.ranks = std::move(memory);
  summary.on_cuda = s_.device.is_cuda();
  summary.hooks = summarize_hook_times(metrics_->records(), o_.layers + 1, s_.layout.grad_accum,
                                       /*includes_waits=*/!s_.device.is_cuda());
  summary.run_dir = run_dir_;
  summary.metrics = metrics_->path();
  summary.checkpoint = final_dir;
  if (!metrics_->restarts().empty()) summary.restarts = metrics_->restarts().back();

  const std::string title =
      fmt::format("fsdp-train: GPT {}x{}, {} rank{}, {}, {}", o_.layers, o_.width, world_.size(),
                  world_.size() == 1 ? "" : "s", o_.strategy, o_.mixed_precision);
  const PlotResult plot = write_plot(run_dir_, metrics_->records(), metrics_->restarts(), title);
  summary.plot = plot.png;
  summary.plot_error = plot.error;
  if (!sample.empty()) summary.sample_file = write_sample(run_dir_, o_, sample);
  print_summary(summary);
  // The first two steps warm the allocator and the kernels up.
  if (phases_.enabled()) fmt::print("{}", phases_.summary(2));
}

}  // namespace

int train(TrainSetup& setup) {
  Trainer trainer(setup);
  return trainer.run();
}

}  // namespace fsdp_train
