#include "output_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace fsdp_train {
namespace {

[[noreturn]] void throw_write_error(const std::string& path, int error) {
  throw std::runtime_error(fmt::format(
      "writing '{}' failed: {}; free space there (or pass another --run-dir) and resume from "
      "the last checkpoint",
      path, error != 0 ? std::strerror(error) : "the stream reported an error"));
}

}  // namespace

void flush_or_throw(std::ostream& out, const std::string& path) {
  errno = 0;
  out.flush();
  if (!out) throw_write_error(path, errno);
}

void write_output_file(const std::string& path, const std::string& text) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw_write_error(path, errno);
  out << text;
  flush_or_throw(out, path);
  out.close();
  if (!out) throw_write_error(path, errno);
}

}  // namespace fsdp_train
