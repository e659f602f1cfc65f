#include "fsdp/checkpoint/strict_check.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>

#include "fsdp/checkpoint/reader.h"

namespace fsdp::ckpt {

namespace {
std::string describe(const std::vector<int64_t>& shape, at::ScalarType dtype) {
  std::ostringstream out;
  out << c10::IntArrayRef(shape) << " " << c10::toString(dtype);
  return out.str();
}
}  // namespace

KeyCheck compare_keys(const Reader& reader, const std::map<std::string, ExpectedTensor>& expected) {
  KeyCheck result;
  for (const auto& [name, want] : expected) {
    if (!reader.contains(name)) {
      result.missing.push_back(name);
      continue;
    }
    const auto& shape = reader.global_shape(name);
    const auto dtype = reader.dtype(name);
    if (shape != want.shape || dtype != want.dtype)
      result.mismatched.push_back(name + ": checkpoint has " + describe(shape, dtype) + ", model expects " +
                                  describe(want.shape, want.dtype));
  }
  for (const auto& name : reader.names())
    if (!expected.count(name)) result.unexpected.push_back(name);
  std::sort(result.unexpected.begin(), result.unexpected.end());
  return result;
}

void check_strict(const Reader& reader, const std::map<std::string, ExpectedTensor>& expected) {
  KeyCheck check = compare_keys(reader, expected);
  TORCH_CHECK(check.ok(), "fsdp: ", check.message("checkpoint '" + reader.dir() + "'", "the checkpoint"));
}

}  // namespace fsdp::ckpt
