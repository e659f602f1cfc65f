#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "checkpoint/atomic_file.h"
#include "checkpoint/index.h"
#include "checkpoint/output_outside_input.h"
#include "fsdp/checkpoint/convert.h"
#include "fsdp/checkpoint/reader.h"

namespace fsdp::ckpt {

void export_torch(const std::string& dir, const std::string& out, bool overwrite) {
  detail::check_output_outside_input(dir, out, "export");
  const Reader reader = Reader::open(dir);
  AtomicFile file(out, overwrite);  // fails before reading anything if `out` exists
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& t : reader.index().tensors) dict.insert(t.name, reader.read_full(t.name));
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  file.file().write_all(bytes.data(), static_cast<int64_t>(bytes.size()));
  file.commit();
}

}  // namespace fsdp::ckpt
