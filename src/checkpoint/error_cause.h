#pragma once
// The text of a failure that the checkpoint code wraps in a message of its
// own or sends to the other ranks. Internal to src/checkpoint.
//
// [Note: nested error messages]
// Every message libfsdp throws starts with "fsdp: ". A save or load that
// fails names the failure inside a message of its own ("fsdp: checkpoint
// save to 'x' failed: rank 1: <cause>"), so the cause drops its own "fsdp: "
// and the prefix appears once, at the start. The cause never carries c10's
// C++ backtrace: fsdp::error_message() strips it, since a backtrace pasted
// into another message, or sent to another rank, tells its reader nothing.

#include <exception>
#include <string>

namespace fsdp::ckpt::detail {

// fsdp::error_message(e), without a leading "fsdp: ".
std::string error_cause(const std::exception& e);

// `message` without a leading "fsdp: ".
std::string without_fsdp_prefix(const std::string& message);

}  // namespace fsdp::ckpt::detail
