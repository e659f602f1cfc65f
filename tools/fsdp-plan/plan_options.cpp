#include "plan_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli_help_format.h"

namespace fsdp_plan {
namespace {

constexpr const char* kDescription =
    "fsdp-plan: will it fit, and how fast will it go? Per-rank memory and step time of\n"
    "FSDP training, before you spend a cluster. The model is fsdp-train's GPT by its\n"
    "sizes (the same flags), or any model as a JSON list of units (--model); the\n"
    "machine is a profile: shipped ones (fsdp-plan profiles) or one measured here\n"
    "(fsdp-plan calibrate). docs/planner.md has every formula and what it leaves out.";

constexpr const char* kFooter = R"(MODEL FILE (--model)
  {"name": "my-model", "tokens_per_sample": 2048,
   "units": [{"name": "embed", "root": true, "params": [[50304, 1024]]},
             {"name": "layer", "repeat": 24, "params": [[1024, 4096], [4096]],
              "activation_bytes_per_token": 34816, "flops_per_token": 8388608}]}
  Shapes per parameter; the root unit is gathered for the whole step; activation
  bytes are per token at fp32; flops_per_token is forward (default 2 x params).

EXAMPLES
  fsdp-plan --layers 24 --width 1024 --heads 16 --context 1024 --world-size 8
  fsdp-plan --model m.json --nnodes 4 --nproc-per-node 8 --fit     # what fits, fastest first
  fsdp-plan calibrate --output here.json && fsdp-plan --profile here.json --world-size 2
  fsdp-plan validate          # the plan against fsdp-train runs on this machine
  fsdp-plan anchors           # ZeRO's 16 bytes/param and DeepSpeed's estimator
)";

constexpr int kBadUsage = 2;

void add_model_options(CLI::App& app, PlanCommandLine& o) {
  auto* g = app.add_option_group("Model", "fsdp-train's GPT, or --model FILE");
  g->add_option("--layers", o.gpt.layers, "transformer blocks (one unit each)")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--width", o.gpt.width, "model width (d_model)")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--heads", o.gpt.heads, "attention heads")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--context", o.gpt.context, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--vocab", o.gpt.vocab, "vocabulary (fsdp-train's GPT reads bytes: 256)")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--model", o.model_file, "a JSON model description instead of the GPT (format below)");
}

void add_setup_options(CLI::App& app, PlanCommandLine& o, std::string& strategy,
                       std::string& precision, std::string& checkpointing, std::string& optimizer) {
  auto* g = app.add_option_group("Training setup", "the same names as fsdp-train's flags");
  auto* world = g->add_option("--world-size", o.setup.nproc_per_node, "ranks on one node (or use the next two)");
  g->add_option("--nnodes", o.setup.nnodes, "nodes")->capture_default_str()->excludes(world);
  g->add_option("--nproc-per-node", o.setup.nproc_per_node, "ranks per node")->excludes(world);
  g->add_option("--strategy", strategy, "full | grad-op | none | hybrid | hybrid-zero2")->capture_default_str();
  g->add_option("--mixed-precision", precision, "fp32 | bf16 (bf16 compute and all-gather, fp32 master and reduction)")->capture_default_str();
  g->add_flag("--offload", o.setup.offload, "sharded parameters, gradients and optimizer state on the host");
  g->add_option("--reshard-after-forward", o.setup.reshard_after_forward, "free gathered parameters after forward (full, hybrid)")->capture_default_str();
  g->add_option("--reshard-group", o.setup.reshard_group, "k: after forward keep a 1/k chunk, gather in backward from k ranks (0: off)")->capture_default_str();
  g->add_option("--activation-checkpointing", checkpointing, "none | all | every-N")->capture_default_str();
  g->add_option("--batch", o.batch, "global batch in sequences (default: world size x micro-batch x grad-accum)");
  g->add_option("--micro-batch", o.setup.micro_batch, "sequences per rank per forward/backward")->capture_default_str();
  g->add_option("--grad-accum", o.setup.grad_accum, "micro-batches per optimizer step")->capture_default_str();
  g->add_option("--seq-len", o.setup.seq_len, "tokens per sequence (default: --context, or the model file's)");
  g->add_option("--optimizer", optimizer, "adamw | sgd-momentum | sgd")->capture_default_str();
  g->add_flag("--no-prefetch", [&o](int64_t) { o.setup.prefetch = false; }, "no all-gather ahead of use");
  g->add_option("--max-inflight-all-gathers", o.setup.max_inflight_all_gathers, "prefetched units at once")->capture_default_str();
  g->add_flag("--deferred-init", o.deferred_init, "the model is built deferred (fsdp::defer_init): no rank holds it whole");
}

