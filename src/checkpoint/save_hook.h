#pragma once
// Fault injection for the checkpoint tests: save() and save_local() call a
// hook on each rank at each phase, with the path about to be (or just)
// written. A hook that throws makes that rank's save fail as an I/O error
// would; one that raises SIGKILL simulates a crash. Process-wide. Internal
// to src/checkpoint and the tests (which include it from src/).

#include <functional>
#include <string>

namespace fsdp::ckpt::testing {

enum class SavePhase { kBeforeDataFile, kAfterDataFile, kBeforeIndex };
using SaveHook = std::function<void(int rank, SavePhase phase, const std::string& path)>;

// Pass nullptr to remove the hook.
void set_save_hook(SaveHook hook);

}  // namespace fsdp::ckpt::testing

namespace fsdp::ckpt::detail {

// Calls the hook, if one is set.
void run_save_hook(int rank, testing::SavePhase phase, const std::string& path);

}  // namespace fsdp::ckpt::detail
