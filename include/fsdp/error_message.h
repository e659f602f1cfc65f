#pragma once
// The text of an error, for a person or for another rank. See [Note: error
// messages] in docs/design.md: every message libfsdp throws starts with
// "fsdp: ", and none carries a C++ backtrace into another message.

#include <exception>
#include <string>

namespace fsdp {

// e.what(), without the C++ backtrace that c10::Error::what() appends, and
// without any backtrace a library embedded in the text of a message it
// rethrew ("Exception raised from ...", "frame #N: ..." lines): a user never
// sees one.
std::string error_message(const std::exception& e);

// The message of the exception being handled (call inside a catch block).
std::string current_error_message();

}  // namespace fsdp
