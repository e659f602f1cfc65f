#include "checkpoint/save_hook.h"

#include <mutex>

namespace fsdp::ckpt {
namespace {
std::mutex g_hook_mutex;
testing::SaveHook g_hook;  // guarded by g_hook_mutex
}  // namespace

void testing::set_save_hook(SaveHook hook) {
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  g_hook = std::move(hook);
}

void detail::run_save_hook(int rank, testing::SavePhase phase, const std::string& path) {
  testing::SaveHook hook;
  {
    std::lock_guard<std::mutex> lock(g_hook_mutex);
    hook = g_hook;
  }
  if (hook) hook(rank, phase, path);  // outside the lock: a hook may take long, or never return
}

}  // namespace fsdp::ckpt
