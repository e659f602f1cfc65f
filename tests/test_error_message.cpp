// fsdp::error_message: the text a user sees never carries a C++ backtrace,
// neither c10's own nor one another library pasted into a message it
// rethrew (issue #13, point 2: a missing node printed a 16-frame trace).

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "fsdp/error_message.h"

namespace fsdp {
namespace {

TEST(ErrorMessage, C10ErrorsLoseTheirBacktrace) {
  try {
    TORCH_CHECK(false, "fsdp: something failed");
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Exception raised from"), std::string::npos);
    EXPECT_EQ(error_message(e), "fsdp: something failed");
  }
}

TEST(ErrorMessage, ABacktracePastedIntoAMessageIsDropped) {
  const std::runtime_error pasted(
      "fsdp: creating Gloo group 'world' failed: Socket Timeout\n"
      "Exception raised from recvBytes at ../torch/csrc/distributed/c10d/Utils.hpp:604 (most "
      "recent call first):\n"
      "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9e (0x7f in libc10.so)\n"
      "frame #1: <unknown function> + 0x1b6a2 (0x55d5 in fsdp-train)\n"
      "Check that all 2 ranks started");
  EXPECT_EQ(error_message(pasted),
            "fsdp: creating Gloo group 'world' failed: Socket Timeout\n"
            "Check that all 2 ranks started");
}

}  // namespace
}  // namespace fsdp
