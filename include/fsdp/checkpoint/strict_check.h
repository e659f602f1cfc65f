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

#include "fsdp/state_dict.h"

namespace fsdp::ckpt {

class Reader;

struct ExpectedTensor {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
};

// The same report as a state dict load's; mismatched entries read
// "name: checkpoint has [4, 3] Float, model expects [3, 4] Float".
using KeyCheck = KeyMismatches;

KeyCheck compare_keys(const Reader& reader, const std::map<std::string, ExpectedTensor>& expected);

// Throws c10::Error with compare_keys(...).message() unless it is ok().
void check_strict(const Reader& reader, const std::map<std::string, ExpectedTensor>& expected);

}  // namespace fsdp::ckpt
