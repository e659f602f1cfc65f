#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "checkpoint/atomic_file.h"
#include "checkpoint/index.h"
#include "checkpoint/output_outside_input.h"
#include "checkpoint/safetensors_writer.h"
#include "fsdp/checkpoint/convert.h"
#include "fsdp/checkpoint/reader.h"

namespace fsdp::ckpt {

void consolidate(const std::string& dir, const std::string& out, bool overwrite) {
  detail::check_output_outside_input(dir, out, "consolidate");
  const Reader reader = Reader::open(dir);
  AtomicFile file(out, overwrite);
  std::vector<safetensors::Writer::Declared> declared;
  for (const auto& t : reader.index().tensors) declared.push_back({t.name, t.dtype, t.shape});
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"libfsdp_step", std::to_string(reader.step())},
      {"libfsdp_extras", reader.extras_json()}};
  safetensors::Writer writer(file.file(), declared, metadata);
  for (const auto& t : reader.index().tensors) writer.write_next(reader.read_full(t.name));
  writer.finish();
  file.commit();
}

}  // namespace fsdp::ckpt
