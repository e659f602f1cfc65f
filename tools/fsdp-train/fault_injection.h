#pragma once
// A test seam: FSDP_TRAIN_TEST_SIGKILL_AT makes a rank SIGKILL itself at the
// start of a step, in a given start of the job, to test restarts with real
// failures (tests/test_trainer_resume.cpp). Not for training runs; unset,
// it does nothing.
//
//   FSDP_TRAIN_TEST_SIGKILL_AT=RANK:STEP:ATTEMPT[:launcher][,...]
//
// ATTEMPT is the start's TORCHELASTIC_RESTART_COUNT (0 for the first), so a
// kill planned for the first start does not fire again after the restart
// that resumes before that step. ":launcher" first SIGKILLs the rank's
// parent, its fsdp-run: a whole node lost (the node's other workers die
// with their launcher).

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp_train {

class FaultInjection {
 public:
  // Reads FSDP_TRAIN_TEST_SIGKILL_AT. Returns "" or what is wrong with it.
  std::string read_from_env();

  // SIGKILLs this process if a planned kill matches; returns otherwise.
  void kill_if_planned(int rank, int64_t step, int attempt) const;

 private:
  struct PlannedKill {
    int rank = 0;
    int64_t step = 0;
    int attempt = 0;
    bool with_launcher = false;
  };
  std::vector<PlannedKill> kills_;
};

}  // namespace fsdp_train
