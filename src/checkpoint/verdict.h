#pragma once
// What one rank tells the others after a step of a collective checkpoint
// operation: whether the step succeeded, why not, and what it produced (see
// [Note: checkpoint commit protocol] in save.cpp). It travels as a JSON
// object with named fields, so no reader parses a prefix or a position.
// Internal to src/checkpoint.

#include <string>
#include <vector>

namespace fsdp {
class ProcessGroup;
}

namespace fsdp::ckpt::detail {

struct Verdict {
  bool ok = true;
  std::string message;                     // why the step failed; empty when ok
  std::string result;   // what the step produced when ok (its own text, e.g. a path or JSON); "" for nothing

  static Verdict success(std::string result = "");
  // `message` is a cause, without the "fsdp: " prefix (see [Note: nested
  // error messages] in error_cause.h).
  static Verdict failure(std::string message);

  // {"ok": ..., "message": ..., "result": ...}
  std::string encode() const;
  // Throws naming what is missing if `text` is not an encode()d Verdict.
  static Verdict decode(const std::string& text);
};

// Every rank's verdict, by rank. Collective over `group`.
std::vector<Verdict> all_gather_verdicts(ProcessGroup& group, const Verdict& mine);

}  // namespace fsdp::ckpt::detail
