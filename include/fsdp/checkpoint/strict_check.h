#pragma once
// Comparing what a checkpoint holds with what a model expects, reporting
// every problem at once: missing keys, unexpected keys, and shape or dtype
// mismatches, each by name. One error listing all of them beats fixing one
// key per run.
//
//   std::map<std::string, fsdp::ckpt::ExpectedTensor> expected = ...;
//   fsdp::ckpt::check_strict(reader, expected);  // throws listing every problem

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fsdp::ckpt {

class Reader;

struct ExpectedTensor {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
};

struct KeyCheck {
  std::vector<std::string> missing;     // expected, not in the checkpoint
  std::vector<std::string> unexpected;  // in the checkpoint, not expected
  std::vector<std::string> mismatched;  // "name: checkpoint has [4, 3] Float, expected [3, 4] Float"

  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // A multi-line description of every problem; empty when ok().
  std::string message(const std::string& source) const;
};

KeyCheck compare_keys(const Reader& reader, const std::map<std::string, ExpectedTensor>& expected);

// Throws c10::Error with compare_keys(...).message() unless it is ok().
void check_strict(const Reader& reader, const std::map<std::string, ExpectedTensor>& expected);

}  // namespace fsdp::ckpt
