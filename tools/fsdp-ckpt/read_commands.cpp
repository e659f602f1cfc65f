// fsdp-ckpt's commands that only read: inspect and verify.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/run_dir.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/error_message.h"

namespace fsdp_ckpt {

using fsdp::ckpt::Reader;

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int verify_checkpoint(const std::string& dir) {
  const Reader reader = Reader::open(dir);
  const auto report = reader.verify_all();
  fmt::print("OK: {} tensors, {} pieces, {} verified in '{}'\n", report.tensors, report.pieces,
             human_bytes(report.bytes), dir);
  return 0;
}

// A run dir: every checkpoint in it, newest first, and its leftover partial
// saves. Exits 1 if any checkpoint fails, naming each.
int verify_run_dir(const std::string& dir) {
  const auto found = fsdp::ckpt::checkpoints_in_run_dir(dir);
  int failed = 0;
  for (const auto& checkpoint : found) {
    try {
      verify_checkpoint(checkpoint.dir);
    } catch (const std::exception& e) {
      ++failed;
      fmt::print("FAILED: '{}': {}\n", checkpoint.dir, fsdp::error_message(e));
    }
  }
  for (const auto& partial : fsdp::ckpt::partial_checkpoints_in_run_dir(dir)) {
    fmt::print("partial: '{}' (a save that did not complete; `fsdp-ckpt clean {}` removes it)\n",
               partial, dir);
  }
  if (found.empty()) throw std::runtime_error(fmt::format("run dir '{}' holds no checkpoint", dir));
  fmt::print("{} of {} checkpoints in run dir '{}' verified\n", found.size() - failed,
             found.size(), dir);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int inspect(const std::string& dir) {
  const Reader reader = Reader::open(dir);
  const std::vector<std::string> names = reader.names();
  int64_t total_bytes = 0;
  size_t name_width = 6, shape_width = 5;
  for (const auto& name : names) {
    name_width = std::max(name_width, name.size());
    shape_width = std::max(shape_width, shape_text(reader.global_shape(name)).size());
  }
  fmt::print("checkpoint   {}\n", dir);
  fmt::print("format       libfsdp-checkpoint v{}\n", reader.format_version());
  fmt::print("world size   {}\n", reader.saved_world_size());
  fmt::print("step         {}\n", reader.step());
  fmt::print("extras       {}\n", reader.extras_json());
  fmt::print("files        {} (checksum xxh64, {} blocks)\n\n", reader.file_count(),
             human_bytes(reader.checksum_block_bytes()));
  fmt::print("{:<{}}  {:<{}}  {:<5}  {:>12}  {:>6}\n", "tensor", name_width, "shape", shape_width, "dtype",
             "size", "pieces");
  for (const auto& name : names) {
    const at::ScalarType dtype = reader.dtype(name);
    const int64_t bytes = reader.numel(name) * static_cast<int64_t>(c10::elementSize(dtype));
    total_bytes += bytes;
    fmt::print("{:<{}}  {:<{}}  {:<5}  {:>12}  {:>6}\n", name, name_width,
               shape_text(reader.global_shape(name)), shape_width,
               fsdp::ckpt::safetensors::dtype_name(dtype), human_bytes(bytes),
               reader.piece_count(name));
  }
  fmt::print("\n{} tensors, {} of data\n", names.size(), human_bytes(total_bytes));
  return 0;
}

int verify(const std::string& dir) {
  if (!fsdp::ckpt::is_checkpoint_dir(dir) && fsdp::ckpt::is_run_dir(dir)) return verify_run_dir(dir);
  return verify_checkpoint(dir);
}

}  // namespace fsdp_ckpt
