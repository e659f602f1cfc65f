#include "checkpoint/error_cause.h"

#include "fsdp/error_message.h"

namespace fsdp::ckpt::detail {

std::string without_fsdp_prefix(const std::string& message) {
  static const std::string kPrefix = "fsdp: ";
  return message.rfind(kPrefix, 0) == 0 ? message.substr(kPrefix.size()) : message;
}

std::string error_cause(const std::exception& e) { return without_fsdp_prefix(error_message(e)); }

}  // namespace fsdp::ckpt::detail
