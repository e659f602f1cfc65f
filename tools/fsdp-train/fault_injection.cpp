#include "fault_injection.h"

#include <fmt/format.h>

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <sstream>

namespace fsdp_train {

std::string FaultInjection::read_from_env() {
  kills_.clear();
  const char* text = std::getenv("FSDP_TRAIN_TEST_SIGKILL_AT");
  if (text == nullptr || *text == '\0') return "";
  std::stringstream all(text);
  std::string one;
  while (std::getline(all, one, ',')) {
    PlannedKill kill;
    char colon1 = 0, colon2 = 0;
    std::stringstream fields(one);
    fields >> kill.rank >> colon1 >> kill.step >> colon2 >> kill.attempt;
    const bool numbers_read = !fields.fail() && colon1 == ':' && colon2 == ':';
    std::string suffix;
    if (numbers_read && !fields.eof()) std::getline(fields, suffix);
    kill.with_launcher = suffix == ":launcher";
    if (!numbers_read || (!suffix.empty() && !kill.with_launcher)) {
      kills_.clear();
      return fmt::format(
          "FSDP_TRAIN_TEST_SIGKILL_AT '{}': '{}' is not RANK:STEP:ATTEMPT[:launcher] (e.g. "
          "1:4:0); it is a test seam, unset it for training runs",
          text, one);
    }
    kills_.push_back(kill);
  }
  return "";
}

void FaultInjection::kill_if_planned(int rank, int64_t step, int attempt) const {
  for (const PlannedKill& kill : kills_) {
    if (kill.rank != rank || kill.step != step || kill.attempt != attempt) continue;
    if (kill.with_launcher) ::kill(getppid(), SIGKILL);
    std::raise(SIGKILL);
  }
}

}  // namespace fsdp_train
