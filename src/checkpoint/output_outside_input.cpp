#include "checkpoint/output_outside_input.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <filesystem>

namespace fsdp::ckpt::detail {
namespace {

namespace fs = std::filesystem;

// The absolute path with every existing part's symlinks resolved, so that
// two spellings of one place compare equal.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal() : p;
}

// Whether `inner` is `outer` or lies below it.
bool is_within(const fs::path& inner, const fs::path& outer) {
  const auto mismatch = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return mismatch.first == outer.end();
}

}  // namespace

void check_output_outside_input(const std::string& dir, const std::string& out,
                                const std::string& command) {
  const fs::path input = resolved(dir);
  const fs::path output = resolved(out);
  TORCH_CHECK(!is_within(output, input), "fsdp: ", command, ": the output '", out,
              "' is inside the checkpoint '", dir, "' being read; writing there would destroy "
              "the checkpoint. Write the output outside that directory");
  TORCH_CHECK(!is_within(input, output), "fsdp: ", command, ": the output '", out,
              "' holds the checkpoint '", dir, "' being read; replacing it would destroy the "
              "checkpoint. Write the output somewhere else");
}

}  // namespace fsdp::ckpt::detail
