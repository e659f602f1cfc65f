// fsdp-plan: per-rank memory and step time of FSDP training, before running
// it. See plan_options.cpp for the command line and docs/planner.md for the
// model.

#include <fmt/format.h>

#include <climits>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "calibrate.h"
#include "fit_search.h"
#include "hardware_profile.h"
#include "plan_options.h"
#include "plan_report.h"
#include "published_anchors.h"
#include "validate.h"

namespace {

using namespace fsdp_plan;

constexpr int kFailed = 1;

std::string self_path(const char* argv0) {
  char buf[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string(argv0);
}

int print_profiles() {
  for (const auto& p : shipped_profiles()) {
    fmt::print("{}\n  source: {}\n{}\n\n", p.name, p.source, profile_to_json(p));
  }
  return 0;
}

int plan_or_fit(const PlanCommandLine& o) {
  const ModelSpec model = o.model_file.empty() ? gpt_model_spec(o.gpt) : model_spec_from_json(o.model_file);
  const HardwareProfile profile = load_profile(o.profile);
  const PlanOptions options{o.deferred_init};
  if (o.command == Command::kFit) {
    const auto fits = search_fits(model, o.setup, profile, options, o.headroom);
    if (o.json) {
      std::cout << fits_json(fits, o.top) << '\n';
    } else {
      fmt::print("fsdp-plan --fit: {} ({:.3g} parameters) on {} x {} {} rank(s), {} samples per "
                 "rank per step\n\n",
                 model.name, static_cast<double>(model.numel()), o.setup.nnodes,
                 o.setup.nproc_per_node, profile.name, o.setup.micro_batch * o.setup.grad_accum);
      fmt::print("{}", format_fits(fits, o.top, profile));
    }
    return fits.empty() ? kFailed : 0;
  }
  Plan plan;
  plan.model = &model;
  plan.setup = o.setup;
  plan.profile = &profile;
  plan.memory = plan_memory(model, o.setup, options);
  plan.time = plan_time(model, o.setup, profile);
  plan.headroom = o.headroom;
  plan.fits = fits_in(plan.memory, o.setup, profile, o.headroom);
  if (o.json) {
    std::cout << plan_json(plan) << '\n';
  } else {
    fmt::print("{}", format_plan(plan));
  }
  return 0;
}

int validate(const PlanCommandLine& o, const std::string& self) {
  ValidateOptions v;
  v.quick = o.validate_quick;
  v.rounds = o.validate_rounds;
  v.data = o.validate_data;
  v.profile = o.profile == "h100-sxm" ? "" : o.profile;  // the default is not this machine
  v.bin_dir = std::filesystem::path(self).parent_path().string();
  return report_validation(validate_cases(v));
}

}  // namespace

int main(int argc, char** argv) {
  ParsedCommandLine parsed = parse_command_line(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  const PlanCommandLine& o = *parsed.options;
  try {
    switch (o.command) {
      case Command::kCalibrate: return calibrate(o.calibrate, self_path(argv[0]));
      case Command::kValidate: return validate(o, self_path(argv[0]));
      case Command::kAnchors: fmt::print("{}", format_anchors()); return 0;
      case Command::kProfiles: return print_profiles();
      default: return plan_or_fit(o);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "fsdp-plan: {}\n", e.what());
    return kFailed;
  }
}
