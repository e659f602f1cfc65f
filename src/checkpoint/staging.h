#pragma once
// Where a checkpoint is built before it exists: "<dir>.partial-<id>", next to
// the target, renamed into place only once index.json is durable inside it.
// See [Note: checkpoint commit protocol] in save.cpp. Internal to src/checkpoint.

#include <string>

#include "checkpoint/index.h"

namespace fsdp::ckpt::detail {

// Checks that `dir` can be created or replaced, before anything is written:
// its parent exists and is a writable directory; `dir` does not exist, or
// `overwrite` is set and `dir` is a libfsdp checkpoint (has index.json) or an
// empty directory. Throws c10::Error naming the path and the fix.
void check_target(const std::string& dir, bool overwrite);

// A fresh id for a staging directory: "<pid>-<random hex>".
std::string new_staging_id();

// "<dir>.partial-<id>".
std::string staging_path(const std::string& dir, const std::string& id);

// Creates the staging directory (which must not exist).
void create_staging(const std::string& staging);

// Moves the finished `staging` directory to `dir`, replacing an existing
// `dir` if `overwrite` (atomically with renameat2(RENAME_EXCHANGE) where the
// filesystem supports it), and removes what was replaced. fsyncs the parent.
void commit_staging(const std::string& staging, const std::string& dir, bool overwrite);

// The last step of every save: writes `index` as <staging>/index.json
// (atomically), fsyncs the staging directory, and commit_staging()s it.
void publish_checkpoint(const std::string& staging, const Index& index, const std::string& dir,
                        bool overwrite);

}  // namespace fsdp::ckpt::detail