// --batch sets micro-batch x grad-accum per rank; "" or the problem.
std::string apply_batch(PlanCommandLine& o) {
  if (o.batch == 0) return "";
  const int64_t world = o.setup.world_size();
  if (o.batch % world != 0) {
    return fmt::format("--batch {} is not a multiple of the world size {}; pass e.g. --batch {}",
                       o.batch, world, (o.batch / world + 1) * world);
  }
  const int64_t per_rank = o.batch / world;
  if (per_rank % o.setup.micro_batch != 0) {
    return fmt::format("--batch {} gives {} sequences per rank, not a multiple of --micro-batch {}",
                       o.batch, per_rank, o.setup.micro_batch);
  }
  o.setup.grad_accum = per_rank / o.setup.micro_batch;
  return "";
}

}  // namespace

ParsedCommandLine parse_command_line(int argc, char** argv) {
  PlanCommandLine o;
  std::string strategy = "full", precision = "fp32", checkpointing = "none", optimizer = "adamw";
  CLI::App app(kDescription, "fsdp-plan");
  app.formatter(std::make_shared<fsdp::tools::HelpFormatter>());
  app.footer(kFooter);
  add_model_options(app, o);
  add_setup_options(app, o, strategy, precision, checkpointing, optimizer);
  auto* out = app.add_option_group("Machine and output");
  out->add_option("--profile", o.profile, "a shipped profile (fsdp-plan profiles) or a JSON file from calibrate")->capture_default_str();
  out->add_option("--headroom", o.headroom, "fraction of each rank's memory kept free")->capture_default_str()->check(CLI::Range(0.0, 0.9));
  out->add_flag("--fit", [&o](int64_t) { o.command = Command::kFit; }, "list every setting that fits, fastest first");
  out->add_option("--top", o.top, "--fit: how many to list")->capture_default_str();
  out->add_flag("--json", o.json, "print JSON instead of tables");

  auto* cal = app.add_subcommand("calibrate", "measure this machine (matmul, memory, links) and write a profile");
  cal->add_option("--output", o.calibrate.output, "the profile to write")->required();
  cal->add_option("--repeats", o.calibrate.repeats, "measurement passes; each timing figure is their median (this machine's speed drifts)")->capture_default_str()->check(CLI::Range(1, 100));
  cal->add_option("--nproc-per-node", o.calibrate.nproc_per_node, "ranks to measure with (each gets cores / ranks threads; the link needs at least 2)")->capture_default_str()->check(CLI::Range(1, 1024));
  auto* val = app.add_subcommand("validate", "plan against measured fsdp-train runs on this machine, in rounds, each calibrating and then running every case; about 2.5 minutes a round on 2 cores (docs/planner.md)");
  val->add_flag("--quick", o.validate_quick, "a few small cases, one round only");
  val->add_option("--rounds", o.validate_rounds, "rounds; each case's row is its median round (this machine's speed drifts)")->capture_default_str()->check(CLI::Range(1, 25));
  val->add_option("--data", o.validate_data, "the text file each case trains on (default: fsdp-train's, Debian's fortunes)")->check(CLI::ExistingFile);
  val->fallthrough();  // --profile FILE: a calibrated profile instead of calibrating now
  app.add_subcommand("anchors", "the published figures the planner reproduces");
  app.add_subcommand("profiles", "the shipped hardware profiles and their sources");
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, app.exit(e) == 0 ? 0 : kBadUsage};
  }
  if (*cal) o.command = Command::kCalibrate;
  if (*val) o.command = Command::kValidate;
  if (app.got_subcommand("anchors")) o.command = Command::kAnchors;
  if (app.got_subcommand("profiles")) o.command = Command::kProfiles;
  try {
    o.setup.strategy = parse_strategy(strategy);
    o.setup.optimizer = parse_optimizer(optimizer);
    o.setup.checkpoint_every = parse_checkpointing(checkpointing);
    if (precision != "fp32" && precision != "bf16") {
      throw std::runtime_error(fmt::format("--mixed-precision '{}' is not fp32 or bf16", precision));
    }
    o.setup.bf16 = precision == "bf16";
  } catch (const std::exception& e) {
    fmt::print(stderr, "fsdp-plan: {}\n", e.what());
    return {std::nullopt, kBadUsage};
  }
  std::string problem = setup_problem(o.setup);
  if (problem.empty()) problem = apply_batch(o);
  if (problem.empty() && o.gpt.width % o.gpt.heads != 0) {
    problem = fmt::format("--heads {} does not divide --width {}", o.gpt.heads, o.gpt.width);
  }
  if (!problem.empty()) {
    fmt::print(stderr, "fsdp-plan: {}\n", problem);
    return {std::nullopt, kBadUsage};
  }
  return {o, 0};
}

}  // namespace fsdp_plan
