#pragma once
// Integer options that do not fit are an error, not a silent saturation.
//
// CLI11 2.1 (Debian 12) converts "99999999999999999999" for an int64_t
// option with strtoll and never looks at ERANGE: --steps became INT64_MAX.
// This validator runs on the option's text before CLI11 converts it and
// refuses a whole number outside the option's type, naming the bound.

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

namespace fsdp::tools {

// For an option whose CLI11 type name is "INT" (signed) or "UINT".
inline CLI::Validator fits_in_64_bits(bool is_unsigned) {
  return CLI::Validator(
      [is_unsigned](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        if (is_unsigned) {
          std::strtoull(text.c_str(), &end, 10);
        } else {
          std::strtoll(text.c_str(), &end, 10);
        }
        if (errno != ERANGE) return "";  // other mistakes are CLI11's to report
        return "'" + text + "' does not fit in a 64-bit integer (the largest is " +
               (is_unsigned ? std::to_string(std::numeric_limits<uint64_t>::max())
                            : std::to_string(std::numeric_limits<int64_t>::max())) +
               ")";
      },
      "", "fits_in_64_bits");
}

// Adds fits_in_64_bits to `option` if it takes an integer.
inline CLI::Option* check_integer_range(CLI::Option* option) {
  const std::string type = option->get_type_name();
  if (type == "INT") return option->check(fits_in_64_bits(false));
  if (type == "UINT") return option->check(fits_in_64_bits(true));
  return option;
}

}  // namespace fsdp::tools
