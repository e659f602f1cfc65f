#pragma once
// fsdp-plan's JSON, on RapidJSON: LibTorch 2.10+ carries its own compiled
// copy of nlohmann-json, and a program that links LibTorch and uses another
// copy can have one bound to the other (see [Note: no JSON symbols shared
// with LibTorch] in src/json/json_io.h). fsdp-plan links LibTorch for
// calibrate, so it keeps to the library's choice.

#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <string>

namespace fsdp_plan {

using JsonWriter = rapidjson::PrettyWriter<rapidjson::StringBuffer>;

// Parses `text`; throws std::runtime_error "<source> is not valid JSON (...)".
rapidjson::Document parse_json(const std::string& text, const std::string& source);

// A number member, or `fallback` when it is absent; throws when it is not a number.
double number_or(const rapidjson::Value& object, const char* name, double fallback,
                 const std::string& source);
// A number member that must be present.
double number_at(const rapidjson::Value& object, const char* name, const std::string& source);
std::string string_or(const rapidjson::Value& object, const char* name, const std::string& fallback,
                      const std::string& source);

// Writes "name": number / string.
void write_number(JsonWriter& w, const char* name, double value);
void write_string(JsonWriter& w, const char* name, const std::string& value);

}  // namespace fsdp_plan
