// fsdp-train: a byte-level GPT trained with FSDP, the library's main demo.
//
// Where things are (one concept per file):
//   train_options  the command line, its defaults and the input checks
//   corpus         the byte corpus and the (seed, step) -> batch sampler
//   lr_schedule    warmup + cosine decay
//   run_dir        the run directory, checkpoint paths, rank agreement
//   resume_config  what a checkpoint records, and --resume's defaults
//   restart_env    what fsdp-run tells a restarted start; fault_injection: a test seam
//   trainer        the training loop (model, optimizer, eval, checkpoints)
//   progress       the live progress line; metrics_log: metrics.jsonl
//   plot           plot.png via gnuplot; generate: text sampling
//   report         the header and the summary table
//
// This file decides where the process sits in the job (alone, or launched by
// fsdp-run/torchrun/mpirun/srun), checks every input on every rank before
// any heavy work or any collective, has the ranks agree that every one of
// them can start, then creates the process group and trains. Exit status:
// 0 done (also when --resume auto finds the training already complete); 2
// bad input (every rank, wherever it was found); 1 a failure while training.

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "corpus.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/comm/job_rendezvous.h"
#include "fsdp/comm/launch_env.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/cpu_heap.h"
#include "fsdp/error_message.h"
#include "memory_check.h"
#include "restart_env.h"
#include "resume_config.h"
#include "run_dir.h"
#include "train_options.h"
#include "trainer.h"
#include "training_device.h"

