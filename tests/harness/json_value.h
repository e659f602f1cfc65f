#pragma once
// JSON as the tests read it (metrics.jsonl, fsdp-plan --json): a read-only
// view over RapidJSON with the accessors the tests use. Missing keys and
// wrong kinds throw with the key and the JSON text, so a test fails with a
// message instead of reading past the end of an object.
//
// RapidJSON rather than nlohmann-json: torch wheels from 2.10 on carry
// their own compiled copy of nlohmann-json, and a test program that linked
// LibTorch and used another copy crashed (the GpuTrainer tests on torch
// 2.11). See [Note: no JSON symbols shared with LibTorch] in src/json/json_io.h.

#include <rapidjson/document.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace fsdp::testing {

class JsonValue {
 public:
  // Throws std::runtime_error naming `source` when `text` is not JSON.
  static JsonValue parse(const std::string& text, const std::string& source);

  bool contains(const char* key) const;
  JsonValue at(const char* key) const;  // throws when missing
  JsonValue operator[](const char* key) const { return at(key); }
  JsonValue operator[](size_t index) const;  // an array's element; throws when out of range
  JsonValue operator[](int index) const { return (*this)[static_cast<size_t>(index)]; }
  size_t size() const;  // elements of an array, members of an object
  std::vector<std::pair<std::string, JsonValue>> items() const;  // an object's members

  // double, int64_t, bool, std::string, std::vector<int64_t>, std::vector<double>.
  template <typename T>
  T get() const;

  std::string dump() const;  // compact JSON text
  bool operator==(const JsonValue& other) const { return *value_ == *other.value_; }

 private:
  JsonValue(std::shared_ptr<const rapidjson::Document> root, const rapidjson::Value* value)
      : root_(std::move(root)), value_(value) {}
  [[noreturn]] void fail(const std::string& what) const;

  std::shared_ptr<const rapidjson::Document> root_;  // keeps value_ alive
  const rapidjson::Value* value_;
};

template <>
double JsonValue::get<double>() const;
template <>
int64_t JsonValue::get<int64_t>() const;
template <>
bool JsonValue::get<bool>() const;
template <>
std::string JsonValue::get<std::string>() const;
template <>
std::vector<int64_t> JsonValue::get<std::vector<int64_t>>() const;
template <>
std::vector<double> JsonValue::get<std::vector<double>>() const;

bool operator==(const JsonValue& value, int64_t number);
inline std::ostream& operator<<(std::ostream& out, const JsonValue& value) {
  return out << value.dump();
}

}  // namespace fsdp::testing
