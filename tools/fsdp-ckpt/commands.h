#pragma once
// The fsdp-ckpt commands that are more than one library call. Each prints
// its result on stdout, returns the exit code, and throws on failure.

#include <cstdint>
#include <string>

namespace fsdp_ckpt {

// inspect: the index as a table.
int inspect(const std::string& dir);

// verify: every byte of a checkpoint, or of every checkpoint in a run dir
// (exit 1 naming each that fails), listing leftover partial saves.
int verify(const std::string& dir);

// clean: removes a run dir's partial saves, unless a run holds the dir.
int clean(const std::string& dir);

// The checkpoint a command works on: `dir` itself, or, for a run dir, its
// newest checkpoint that verifies (said on stderr).
std::string checkpoint_of(const std::string& dir);

// "1.5 MiB".
std::string human_bytes(int64_t bytes);

}  // namespace fsdp_ckpt
