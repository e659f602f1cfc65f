#include "checkpoint/safetensors_writer.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <cstring>
#include <set>

#include "checkpoint/atomic_file.h"
#include "checkpoint/checksum.h"
#include "json/json_io.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the checkpoint code copies tensor bytes as-is and assumes a little-endian host");

namespace fsdp::ckpt::safetensors {

std::string encode_header(const std::vector<Entry>& entries,
                          const std::map<std::string, std::string>& metadata) {
  // Safetensors readers do not care about key order, only about data_offsets;
  // the entries are written in data order, after __metadata__.
  json::Writer header;
  header.begin_object();
  if (!metadata.empty()) {
    header.key("__metadata__").begin_object();
    for (const auto& [name, value] : metadata) header.member(name, value);
    header.end_object();
  }
  std::set<std::string> keys;
  for (const auto& e : entries) {
    TORCH_CHECK(e.key != "__metadata__", "fsdp: a tensor may not be named __metadata__");
    TORCH_CHECK(keys.insert(e.key).second, "fsdp: duplicate safetensors key '", e.key, "'");
    header.key(e.key).begin_object().member("dtype", e.dtype);
    header.key("shape").array(e.shape);
    header.key("data_offsets").begin_array().value(e.begin).value(e.end).end_array();
    header.end_object();
  }
  std::string text = header.end_object().text();
  // Pad with spaces so the data section starts 8-byte aligned.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  uint64_t n = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);  // little-endian host (static_assert above)
  return out + text;
}

Writer::Writer(OutputFile& out, const std::vector<Declared>& entries,
               const std::map<std::string, std::string>& metadata)
    : out_(out) {
  TORCH_CHECK(out_.offset() == 0, "fsdp: safetensors::Writer must start at offset 0 of '", out_.path(), "'");
  int64_t offset = 0;
  for (const auto& d : entries) {
    Entry e;
    e.key = d.key;
    e.dtype = dtype_name(d.dtype);
    e.shape = d.shape;
    e.begin = offset;
    e.end = offset + c10::multiply_integers(d.shape) * static_cast<int64_t>(c10::elementSize(d.dtype));
    offset = e.end;
    entries_.push_back(std::move(e));
  }
  std::string header = encode_header(entries_, metadata);
  data_start_ = static_cast<int64_t>(header.size());
  header_checksum_ = xxh64(header.data(), data_start_);
  out_.write_all(header.data(), static_cast<int64_t>(header.size()));
}

int64_t Writer::write_next(const at::Tensor& tensor) {
  TORCH_CHECK(next_ < entries_.size(), "fsdp: safetensors::Writer: more tensors written than declared");
  const auto& e = entries_[next_];
  TORCH_CHECK(dtype_name(tensor.scalar_type()) == e.dtype, "fsdp: tensor '", e.key, "' was declared ",
              e.dtype, " but has dtype ", c10::toString(tensor.scalar_type()));
  TORCH_CHECK(tensor.numel() == c10::multiply_integers(e.shape), "fsdp: tensor '", e.key, "' was declared with ",
              c10::multiply_integers(e.shape), " elements but has ", tensor.numel());
  at::Tensor cpu = tensor.to(at::kCPU).contiguous();
  return write_next_bytes(cpu.data_ptr(), static_cast<int64_t>(cpu.nbytes()));
}

int64_t Writer::write_next_bytes(const void* data, int64_t nbytes) {
  TORCH_CHECK(next_ < entries_.size(), "fsdp: safetensors::Writer: more tensors written than declared");
  const auto& e = entries_[next_];
  TORCH_CHECK(nbytes == e.end - e.begin, "fsdp: tensor '", e.key, "' needs ", e.end - e.begin,
              " bytes, got ", nbytes);
  const int64_t at_offset = data_start_ + e.begin;
  TORCH_INTERNAL_ASSERT(out_.offset() == at_offset);
  out_.write_all(data, nbytes);
  ++next_;
  return at_offset;
}

void Writer::finish() {
  TORCH_CHECK(next_ == entries_.size(), "fsdp: safetensors::Writer for '", out_.path(), "': only ", next_,
              " of ", entries_.size(), " declared tensors were written");
}

}  // namespace fsdp::ckpt::safetensors
