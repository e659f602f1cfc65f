#pragma once
// fsdp-plan's command line: the model, the setup, the machine, and what to
// print. docs/planner.md documents the same options for readers.

#include <optional>
#include <string>

#include "calibrate.h"
#include "model_spec.h"
#include "training_setup.h"

namespace fsdp_plan {

enum class Command { kPlan, kFit, kCalibrate, kValidate, kAnchors, kProfiles };

struct PlanCommandLine {
  Command command = Command::kPlan;
  GptSizes gpt;
  std::string model_file;  // "" = the GPT
  TrainingSetup setup;
  int64_t batch = 0;       // global; 0 = world size x micro-batch x grad-accum
  bool deferred_init = false;
  std::string profile = "h100-sxm";
  double headroom = 0.1;
  bool json = false;
  size_t top = 10;
  CalibrateOptions calibrate;
  bool validate_quick = false;
  int validate_rounds = 5;
  std::string validate_data;  // validate: the trainer's --data
};

struct ParsedCommandLine {
  std::optional<PlanCommandLine> options;
  int exit_code = 0;  // when options is empty: 0 after --help, 2 on bad usage
};

ParsedCommandLine parse_command_line(int argc, char** argv);

}  // namespace fsdp_plan
