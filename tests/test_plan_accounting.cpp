// fsdp-plan against what libfsdp and the GPT really allocate, counted at
// LibTorch's CPU allocator (fsdp::CpuAllocationCounter), so the comparison is
// deterministic:
//  - the bytes a GPT forward keeps for backward equal the planner's
//    activation formula ([Note: the GPT's activations, counted]);
//  - `fsdp-plan validate --quick` runs fsdp-train under fsdp-run at 1 and 2
//    ranks with the three strategies and finds every rank's peak within 5%
//    of the plan (it exits non-zero otherwise); step times are printed, not
//    asserted;
//  - the command line: --help, --json, --fit and bad input.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include "harness/json_value.h"

#include "fsdp/cpu_allocation_counter.h"
#include "fsdp/models/gpt.h"
#include "harness/child_process.h"
#include "model_spec.h"

namespace fsdp::testing {
namespace {

constexpr auto kPlanTimeout = std::chrono::seconds(60);

ChildResult run_plan(const TempDir& dir, const std::vector<std::string>& args,
                     std::chrono::seconds limit = kPlanTimeout) {
  ChildProcess plan(dir, FSDP_BIN_DIR "/fsdp-plan", args);
  return plan.wait(limit);
}

struct Sizes {
  int64_t layers, width, heads, context, batch;
};

class GptActivations : public ::testing::TestWithParam<Sizes> {};

TEST_P(GptActivations, KeptBytesAreThePlannersFormula) {
  const Sizes z = GetParam();
  auto& counter = CpuAllocationCounter::install();
  models::GPTConfig config;
  config.vocab_size = 256;
  config.context = z.context;
  config.d_model = z.width;
  config.n_head = z.heads;
  config.n_layer = z.layers;
  config.shard_blocks = false;
  models::GPT gpt(config);
  at::Tensor tokens = at::randint(0, 256, {z.batch, z.context});
  const int64_t before = counter.current_bytes();
  at::Tensor logits = gpt->forward(tokens);
  at::Tensor loss = models::lm_loss(logits, tokens);
  const int64_t kept = counter.current_bytes() - before;

  const fsdp_plan::ModelSpec spec =
      fsdp_plan::gpt_model_spec({z.layers, z.width, z.heads, z.context, 256});
  // Every unit's activations, and the loss's fp32 logits and log_softmax.
  double planned = 8.0 * static_cast<double>(spec.logits_per_token);
  for (const auto& unit : spec.units) planned += unit.activation_bytes_per_token;
  planned *= static_cast<double>(z.batch * z.context);
  EXPECT_NEAR(static_cast<double>(kept), planned, 0.005 * planned)
      << "kept " << kept << " bytes, planned " << planned;
  loss.backward();
}

INSTANTIATE_TEST_SUITE_P(Sizes, GptActivations,
                         ::testing::Values(Sizes{2, 64, 2, 32, 4}, Sizes{3, 96, 4, 64, 2},
                                           Sizes{1, 128, 8, 16, 8}),
                         [](const ::testing::TestParamInfo<Sizes>& info) {
                           const Sizes& z = info.param;
                           return "L" + std::to_string(z.layers) + "W" + std::to_string(z.width) + "H" +
                                  std::to_string(z.heads) + "T" + std::to_string(z.context) + "B" +
                                  std::to_string(z.batch);
                         });

TEST(PlanValidation, AccountedPeaksWithinFivePercentOfThePlan) {
  TempDir dir("plan-validate");
  const ChildResult r = run_plan(
      dir, {"validate", "--quick", "--data", FSDP_SOURCE_DIR "/tests/data/corpus.txt"},
      std::chrono::seconds(600));
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out, "worst planned/measured: tensor bytes")) << r.describe();
  EXPECT_TRUE(contains(r.out, "L2 W64 x2 none")) << r.describe();
}

TEST(PlanCommandLine, HelpAnswersTheQuestions) {
  TempDir dir("plan-cli");
  const ChildResult r = run_plan(dir, {"--help"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  for (const char* needle : {"--fit", "--json", "--profile", "calibrate", "validate", "--model",
                             "MODEL FILE", "EXAMPLES", "--reshard-group", "--activation-checkpointing"}) {
    EXPECT_TRUE(contains(r.out, needle)) << needle << "\n" << r.out;
  }
}

TEST(PlanCommandLine, JsonAgreesWithTheTableAndFitLists) {
  TempDir dir("plan-cli");
  const std::vector<std::string> model = {"--layers", "24", "--width", "2048", "--heads", "16",
                                          "--context", "2048", "--world-size", "8", "--micro-batch", "2"};
  std::vector<std::string> args = model;
  args.push_back("--json");
  const ChildResult r = run_plan(dir, args);
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto j = fsdp::testing::JsonValue::parse(r.out, "fsdp-plan --json");
  const auto m = j.at("memory");
  const double sum = m.at("sharded_params").get<double>() + m.at("sharded_grads").get<double>() +
                     m.at("optimizer_state").get<double>() + m.at("comm_buffers").get<double>() +
                     m.at("gathered_params").get<double>() +
                     m.at("reduce_buffers").get<double>() + m.at("unsharded_grads").get<double>() +
                     m.at("activations").get<double>() + m.at("head_transient").get<double>();
  EXPECT_DOUBLE_EQ(m.at("device_peak").get<double>(), sum);
  EXPECT_TRUE(m.at("fits").get<bool>());
  EXPECT_GT(j.at("time").at("mfu").get<double>(), 0);
  EXPECT_LT(j.at("time").at("mfu").get<double>(), 1);

  args = model;
  args.push_back("--fit");
  const ChildResult fit = run_plan(dir, args);
  ASSERT_TRUE(fit.exited_with(0)) << fit.describe();
  EXPECT_TRUE(contains(fit.out, "tokens/s")) << fit.out;
  EXPECT_TRUE(contains(fit.out, "full")) << fit.out;
}

TEST(PlanCommandLine, BadInputNamesTheValue) {
  TempDir dir("plan-cli");
  ChildResult r = run_plan(dir, {"--strategy", "zero3"});
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_TRUE(contains(r.err, "'zero3'")) << r.describe();
  r = run_plan(dir, {"--profile", "b200"});
  EXPECT_TRUE(r.exited_with(1)) << r.describe();
  EXPECT_TRUE(contains(r.err, "calibrate")) << r.describe();
  r = run_plan(dir, {"--world-size", "3", "--batch", "8"});
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_TRUE(contains(r.err, "--batch 8")) << r.describe();
  r = run_plan(dir, {"--strategy", "hybrid", "--world-size", "4"});
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_TRUE(contains(r.err, "--nnodes")) << r.describe();
}

}  // namespace
}  // namespace fsdp::testing
