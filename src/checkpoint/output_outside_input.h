#pragma once
// The converters (consolidate, export, reshard) read a checkpoint and write
// somewhere else. Internal to src/checkpoint.

#include <string>

namespace fsdp::ckpt::detail {

// Throws c10::Error, before anything is read or written, when `out` would
// replace the checkpoint `dir` or a file inside it, or would be a directory
// holding it: with overwrite, such an output destroys its own input.
// Symlinks and relative paths are resolved first. `command` names the
// converter in the error ("consolidate").
void check_output_outside_input(const std::string& dir, const std::string& out,
                                const std::string& command);

}  // namespace fsdp::ckpt::detail
