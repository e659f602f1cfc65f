#pragma once
// --standalone: ask the kernel for an unused TCP port on 127.0.0.1.

#include <string>

namespace fsdp_run {

// Returns a port from the kernel's ephemeral range, or 0 with `error` set.
// The port is free when we return; rank 0 binds it moments later (the same
// small race torchrun --standalone accepts).
int pick_free_port(std::string& error);

}  // namespace fsdp_run
