// [Note: one timeout, set from the launcher]
// Every wait for a peer (the rendezvous store, Gloo's connect, the barrier
// that ends group creation, each collective) uses GroupOptions::timeout, so
// one number bounds how long a job can hang on a dead or stopped peer. Jobs
// are usually started through a launcher and tools whose code the user does
// not edit, so the default can come from the environment: fsdp-run --timeout
// and fsdp-train --timeout set it, and torchrun users export it themselves.

#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "fsdp/comm/process_group.h"

namespace fsdp {
namespace {

constexpr const char* kVariable = "FSDP_COMM_TIMEOUT";
constexpr double kMaxSeconds = 86400.0;

}  // namespace

std::chrono::milliseconds default_comm_timeout() {
  const char* text = std::getenv(kVariable);
  if (text == nullptr || *text == '\0') return std::chrono::minutes(5);
  errno = 0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  TORCH_CHECK(errno == 0 && *end == '\0' && seconds > 0 && seconds <= kMaxSeconds, "fsdp: ",
              kVariable, "='", text, "' is not a number of seconds in (0, 86400]; set it to, "
              "e.g., 600, or unset it for the default of 300");
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000.0 + 0.5)));
}

}  // namespace fsdp
