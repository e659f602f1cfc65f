#include "fsdp/checkpoint/safetensors.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <cstring>

#include "checkpoint/atomic_file.h"
#include "checkpoint/safetensors_writer.h"
#include "json/json_io.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the checkpoint code copies tensor bytes as-is and assumes a little-endian host");

namespace fsdp::ckpt::safetensors {

namespace {

// safetensors refuses headers above 100 MB; so do we, so a corrupted length
// does not make us allocate gigabytes.
constexpr int64_t kMaxHeaderBytes = 100 * 1000 * 1000;

const std::vector<std::pair<at::ScalarType, const char*>>& dtype_table() {
  static const std::vector<std::pair<at::ScalarType, const char*>> table = {
      {at::kBool, "BOOL"}, {at::kByte, "U8"},       {at::kChar, "I8"},   {at::kShort, "I16"},
      {at::kInt, "I32"},   {at::kLong, "I64"},      {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
      {at::kFloat, "F32"}, {at::kDouble, "F64"},
  };
  return table;
}

int64_t element_size_of(const std::string& dtype) {
  return static_cast<int64_t>(c10::elementSize(dtype_from_name(dtype)));
}

}  // namespace

std::string dtype_name(at::ScalarType dtype) {
  for (const auto& [type, name] : dtype_table())
    if (type == dtype) return name;
  TORCH_CHECK(false, "fsdp: dtype ", c10::toString(dtype),
              " cannot be stored in safetensors; supported: bool, uint8, int8, int16, int32, "
              "int64, float16, bfloat16, float32, float64");
}

at::ScalarType dtype_from_name(const std::string& name) {
  for (const auto& [type, type_name] : dtype_table())
    if (name == type_name) return type;
  TORCH_CHECK(false, "fsdp: unsupported safetensors dtype \"", name,
              "\"; this reader handles BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64");
}

namespace {

// The header's JSON object, after checking its length field fits the file.
// Sets `data_start` to the file offset where the data section begins.
json::Document read_header_object(const InputFile& in, const std::string& path, int64_t* data_start) {
  uint64_t n = 0;
  TORCH_CHECK(in.read_at(0, &n, 8), "fsdp: '", path, "' is not a safetensors file: it has only ", in.size(),
              " bytes, less than the 8-byte header length");
  TORCH_CHECK(static_cast<int64_t>(n) <= kMaxHeaderBytes && static_cast<int64_t>(n) <= in.size() - 8,
              "fsdp: '", path, "' is not a valid safetensors file (truncated or corrupted?): its header "
              "length field says ", n, " bytes but the file has ", in.size(), " bytes");
  std::string text(n, '\0');
  TORCH_CHECK(in.read_at(8, text.data(), static_cast<int64_t>(n)), "fsdp: cannot read header of '", path, "'");
  json::Document header = json::parse(text, "the safetensors header of '" + path + "'");
  TORCH_CHECK(header.IsObject(), "fsdp: '", path, "' has a safetensors header that is not a JSON object");
  *data_start = 8 + static_cast<int64_t>(n);
  return header;
}

// One tensor's entry, checked against its shape and dtype and against the
// `data_bytes` of the data section.
Entry parse_entry(const std::string& path, const std::string& key, const json::Value& value,
                  int64_t data_bytes) {
  Entry e;
  e.key = key;
  const std::string where = "the safetensors header of '" + path + "', tensor '" + key + "'";
  e.dtype = json::string_field(value, "dtype", where);
  e.shape = json::int64_array_field(value, "shape", where);
  auto offsets = json::int64_array_field(value, "data_offsets", where);
  TORCH_CHECK(offsets.size() == 2, "fsdp: '", path, "': tensor '", e.key, "' has data_offsets with ",
              offsets.size(), " values, expected 2");
  e.begin = offsets[0];
  e.end = offsets[1];
  for (int64_t d : e.shape)
    TORCH_CHECK(d >= 0, "fsdp: '", path, "': tensor '", e.key, "' has a negative dimension");
  const int64_t expected = c10::multiply_integers(e.shape) * element_size_of(e.dtype);
  TORCH_CHECK(e.begin >= 0 && e.end - e.begin == expected, "fsdp: '", path, "': tensor '", e.key,
              "' has data_offsets [", e.begin, ", ", e.end, ") but its shape and dtype need ", expected,
              " bytes");
  TORCH_CHECK(e.end <= data_bytes, "fsdp: '", path, "' is truncated: tensor '", e.key, "' needs data bytes [",
              e.begin, ", ", e.end, ") but the data section has only ", data_bytes, " bytes");
  return e;
}

// Sorts the entries by offset and checks that none overlaps the next.
void sort_and_check_overlap(const std::string& path, std::vector<Entry>* entries) {
  std::sort(entries->begin(), entries->end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries->size(); ++i) {
    const auto& prev = (*entries)[i - 1];
    const auto& cur = (*entries)[i];
    TORCH_CHECK(cur.begin >= prev.end, "fsdp: '", path, "': tensors '", prev.key, "' and '", cur.key,
                "' overlap in the data section");
  }
}

}  // namespace

Header read_header(const std::string& path) {
  InputFile in(path);
  Header result;
  const json::Document header = read_header_object(in, path, &result.data_start);
  const int64_t data_bytes = in.size() - result.data_start;
  for (const auto& member : header.GetObject()) {
    const std::string key(member.name.GetString(), member.name.GetStringLength());
    if (key != "__metadata__") {
      result.entries.push_back(parse_entry(path, key, member.value, data_bytes));
      continue;
    }
    const std::string where = "the safetensors header of '" + path + "', __metadata__";
    json::require_object(member.value, where);
    for (const auto& m : member.value.GetObject()) {
      const std::string name(m.name.GetString(), m.name.GetStringLength());
      result.metadata[name] = json::as_string(m.value, where + ": field '" + name + "'");
    }
  }
  sort_and_check_overlap(path, &result.entries);
  return result;
}

void save_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
               const std::map<std::string, std::string>& metadata, bool overwrite) {
  AtomicFile file(path, overwrite);
  std::vector<Writer::Declared> declared;
  for (const auto& [key, t] : tensors) declared.push_back({key, t.scalar_type(), t.sizes().vec()});
  Writer writer(file.file(), declared, metadata);
  for (const auto& kv : tensors) writer.write_next(kv.second);
  writer.finish();
  file.commit();
}

at::Tensor read_entry(const std::string& path, const Header& header, const Entry& entry) {
  InputFile in(path);
  at::Tensor t = at::empty(entry.shape, at::TensorOptions().dtype(dtype_from_name(entry.dtype)));
  TORCH_CHECK(in.read_at(header.data_start + entry.begin, t.data_ptr(), entry.end - entry.begin),
              "fsdp: '", path, "' is truncated: tensor '", entry.key, "' lies past the end of the file");
  return t;
}

std::vector<std::pair<std::string, at::Tensor>> load_file(const std::string& path) {
  Header header = read_header(path);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& e : header.entries) out.emplace_back(e.key, read_entry(path, header, e));
  return out;
}

}  // namespace fsdp::ckpt::safetensors
