#include "json/json_io.h"

#include <c10/util/Exception.h>
#include <rapidjson/error/en.h>

#include <cmath>
#include <limits>

// See [Note: no JSON symbols shared with LibTorch] in json_io.h.

namespace fsdp::json {

std::string parse_error(const std::string& text, Document* doc) {
  doc->Parse<rapidjson::kParseFullPrecisionFlag>(text.data(), text.size());
  if (!doc->HasParseError()) return "";
  return c10::str(rapidjson::GetParseError_En(doc->GetParseError()), " at byte ", doc->GetErrorOffset());
}

Document parse(const std::string& text, const std::string& source) {
  Document doc;
  const std::string error = parse_error(text, &doc);
  TORCH_CHECK(error.empty(), "fsdp: ", source, " is corrupted (invalid JSON: ", error, ")");
  return doc;
}

const char* kind_name(const Value& value) {
  if (value.IsNull()) return "null";
  if (value.IsBool()) return "a boolean";
  if (value.IsInt64() || value.IsUint64()) return "an integer";
  if (value.IsNumber()) return "a number";
  if (value.IsString()) return "a string";
  if (value.IsArray()) return "an array";
  return "an object";
}

void require_object(const Value& value, const std::string& source) {
  TORCH_CHECK(value.IsObject(), "fsdp: ", source, " is not a JSON object (it is ", kind_name(value), ")");
}

bool has(const Value& object, const char* name) { return object.IsObject() && object.HasMember(name); }

const Value& field(const Value& object, const char* name, const std::string& source) {
  require_object(object, source);
  auto it = object.FindMember(name);
  TORCH_CHECK(it != object.MemberEnd(), "fsdp: ", source, ": field '", name, "' is missing");
  return it->value;
}

namespace {

std::string field_name(const char* name, const std::string& source) {
  return source + ": field '" + name + "'";
}

}  // namespace

std::string as_string(const Value& value, const std::string& what) {
  TORCH_CHECK(value.IsString(), "fsdp: ", what, " is not a string (it is ", kind_name(value), ")");
  return std::string(value.GetString(), value.GetStringLength());
}

int64_t as_int64(const Value& value, const std::string& what) {
  TORCH_CHECK(value.IsInt64(), "fsdp: ", what, " is not an integer (it is ",
              value.IsUint64() ? "an integer too large for int64" : kind_name(value), ")");
  return value.GetInt64();
}

namespace {

uint64_t as_uint64(const Value& value, const std::string& what) {
  TORCH_CHECK(value.IsUint64(), "fsdp: ", what, " is not an unsigned integer (it is ",
              value.IsInt64() ? "negative" : kind_name(value), ")");
  return value.GetUint64();
}

}  // namespace

const Value& array_field(const Value& object, const char* name, const std::string& source) {
  const Value& v = field(object, name, source);
  TORCH_CHECK(v.IsArray(), "fsdp: ", field_name(name, source), " is not an array (it is ", kind_name(v), ")");
  return v;
}

std::string string_field(const Value& object, const char* name, const std::string& source) {
  return as_string(field(object, name, source), field_name(name, source));
}

int64_t int64_field(const Value& object, const char* name, const std::string& source) {
  return as_int64(field(object, name, source), field_name(name, source));
}

int int_field(const Value& object, const char* name, const std::string& source) {
  const Value& v = field(object, name, source);
  TORCH_CHECK(v.IsInt(), "fsdp: ", field_name(name, source), " is not an int (it is ",
              v.IsInt64() || v.IsUint64() ? "an integer out of int range" : kind_name(v), ")");
  return v.GetInt();
}

uint64_t uint64_field(const Value& object, const char* name, const std::string& source) {
  return as_uint64(field(object, name, source), field_name(name, source));
}

bool bool_field(const Value& object, const char* name, const std::string& source) {
  const Value& v = field(object, name, source);
  TORCH_CHECK(v.IsBool(), "fsdp: ", field_name(name, source), " is not a boolean (it is ", kind_name(v), ")");
  return v.GetBool();
}

std::vector<int64_t> int64_array_field(const Value& object, const char* name, const std::string& source) {
  std::vector<int64_t> out;
  const Value& a = array_field(object, name, source);
  for (rapidjson::SizeType i = 0; i < a.Size(); ++i)
    out.push_back(as_int64(a[i], field_name(name, source) + "[" + std::to_string(i) + "]"));
  return out;
}

std::vector<uint64_t> uint64_array_field(const Value& object, const char* name, const std::string& source) {
  std::vector<uint64_t> out;
  const Value& a = array_field(object, name, source);
  for (rapidjson::SizeType i = 0; i < a.Size(); ++i)
    out.push_back(as_uint64(a[i], field_name(name, source) + "[" + std::to_string(i) + "]"));
  return out;
}

std::vector<std::string> string_array_field(const Value& object, const char* name, const std::string& source) {
  std::vector<std::string> out;
  const Value& a = array_field(object, name, source);
  for (rapidjson::SizeType i = 0; i < a.Size(); ++i)
    out.push_back(as_string(a[i], field_name(name, source) + "[" + std::to_string(i) + "]"));
  return out;
}

std::string to_text(const Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// One of the two RapidJSON writers, chosen at construction; both write into
// `buffer` and only the chosen one is used.
struct Writer::Impl {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> compact{buffer};
  rapidjson::PrettyWriter<rapidjson::StringBuffer> pretty{buffer};
  bool is_pretty = false;

  template <class F>
  void write(F&& f) {
    const bool ok = is_pretty ? f(pretty) : f(compact);
    TORCH_INTERNAL_ASSERT(ok, "fsdp: json::Writer used out of order");
  }
};

Writer::Writer(int indent) : impl_(std::make_unique<Impl>()) {
  impl_->is_pretty = indent > 0;
  if (indent > 0) impl_->pretty.SetIndent(' ', static_cast<unsigned>(indent));
}

Writer::~Writer() = default;

Writer& Writer::begin_object() {
  impl_->write([](auto& w) { return w.StartObject(); });
  return *this;
}
Writer& Writer::end_object() {
  impl_->write([](auto& w) { return w.EndObject(); });
  return *this;
}
Writer& Writer::begin_array() {
  impl_->write([](auto& w) { return w.StartArray(); });
  return *this;
}
Writer& Writer::end_array() {
  impl_->write([](auto& w) { return w.EndArray(); });
  return *this;
}
Writer& Writer::key(const std::string& name) {
  impl_->write([&](auto& w) { return w.Key(name.data(), static_cast<rapidjson::SizeType>(name.size())); });
  return *this;
}
Writer& Writer::value(const std::string& s) {
  impl_->write([&](auto& w) { return w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); });
  return *this;
}
Writer& Writer::value(const char* s) { return value(std::string(s)); }
Writer& Writer::value(int64_t v) {
  impl_->write([&](auto& w) { return w.Int64(v); });
  return *this;
}
Writer& Writer::value(uint64_t v) {
  impl_->write([&](auto& w) { return w.Uint64(v); });
  return *this;
}
Writer& Writer::value(double v) {
  TORCH_CHECK(std::isfinite(v), "fsdp: JSON cannot hold the number ", v);
  impl_->write([&](auto& w) { return w.Double(v); });
  return *this;
}
Writer& Writer::value(bool v) {
  impl_->write([&](auto& w) { return w.Bool(v); });
  return *this;
}
Writer& Writer::null() {
  impl_->write([](auto& w) { return w.Null(); });
  return *this;
}
Writer& Writer::raw(const std::string& json_text) {
  // Parsed first, so that a malformed text fails here and not in a reader.
  const Document doc = parse(json_text, "a JSON value to write");
  impl_->write([&](auto& w) {
    return w.RawValue(json_text.data(), json_text.size(), doc.GetType());
  });
  return *this;
}

std::string Writer::text() const { return std::string(impl_->buffer.GetString(), impl_->buffer.GetSize()); }

}  // namespace fsdp::json
