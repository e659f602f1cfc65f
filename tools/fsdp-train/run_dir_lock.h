#pragma once
// One run per run dir.
//
// [Note: one run per run dir]
// Two fsdp-train runs started into the same --run-dir both used to succeed,
// leaving one run's metrics beside the other's checkpoints (and once a
// metrics.jsonl line cut by the other's write). Rank 0 now holds an
// exclusive flock(2) on <run-dir>/.fsdp-train.lock for the whole run. The
// kernel drops the lock when the process ends however it ends, so a killed
// run never leaves a stale lock behind, and a second run is refused at once,
// naming the holder that the file records (pid and host). Only rank 0 locks:
// it is the rank that writes the run dir's shared files, and a second run's
// rank 0 is the one that meets the lock. Resuming a killed run into its own
// dir works, since the lock died with it.

#include <string>

namespace fsdp_train {

class RunDirLock {
 public:
  RunDirLock() = default;
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // Takes the lock of `run_dir` (which exists) and records this process in
  // it. Returns "" on success, else a message naming the dir, the holder and
  // the fix. The lock is held until this object is destroyed.
  std::string acquire(const std::string& run_dir);

  static constexpr const char* kFileName = ".fsdp-train.lock";

 private:
  int fd_ = -1;
};

}  // namespace fsdp_train
