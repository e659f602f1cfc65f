#include "model_fingerprint.h"

#include <c10/util/Exception.h>

#include <sstream>

#include "unit_name.h"

namespace fsdp::detail {
namespace {

std::vector<std::string> describe(const DiscoveredModel& model) {
  std::vector<std::string> lines;
  for (const auto& unit : model.units) {
    lines.push_back("unit '" + display_name(unit.name) + "'");
    for (size_t i = 0; i < unit.params.size(); ++i) {
      std::ostringstream line;
      line << "parameter '" << unit.param_names[i] << "' " << unit.params[i].sizes() << " "
           << unit.params[i].scalar_type()
           << (unit.params[i].requires_grad() ? "" : " (frozen)");
      lines.push_back(line.str());
    }
  }
  for (size_t i = 0; i < model.buffers.size(); ++i) {
    std::ostringstream line;
    line << "buffer '" << model.buffer_names[i] << "' " << model.buffers[i].sizes() << " "
         << model.buffers[i].scalar_type();
    lines.push_back(line.str());
  }
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

void check_same_model_on_all_ranks(ProcessGroup& world, const DiscoveredModel& model) {
  const std::string mine = join_lines(describe(model));
  const std::vector<std::string> all = all_gather_strings(world, mine);
  const std::vector<std::string> reference = split_lines(all.at(0));
  for (size_t rank = 1; rank < all.size(); ++rank) {
    if (all[rank] == all[0]) continue;
    const std::vector<std::string> other = split_lines(all[rank]);
    size_t i = 0;
    while (i < reference.size() && i < other.size() && reference[i] == other[i]) ++i;
    const std::string ref_line = i < reference.size() ? reference[i] : "<nothing>";
    const std::string other_line = i < other.size() ? other[i] : "<nothing>";
    TORCH_CHECK(false, "fsdp: the model differs across ranks; first difference at entry ", i,
                ": rank 0 has ", ref_line, ", rank ", rank, " has ", other_line,
                ". Every rank must build the same model (same layers, shapes and dtypes) before "
                "fully_shard");
  }
}

}  // namespace fsdp::detail
