#include "harness/json_value.h"

#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <stdexcept>

namespace fsdp::testing {

JsonValue JsonValue::parse(const std::string& text, const std::string& source) {
  auto doc = std::make_shared<rapidjson::Document>();
  doc->Parse<rapidjson::kParseFullPrecisionFlag>(text.c_str());
  if (doc->HasParseError()) {
    throw std::runtime_error(source + " is not valid JSON (" +
                             rapidjson::GetParseError_En(doc->GetParseError()) + " at byte " +
                             std::to_string(doc->GetErrorOffset()) + "): " + text);
  }
  const rapidjson::Value* root = doc.get();
  return JsonValue(std::move(doc), root);
}

void JsonValue::fail(const std::string& what) const {
  throw std::runtime_error("JSON: " + what + " in " + dump());
}

bool JsonValue::contains(const char* key) const {
  return value_->IsObject() && value_->HasMember(key);
}

JsonValue JsonValue::at(const char* key) const {
  if (!contains(key)) fail(std::string("no key '") + key + "'");
  return JsonValue(root_, &(*value_)[key]);
}

JsonValue JsonValue::operator[](size_t index) const {
  if (!value_->IsArray() || index >= value_->Size()) {
    fail("no element " + std::to_string(index));
  }
  return JsonValue(root_, &(*value_)[static_cast<rapidjson::SizeType>(index)]);
}

size_t JsonValue::size() const {
  if (value_->IsArray()) return value_->Size();
  if (value_->IsObject()) return value_->MemberCount();
  fail("size() of a value that is neither an array nor an object");
}

std::vector<std::pair<std::string, JsonValue>> JsonValue::items() const {
  if (!value_->IsObject()) fail("items() of a value that is not an object");
  std::vector<std::pair<std::string, JsonValue>> out;
  for (const auto& m : value_->GetObject()) {
    out.emplace_back(m.name.GetString(), JsonValue(root_, &m.value));
  }
  return out;
}

template <>
double JsonValue::get<double>() const {
  if (!value_->IsNumber()) fail("not a number");
  return value_->GetDouble();
}

template <>
int64_t JsonValue::get<int64_t>() const {
  if (!value_->IsInt64()) fail("not an integer");
  return value_->GetInt64();
}

template <>
bool JsonValue::get<bool>() const {
  if (!value_->IsBool()) fail("not a boolean");
  return value_->GetBool();
}

template <>
std::string JsonValue::get<std::string>() const {
  if (!value_->IsString()) fail("not a string");
  return value_->GetString();
}

template <>
std::vector<int64_t> JsonValue::get<std::vector<int64_t>>() const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < size(); ++i) out.push_back((*this)[i].get<int64_t>());
  return out;
}

template <>
std::vector<double> JsonValue::get<std::vector<double>>() const {
  std::vector<double> out;
  for (size_t i = 0; i < size(); ++i) out.push_back((*this)[i].get<double>());
  return out;
}

std::string JsonValue::dump() const {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value_->Accept(writer);
  return buffer.GetString();
}

bool operator==(const JsonValue& value, int64_t number) {
  return value.dump() == std::to_string(number);
}

}  // namespace fsdp::testing
