#include "json_text.h"

#include <fmt/format.h>
#include <rapidjson/error/en.h>

#include <stdexcept>

namespace fsdp_plan {

rapidjson::Document parse_json(const std::string& text, const std::string& source) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseFullPrecisionFlag>(text.data(), text.size());
  if (doc.HasParseError()) {
    throw std::runtime_error(fmt::format("{} is not valid JSON ({} at byte {})", source,
                                         rapidjson::GetParseError_En(doc.GetParseError()),
                                         doc.GetErrorOffset()));
  }
  return doc;
}

double number_or(const rapidjson::Value& object, const char* name, double fallback,
                 const std::string& source) {
  const auto it = object.FindMember(name);
  if (it == object.MemberEnd()) return fallback;
  if (!it->value.IsNumber()) {
    throw std::runtime_error(fmt::format("{}: \"{}\" must be a number", source, name));
  }
  return it->value.GetDouble();
}

double number_at(const rapidjson::Value& object, const char* name, const std::string& source) {
  if (!object.HasMember(name)) {
    throw std::runtime_error(fmt::format("{}: \"{}\" is missing", source, name));
  }
  return number_or(object, name, 0, source);
}

std::string string_or(const rapidjson::Value& object, const char* name, const std::string& fallback,
                      const std::string& source) {
  const auto it = object.FindMember(name);
  if (it == object.MemberEnd()) return fallback;
  if (!it->value.IsString()) {
    throw std::runtime_error(fmt::format("{}: \"{}\" must be a string", source, name));
  }
  return it->value.GetString();
}

void write_number(JsonWriter& w, const char* name, double value) {
  w.Key(name);
  w.Double(value);
}

void write_string(JsonWriter& w, const char* name, const std::string& value) {
  w.Key(name);
  w.String(value.c_str(), static_cast<rapidjson::SizeType>(value.size()));
}

}  // namespace fsdp_plan
