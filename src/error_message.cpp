#include "fsdp/error_message.h"

#include <c10/util/Exception.h>

namespace fsdp {
namespace {

bool starts_with(const std::string& line, const char* prefix) { return line.rfind(prefix, 0) == 0; }

// Drops the lines of a C++ backtrace that another layer pasted into a
// message (c10d and Gloo rethrow with what(), backtrace included).
std::string without_backtrace_lines(const std::string& text) {
  std::string kept;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    if (!starts_with(line, "Exception raised from ") && !starts_with(line, "frame #")) {
      kept += (kept.empty() ? "" : "\n") + line;
    }
    begin = end + 1;
  }
  return kept;
}

}  // namespace

std::string error_message(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return without_backtrace_lines(c10_error->what_without_backtrace());
  }
  return without_backtrace_lines(e.what());
}

std::string current_error_message() {
  try {
    throw;
  } catch (const std::exception& e) {
    return error_message(e);
  } catch (...) {
    return "unknown error (not a std::exception)";
  }
}

}  // namespace fsdp