namespace {

using fsdp_train::TrainOptions;
using fsdp_train::TrainSetup;

constexpr int kDone = 0;
constexpr int kBadInput = 2;
constexpr int kFailed = 1;

// [Note: a finished run under --resume auto]
// The checkpoint to resume is at --steps (the checkpoint's, or a given one)
// or beyond: nothing is left to train. Under --resume auto that is the run
// dir of a finished training, restarted because a rank failed after the
// final save (in the sample or the report): done, exit 0, so that fsdp-run
// ends the job as a success instead of restarting it until its restarts run
// out. The test is on the step alone, not on checkpoint/ existing: a run
// stopped by --time-budget also saves checkpoint/, before --steps, and the
// next start continues it with a budget of its own. A checkpoint named with
// --resume DIR asks to train from it, so there the same finding is an error.
void note_nothing_left(TrainSetup& setup, std::vector<std::string>& errors) {
  const TrainOptions& o = setup.options;
  if (o.resume == "auto") {
    setup.finished = fmt::format(
        "the training in run dir '{}' is complete: its newest checkpoint that verifies, '{}', "
        "is at step {} of --steps {}; nothing left to train (--resume auto), exiting. Pass a "
        "larger --steps to train further",
        o.run_dir, setup.resume_dir, setup.resume_step, o.steps);
    return;
  }
  errors.push_back(fmt::format(
      "--resume '{}' is at step {}, and --steps is {}: nothing is left to train; pass a "
      "larger --steps (the cosine schedule then spans the new total)",
      setup.resume_dir, setup.resume_step, o.steps));
}

// --resume first: options left out default to the checkpoint's.
void adopt_resume_checkpoint(TrainSetup& setup, std::vector<std::string>& errors) {
  TrainOptions& o = setup.options;
  if (o.resume.empty()) return;
  try {
    const std::optional<fsdp_train::ResumeChoice> found =
        o.resume == "auto" ? fsdp_train::resolve_auto_resume(o.run_dir)
                           : fsdp_train::resolve_resume_dir(o.resume);
    if (!found) return;  // --resume auto in a new run dir: a fresh start
    fsdp_train::ResumeChoice choice = *found;
    setup.resume_dir = choice.dir;
    setup.resume_rejected = std::move(choice.rejected);
    const fsdp::ckpt::Reader reader = fsdp::ckpt::Reader::open(setup.resume_dir);
    setup.resume_step = reader.step();
    for (auto& e : fsdp_train::adopt_checkpoint_options(o, reader.extras_json(), setup.resume_dir)) {
      errors.push_back(std::move(e));
    }
    if (errors.empty() && setup.resume_step >= o.steps) note_nothing_left(setup, errors);
  } catch (const std::exception& e) {
    errors.push_back(fsdp::error_message(e));
  }
}

// The corpus, and what to tell the user about the checkpoint it resumes from.
void load_training_data(TrainSetup& setup, std::vector<std::string>& errors) {
  const TrainOptions& o = setup.options;
  if (o.context > 0) {
    try {
      setup.corpus = fsdp_train::load_corpus(o.data, o.context);
    } catch (const std::exception& e) {
      errors.push_back(fsdp::error_message(e));
    }
  }
  if (!setup.resume_dir.empty() && errors.empty()) {
    setup.resume_warning = fsdp_train::resume_warning(
        setup.corpus, fsdp::ckpt::Reader::open(setup.resume_dir).extras_json(), setup.resume_dir);
  }
}

// What cannot fit in this node's memory is refused before it is read or
// built. Returns false when the corpus must not even be read.
bool check_memory(const TrainSetup& setup, int ranks_on_node, std::vector<std::string>& errors) {
  const auto available = fsdp_train::available_memory_bytes();
  if (std::string e = fsdp_train::check_corpus_fits(setup.options.data, ranks_on_node, available);
      !e.empty()) {
    errors.push_back(std::move(e));
    return false;
  }
  // See [Note: the memory check before building the model] in memory_check.h.
  if (!errors.empty()) return true;  // the batch layout it needs may be invalid
  // On a GPU the training state lives in GPU memory, which this host check
  // does not see; the caching allocator's out-of-memory error names it.
  if (setup.options.device == "cuda") return true;
  if (std::string e = fsdp_train::check_fits_in_memory(setup.options, setup.layout, ranks_on_node,
                                                       available,
                                                       fsdp_train::rank_memory_limit_bytes());
      !e.empty()) {
    errors.push_back(std::move(e));
  }
  return true;
}

// Every input, checked on every rank before any heavy work or collective.
// Most verdicts depend only on the arguments and the world size; those on
// files, memory and GPUs may differ between nodes, which is why the ranks
// then share them (train_distributed).
std::vector<std::string> check_inputs(TrainSetup& setup, int world_size, int ranks_on_node) {
  std::vector<std::string> errors;
  if (std::string e = setup.faults.read_from_env(); !e.empty()) errors.push_back(std::move(e));
  adopt_resume_checkpoint(setup, errors);
  // See [Note: a finished run under --resume auto]: nothing else is needed.
  if (!setup.finished.empty()) return errors;
  for (auto& e : fsdp_train::check_options(setup.options, world_size, &setup.layout)) {
    errors.push_back(std::move(e));
  }
  if (std::string e = fsdp_train::check_device(setup.options, ranks_on_node); !e.empty()) {
    errors.push_back(std::move(e));
  }
  if (!check_memory(setup, ranks_on_node, errors)) return errors;
  load_training_data(setup, errors);
  // The run dir (or, for the default runs/<timestamp>, runs/) must be
  // creatable; every rank checks, since every rank writes checkpoints.
  const std::string& run_dir = setup.options.run_dir;
  if (const std::string problem =
          fsdp_train::check_run_dir(run_dir.empty() ? std::string("runs") : run_dir);
      !problem.empty()) {
    errors.push_back(problem);
  }
  setup.timeline.inputs_checked = fsdp_train::epoch_seconds_now();
  return errors;
}

int report_bad_input(const std::vector<std::string>& errors) {
  for (const auto& e : errors) std::fprintf(stderr, "fsdp-train: error: %s\n", e.c_str());
  std::fprintf(stderr, "fsdp-train: run with --help for every option and its default\n");
  return kBadInput;
}

// A rank that was ready names the ranks that were not. Only the first ready
// rank of each node speaks (ranks are numbered node by node), so a node of
// eight ranks says it once.
void report_ranks_not_ready(const std::vector<fsdp::RankNotReady>& not_ready,
                            const fsdp::LaunchEnv& env) {
  const auto is_ready = [&](int rank) {
    return std::none_of(not_ready.begin(), not_ready.end(),
                        [&](const fsdp::RankNotReady& r) { return r.rank == rank; });
  };
  for (int rank = env.rank - env.local_rank; rank < env.rank; ++rank) {
    if (is_ready(rank)) return;  // a lower ready rank of this node speaks
  }
  constexpr size_t kNamed = 8;
  for (size_t i = 0; i < std::min(not_ready.size(), kNamed); ++i) {
    const fsdp::RankNotReady& r = not_ready[i];
    const std::string more =
        r.problems.size() > 1 ? fmt::format(" (and {} more)", r.problems.size() - 1) : "";
    std::fprintf(stderr, "fsdp-train: error: rank %d on %s cannot start: %s%s\n", r.rank,
                 r.host.c_str(), r.problems.front().c_str(), more.c_str());
  }
  if (not_ready.size() > kNamed) {
    std::fprintf(stderr, "fsdp-train: error: and %zu more ranks cannot start\n",
                 not_ready.size() - kNamed);
  }
  std::fprintf(stderr,
               "fsdp-train: every rank stops; fix the input on those ranks' nodes (their own "
               "output says more) and start the job again\n");
}

fsdp::GroupOptions group_options(const TrainOptions& o) {
  fsdp::GroupOptions options;
  options.backend = fsdp_train::training_backend(o);
  options.host_staging = fsdp_train::stages_through_host(o);
  if (o.timeout > 0) {
    options.timeout =
        std::chrono::milliseconds(std::max<int64_t>(1, std::llround(o.timeout * 1000)));
  }
  return options;
}

// What a rank sets up once it knows the whole job will train.
void prepare_this_rank(TrainSetup& setup, int local_world_size, int local_rank) {
  setup.threads = fsdp_train::threads_per_rank(local_world_size);
  at::set_num_threads(setup.threads);
  // Sharded steps free and reallocate the same buffers every unit; [Note:
  // freed CPU memory kept for reuse] in fsdp/cpu_heap.h.
  fsdp::keep_freed_cpu_memory();
  setup.device = fsdp_train::select_training_device(setup.options, local_rank);
}

// Creates the process group with `make_world` and trains. A failure from
// here on is not the input's: exit 1. `where` names the rank in errors.
int train_in_world(TrainSetup& setup, const std::function<fsdp::ProcessGroupPtr()>& make_world,
                   const std::string& where) {
  try {
    setup.world = make_world();
    setup.timeline.world_ready = fsdp_train::epoch_seconds_now();
    return fsdp_train::train(setup);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-train: error%s: %s\n", where.c_str(), fsdp::error_message(e).c_str());
    if (std::string hint = fsdp_train::out_of_memory_hint(e); !hint.empty()) {
      std::fprintf(stderr, "fsdp-train: %s\n", hint.c_str());
    }
    return kFailed;
  }
}

// See [Note: a finished run under --resume auto]. Returns the exit status.
int report_finished(const TrainSetup& setup, bool speaks) {
  if (speaks) std::printf("fsdp-train: %s\n", setup.finished.c_str());
  return kDone;
}

int train_alone(TrainSetup& setup, const std::vector<std::string>& errors) {
  if (!errors.empty()) return report_bad_input(errors);
  if (!setup.finished.empty()) return report_finished(setup, /*speaks=*/true);
  prepare_this_rank(setup, /*local_world_size=*/1, /*local_rank=*/0);
  const fsdp::GroupOptions options = group_options(setup.options);
  return train_in_world(setup, [&] { return fsdp::make_single_process_group(options); }, "");
}

// [Note: ranks stop together on a problem one of them found] in
// fsdp/comm/job_rendezvous.h: every rank meets the others, even with bad
// input, so that a problem on one node stops the whole job at once.
int train_distributed(TrainSetup& setup, const fsdp::LaunchEnv& env,
                      const std::vector<std::string>& errors) {
  if (!errors.empty()) report_bad_input(errors);  // at once: the others may be slow to come
  const fsdp::GroupOptions options = group_options(setup.options);
  std::optional<fsdp::JobRendezvous> meeting;
  try {
    meeting.emplace(env, errors, options.timeout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-train: error on rank %d: %s\n", env.rank,
                 fsdp::error_message(e).c_str());
    return errors.empty() ? kFailed : kBadInput;
  }
  if (!meeting->not_ready().empty()) {
    if (errors.empty()) report_ranks_not_ready(meeting->not_ready(), env);
    return kBadInput;
  }
  // After the meeting, so that a rank that finds bad input still stops all.
  if (!setup.finished.empty()) return report_finished(setup, /*speaks=*/env.rank == 0);
  prepare_this_rank(setup, env.local_world_size, env.local_rank);
  setup.local_rank = env.local_rank;
  return train_in_world(setup, [&] { return meeting->create_world(options); },
                        fmt::format(" on rank {}", env.rank));
}

}  // namespace

int main(int argc, char** argv) {
  const double process_start = fsdp_train::epoch_seconds_now();
  fsdp_train::ParseResult parsed = fsdp_train::parse_train_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  TrainSetup setup;
  setup.options = std::move(*parsed.options);
  setup.restart = fsdp_train::read_restart_env();
  setup.timeline.process_start = process_start;

  // Where this process sits. Nothing here talks to other ranks.
  if (!fsdp::launched_distributed()) {
    setup.launcher = "standalone";
    return train_alone(setup, check_inputs(setup, /*world_size=*/1, /*ranks_on_node=*/1));
  }
  fsdp::LaunchEnv env;
  try {
    env = fsdp::read_launch_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-train: error: %s\n", fsdp::error_message(e).c_str());
    return kBadInput;
  }
  setup.launcher = env.source;
  return train_distributed(setup, env, check_inputs(setup, env.world_size, env.local_world_size));
}
