#pragma once
// Finding the worker program before anything starts, the way execvp would,
// so that a typo is one clear error instead of N failed workers.

#include <string>

namespace fsdp_run {

struct ResolvedProgram {
  std::string path;   // absolute or relative path to exec; empty on error
  std::string error;  // why it cannot be run; empty on success
  int exit_code = 0;  // 127 not found, 126 found but not runnable (shell convention)
};

// A name with a '/' is used as given; otherwise each PATH entry is tried in
// order (an empty entry means the current directory; no PATH means
// "/usr/local/bin:/usr/bin:/bin").
ResolvedProgram resolve_program(const std::string& name);

}  // namespace fsdp_run
