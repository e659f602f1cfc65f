// fsdp-train: a byte-level GPT trained with FSDP, the library's main demo.
//
// Where things are (one concept per file):
//   train_options  the command line, its defaults and the input checks
//   corpus         the byte corpus and the (seed, step) -> batch sampler
//   lr_schedule    warmup + cosine decay
//   run_dir        the run directory, checkpoint paths, rank agreement
//   resume_config  what a checkpoint records, and --resume's defaults
//   trainer        the training loop (model, optimizer, eval, checkpoints)
//   progress       the live progress line; metrics_log: metrics.jsonl
//   plot           plot.png via gnuplot; generate: text sampling
//   report         the header and the summary table
//
// This file decides where the process sits in the job (alone, or launched by
// fsdp-run/torchrun/mpirun/srun), checks every input on every rank before
// any heavy work or any collective, then creates the process group and
// trains. Exit status: 0 done; 2 bad input (every rank); 1 a failure while
// training.

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "corpus.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/comm/launch_env.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/cpu_heap.h"
#include "fsdp/error_message.h"
#include "memory_check.h"
#include "resume_config.h"
#include "run_dir.h"
#include "train_options.h"
#include "trainer.h"
#include "training_device.h"

namespace {

using fsdp_train::TrainOptions;
using fsdp_train::TrainSetup;

constexpr int kBadInput = 2;
constexpr int kFailed = 1;

// Ranks on one machine share its cores: give each 1/LOCAL_WORLD_SIZE of them
// unless OMP_NUM_THREADS says otherwise.
int threads_per_rank(int local_world_size) {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) {
    return std::atoi(env);
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, local_world_size));
}

// --resume first: options left out default to the checkpoint's.
void adopt_resume_checkpoint(TrainSetup& setup, std::vector<std::string>& errors) {
  TrainOptions& o = setup.options;
  if (o.resume.empty()) return;
  try {
    fsdp_train::ResumeChoice choice = fsdp_train::resolve_resume_dir(o.resume);
    setup.resume_dir = choice.dir;
    setup.resume_rejected = std::move(choice.rejected);
    const fsdp::ckpt::Reader reader = fsdp::ckpt::Reader::open(setup.resume_dir);
    setup.resume_step = reader.step();
    for (auto& e : fsdp_train::adopt_checkpoint_options(o, reader.extras_json(), setup.resume_dir)) {
      errors.push_back(std::move(e));
    }
    if (errors.empty() && setup.resume_step >= o.steps) {
      errors.push_back(fmt::format(
          "--resume '{}' is at step {}, and --steps is {}: nothing is left to train; pass a "
          "larger --steps (the cosine schedule then spans the new total)",
          setup.resume_dir, setup.resume_step, o.steps));
    }
  } catch (const std::exception& e) {
    errors.push_back(fsdp::error_message(e));
  }
}

// The corpus, and a warning when a resumed run would continue on other data.
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
    setup.corpus_warning = fsdp_train::corpus_mismatch_warning(
        setup.corpus, fsdp::ckpt::Reader::open(setup.resume_dir).extras_json());
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
  // [Note: the memory check before building the model]
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
// The verdict depends only on the arguments, the files and the world size,
// so all ranks exit together when something is wrong.
std::vector<std::string> check_inputs(TrainSetup& setup, int world_size, int ranks_on_node) {
  std::vector<std::string> errors;
  adopt_resume_checkpoint(setup, errors);
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
  return errors;
}

int report_bad_input(const std::vector<std::string>& errors) {
  for (const auto& e : errors) std::fprintf(stderr, "fsdp-train: error: %s\n", e.c_str());
  std::fprintf(stderr, "fsdp-train: run with --help for every option and its default\n");
  return kBadInput;
}

// Creates the process group (alone: a one-rank group) and
// trains. A failure from here on is not the input's: exit 1.
int train_in_world(TrainSetup& setup, bool distributed, const fsdp::LaunchEnv& env) {
  try {
    fsdp::GroupOptions group_options;
    group_options.backend = fsdp_train::training_backend(setup.options);
    if (setup.options.timeout > 0) {
      group_options.timeout = std::chrono::milliseconds(
          std::max<int64_t>(1, std::llround(setup.options.timeout * 1000)));
    }
    if (distributed) {
      setup.world = fsdp::init_process_group_from_env(group_options);
    } else {
      setup.world = fsdp::make_single_process_group(group_options);
    }
    return fsdp_train::train(setup);
  } catch (const std::exception& e) {
    const std::string where = distributed ? fmt::format(" on rank {}", env.rank) : "";
    std::fprintf(stderr, "fsdp-train: error%s: %s\n", where.c_str(), fsdp::error_message(e).c_str());
    if (std::string hint = fsdp_train::out_of_memory_hint(e); !hint.empty()) {
      std::fprintf(stderr, "fsdp-train: %s\n", hint.c_str());
    }
    return kFailed;
  }
}

}  // namespace

int main(int argc, char** argv) {
  fsdp_train::ParseResult parsed = fsdp_train::parse_train_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  TrainSetup setup;
  setup.options = std::move(*parsed.options);

  // Where this process sits. Nothing here talks to other ranks.
  fsdp::LaunchEnv env;
  const bool distributed = fsdp::launched_distributed();
  if (distributed) {
    try {
      env = fsdp::read_launch_env();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fsdp-train: error: %s\n", fsdp::error_message(e).c_str());
      return kBadInput;
    }
  }
  setup.launcher = distributed ? env.source : "standalone";

  const std::vector<std::string> errors =
      check_inputs(setup, env.world_size, distributed ? env.local_world_size : 1);
  if (!errors.empty()) return report_bad_input(errors);

  setup.threads = threads_per_rank(distributed ? env.local_world_size : 1);
  at::set_num_threads(setup.threads);
  // Sharded steps free and reallocate the same buffers every unit; [Note:
  // freed CPU memory kept for reuse] in fsdp/cpu_heap.h.
  fsdp::keep_freed_cpu_memory();
  setup.device =
      fsdp_train::select_training_device(setup.options, distributed ? env.local_rank : 0);
  return train_in_world(setup, distributed, env);
}
