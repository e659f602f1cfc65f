#pragma once
// What a checkpoint remembers about the run that wrote it (its "extras"),
// and how --resume uses that: options left off the command line are taken
// from the checkpoint, so `fsdp-train --resume DIR` continues the same run
// (same model, data, batches and schedule); options given explicitly must
// agree where they change the run's meaning (the model shape), and may
// differ where that is a choice (e.g. more --steps, a new --lr).

#include <cstdint>
#include <string>
#include <vector>

#include "corpus.h"
#include "train_options.h"

namespace fsdp_train {

// The extras fsdp-train stores in every checkpoint it writes, as JSON text
// (fsdp::ckpt::SaveOptions::extras_json): {"trainer": "fsdp-train",
// "options": {...}, "world_size": N, "corpus": {...}}.
std::string checkpoint_extras(const TrainOptions& options, const ByteCorpus& corpus, int world_size);

// Fills the options not given on the command line from `extras` and returns
// one message per conflict between a given option and the checkpoint. A
// checkpoint fsdp-train did not write (an import) records no options: the
// command line alone then defines the run.
std::vector<std::string> adopt_checkpoint_options(TrainOptions& options,
                                                  const std::string& extras_json,
                                                  const std::string& checkpoint_dir);

// What to tell the user ("" if nothing) about continuing from this
// checkpoint: that fsdp-train did not write it, or that the corpus differs
// from its own (the run then continues on other data than it started on).
std::string resume_warning(const ByteCorpus& corpus, const std::string& extras_json,
                           const std::string& checkpoint_dir);

}  // namespace fsdp_train
