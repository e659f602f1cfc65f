#pragma once
// Reading and writing JSON inside libfsdp: a thin layer over RapidJSON that
// turns every malformed field into an error naming the file and the field.
// Private to src/; nothing of it appears in a public header.
//
// [Note: no JSON symbols shared with LibTorch]
// LibTorch 2.10+ includes the "JSON for Modern C++" header in its public
// headers, and its libraries carry their own compiled copy of that library
// (pytorch#181565); torch wheels also bundle fmt. Two copies of one
// header-only library in a process share the names of their inline and
// template functions, and the dynamic linker may bind ours to theirs (or
// theirs to ours) although the two were built from different versions: with
// the torch 2.11 wheel, every code path of libfsdp that used that JSON library
// (checkpoints, `fsdp-bench comm`) crashed. So the library uses RapidJSON, which LibTorch does not carry, and
// no fmt: no symbol of ours can then collide with one of LibTorch's. It also
// keeps the public headers free of any JSON library, so a user of the
// installed package needs nothing but LibTorch (extras travel as JSON text).

#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fsdp::json {

using Value = rapidjson::Value;
using Document = rapidjson::Document;

// Parses `text`. `source` names what is parsed in errors, e.g.
// "checkpoint index '/ckpt/index.json'": "fsdp: <source> is corrupted
// (invalid JSON: <reason> at byte N)".
Document parse(const std::string& text, const std::string& source);
// The same without throwing: "" if `text` is valid JSON, else why not.
std::string parse_error(const std::string& text, Document* doc);

// Readers of one field of an object. Each throws c10::Error
// "fsdp: <source>: field '<name>' is missing" or "... is not <kind> (it is
// <actual kind>)". `object` must be an object (check with require_object).
void require_object(const Value& value, const std::string& source);
bool has(const Value& object, const char* name);
const Value& field(const Value& object, const char* name, const std::string& source);
const Value& array_field(const Value& object, const char* name, const std::string& source);
std::string string_field(const Value& object, const char* name, const std::string& source);
int64_t int64_field(const Value& object, const char* name, const std::string& source);
int int_field(const Value& object, const char* name, const std::string& source);
uint64_t uint64_field(const Value& object, const char* name, const std::string& source);
bool bool_field(const Value& object, const char* name, const std::string& source);
std::vector<int64_t> int64_array_field(const Value& object, const char* name, const std::string& source);
std::vector<uint64_t> uint64_array_field(const Value& object, const char* name, const std::string& source);
std::vector<std::string> string_array_field(const Value& object, const char* name, const std::string& source);

// The same checks for a value that is not a field ("what" names it).
std::string as_string(const Value& value, const std::string& what);
int64_t as_int64(const Value& value, const std::string& what);

// "an integer", "a string", "an object", ... for error messages.
const char* kind_name(const Value& value);

// `value` as compact JSON text.
std::string to_text(const Value& value);

// Builds JSON text in order:
//   Writer w; w.begin_object().key("step").value(int64_t{3}).end_object();
//   std::string text = w.text();
class Writer {
 public:
  // `indent` > 0: one member or element per line, indented by that many
  // spaces per level (for files people read, such as index.json).
  explicit Writer(int indent = 0);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  Writer& begin_object();
  Writer& end_object();
  Writer& begin_array();
  Writer& end_array();
  Writer& key(const std::string& name);
  Writer& value(const std::string& s);
  Writer& value(const char* s);
  Writer& value(int64_t v);
  Writer& value(int v) { return value(static_cast<int64_t>(v)); }
  Writer& value(uint64_t v);
  Writer& value(double v);
  Writer& value(bool v);
  Writer& null();
  // Inserts `json_text`, which must be one valid JSON value, as it is.
  Writer& raw(const std::string& json_text);
  template <class T>
  Writer& array(const std::vector<T>& values) {
    begin_array();
    for (const auto& v : values) value(v);
    return end_array();
  }
  template <class T>
  Writer& member(const std::string& name, const T& v) {
    key(name);
    return value(v);
  }

  // The text written so far; complete once every begin_ has its end_.
  std::string text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::json
