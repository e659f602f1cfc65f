#pragma once
// The help format the tools document, whatever CLI11 version builds them.
//
// CLI11 2.1 (Debian 12) writes an option's default as "--lr FLOAT=0.003";
// 2.4 (Debian 13) writes "--lr FLOAT [0.003] ". The README, the docs and the
// --help tests show the first form, so the tools pin it here.

#include <CLI/CLI.hpp>

#include <sstream>
#include <string>

namespace fsdp::tools {

class HelpFormatter : public CLI::Formatter {
 public:
  // "TYPE=default", then what CLI11 2.1 and 2.4 both append.
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    std::ostringstream out;
    if (opt->get_type_size() != 0) {
      if (!opt->get_type_name().empty()) out << " " << get_label(opt->get_type_name());
      if (!opt->get_default_str().empty()) out << "=" << opt->get_default_str();
      if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) {
        out << " ...";
      } else if (opt->get_expected_min() > 1) {
        out << " x " << opt->get_expected();
      }
      if (opt->get_required()) out << " " << get_label("REQUIRED");
    }
    if (!opt->get_envname().empty()) {
      out << " (" << get_label("Env") << ":" << opt->get_envname() << ")";
    }
    if (!opt->get_needs().empty()) {
      out << " " << get_label("Needs") << ":";
      for (const CLI::Option* needed : opt->get_needs()) out << " " << needed->get_name();
    }
    if (!opt->get_excludes().empty()) {
      out << " " << get_label("Excludes") << ":";
      for (const CLI::Option* excluded : opt->get_excludes()) out << " " << excluded->get_name();
    }
    return out.str();
  }
};

}  // namespace fsdp::tools
