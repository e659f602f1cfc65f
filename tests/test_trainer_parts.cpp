// fsdp-train's pure parts, compiled in from tools/fsdp-train/: the batch
// sampler, the learning-rate schedule, the option checks, the model presets,
// the device checks, the metrics lines (restart markers too), the
// summary's hook times and the host memory --async-save reserves.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "async_copy_bytes.h"
#include "corpus.h"
#include "fsdp/checkpoint/async_save.h"
#include "fsdp/checkpoint/training_state.h"
#include "fsdp/fully_shard.h"
#include "fsdp/models/gpt.h"
#include "harness/models.h"
#include "harness/rank_harness.h"
#include "harness/temp_dir.h"
#include "lr_schedule.h"
#include "memory_check.h"
#include "metrics_log.h"
#include "model_presets.h"
#include "report.h"
#include "train_options.h"
#include "training_device.h"

#if defined(FSDP_WITH_NCCL)
#include <torch/cuda.h>
#endif

namespace {

fsdp_train::ByteCorpus small_corpus() {
  fsdp_train::ByteCorpus corpus;
  for (int i = 0; i < 900; ++i) corpus.train.push_back(static_cast<uint8_t>('a' + i % 26));
  for (int i = 0; i < 100; ++i) corpus.val.push_back(static_cast<uint8_t>('A' + i % 26));
  return corpus;
}

TEST(TrainerSampler, RankSlicesAndMicroBatchesRebuildTheGlobalBatch) {
  const auto corpus = small_corpus();
  fsdp_train::BatchSampler sampler(corpus, 16, 7);
  const auto whole = sampler.rows(fsdp_train::Split::kTrain, 5, 0, 8);
  // 2 ranks x 2 micro-batches of 2 rows each, concatenated in rank order.
  std::vector<at::Tensor> parts;
  for (int rank = 0; rank < 2; ++rank) {
    for (int m = 0; m < 2; ++m) parts.push_back(sampler.rows(fsdp_train::Split::kTrain, 5, rank * 4 + m * 2, 2).inputs);
  }
  EXPECT_TRUE(at::equal(at::cat(parts), whole.inputs));
  EXPECT_TRUE(at::equal(whole.inputs.narrow(1, 1, 15), whole.targets.narrow(1, 0, 15)));
  EXPECT_EQ(whole.inputs.sizes(), (std::vector<int64_t>{8, 16}));
}

TEST(TrainerSampler, DependsOnSeedStepAndSplitOnly) {
  const auto corpus = small_corpus();
  fsdp_train::BatchSampler a(corpus, 16, 7), b(corpus, 16, 7), other_seed(corpus, 16, 8);
  EXPECT_TRUE(at::equal(a.rows(fsdp_train::Split::kTrain, 3, 0, 8).inputs,
                        b.rows(fsdp_train::Split::kTrain, 3, 0, 8).inputs));
  EXPECT_FALSE(at::equal(a.rows(fsdp_train::Split::kTrain, 3, 0, 8).inputs,
                         a.rows(fsdp_train::Split::kTrain, 4, 0, 8).inputs));
  EXPECT_FALSE(at::equal(a.rows(fsdp_train::Split::kTrain, 3, 0, 8).inputs,
                         other_seed.rows(fsdp_train::Split::kTrain, 3, 0, 8).inputs));
  // Validation windows come from the validation bytes (upper case here).
  const auto val = a.rows(fsdp_train::Split::kVal, 0, 0, 8);
  EXPECT_TRUE((val.inputs >= 'A').all().item<bool>() && (val.inputs <= 'Z').all().item<bool>());
  // Every window stays inside its split.
  for (int64_t row = 0; row < 1000; ++row) {
    const int64_t start = a.window_start(fsdp_train::Split::kVal, 1, row);
    EXPECT_GE(start, 0);
    EXPECT_LE(start + 16, 99);
  }
}

TEST(TrainerSchedule, WarmsUpThenDecaysToMinLr) {
  const fsdp_train::LrSchedule s{1e-2, 1e-3, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(1), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-2);
  EXPECT_NEAR(s.at(60), (1e-2 + 1e-3) / 2, 1e-12);  // half-way down the cosine
  EXPECT_DOUBLE_EQ(s.at(110), 1e-3);
  for (int64_t step = 11; step < 110; ++step) EXPECT_LT(s.at(step + 1), s.at(step));
}

TEST(TrainerOptions, BatchSplitFollowsWorldSizeMicroBatchAndAccumulation) {
  fsdp_train::TrainOptions o;
  o.batch = 32;
  fsdp_train::BatchLayout layout;
  ASSERT_TRUE(fsdp_train::check_options(o, 2, &layout).empty());
  EXPECT_EQ(layout.per_rank, 16);
  EXPECT_EQ(layout.micro_batch, 16);
  EXPECT_EQ(layout.grad_accum, 1);
  o.micro_batch = 4;
  ASSERT_TRUE(fsdp_train::check_options(o, 2, &layout).empty());
  EXPECT_EQ(layout.grad_accum, 4);
  o.micro_batch = 0;
  o.grad_accum = 8;
  ASSERT_TRUE(fsdp_train::check_options(o, 4, &layout).empty());
  EXPECT_EQ(layout.micro_batch, 1);
  o.grad_accum = 3;
  const auto errors = fsdp_train::check_options(o, 2, &layout);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("--grad-accum 3 does not divide the per-rank batch 16"), std::string::npos)
      << errors[0];
}

fsdp_train::TrainOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "fsdp-train");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  fsdp_train::ParseResult parsed =
      fsdp_train::parse_train_options(static_cast<int>(argv.size()), argv.data());
  EXPECT_TRUE(parsed.options.has_value());
  return parsed.options.value_or(fsdp_train::TrainOptions{});
}

int64_t parameters_of(const fsdp_train::TrainOptions& o) {
  fsdp::models::GPTConfig config;
  config.n_layer = o.layers;
  config.d_model = o.width;
  config.n_head = o.heads;
  config.context = o.context;
  return config.num_params();
}

// The presets have the sizes their names promise; a flag given as well wins
// and is checked against a resumed checkpoint like any given size.
TEST(TrainerPresets, SizesFillWhatTheCommandLineLeftOut) {
  const auto small = parse({"--preset", "gpt2-small-bytes"});
  EXPECT_EQ(small.layers, 12);
  EXPECT_EQ(small.width, 768);
  EXPECT_EQ(small.heads, 12);
  EXPECT_EQ(small.context, 1024);
  EXPECT_NEAR(static_cast<double>(parameters_of(small)), 86.0e6, 0.1e6);
  EXPECT_TRUE(small.was_given("width"));
  EXPECT_TRUE(fsdp_train::check_options(small, 1, nullptr).empty());

  const auto big = parse({"--preset", "gpt-1b"});
  EXPECT_NEAR(static_cast<double>(parameters_of(big)), 1.01e9, 0.01e9);

  const auto shorter = parse({"--preset", "gpt2-small-bytes", "--context", "256"});
  EXPECT_EQ(shorter.context, 256);
  EXPECT_EQ(shorter.layers, 12);

  const auto unknown = parse({"--preset", "gpt-7b"});
  const auto errors = fsdp_train::check_options(unknown, 1, nullptr);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("--preset 'gpt-7b' is not a preset; pick one of: gpt2-small-bytes, "
                           "gpt-1b"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(fsdp_train::describe_model_presets().find("gpt2-small-bytes  12 x 768, 12 heads"),
            std::string::npos);
}

TEST(TrainerDevice, ValuesAndCombinationsAreCheckedWithTheFix) {
  EXPECT_TRUE(fsdp_train::check_options(parse({"--device", "cpu"}), 1, nullptr).empty());
  const auto tpu = fsdp_train::check_options(parse({"--device", "tpu"}), 1, nullptr);
  ASSERT_EQ(tpu.size(), 1u);
  EXPECT_EQ(tpu[0], "--device 'tpu' is not one of: cpu, cuda");
  const auto deferred =
      fsdp_train::check_options(parse({"--device", "cuda", "--deferred-init"}), 1, nullptr);
  ASSERT_EQ(deferred.size(), 1u);
  EXPECT_NE(deferred[0].find("--deferred-init builds on the CPU"), std::string::npos);
  EXPECT_EQ(fsdp_train::training_backend(parse({"--device", "cuda"})), fsdp::CommBackend::kNccl);
  EXPECT_EQ(fsdp_train::training_backend(parse({})), fsdp::CommBackend::kGloo);
  EXPECT_TRUE(fsdp_train::select_training_device(parse({}), 3).is_cpu());
  EXPECT_EQ(fsdp_train::check_device(parse({}), 64), "");  // the CPU needs nothing
}

// --backend: gloo or nccl; nccl only with CUDA; gloo with CUDA stages the
// GPU tensors through host memory, and only then may ranks outnumber GPUs.
TEST(TrainerDevice, BackendChoiceIsExplicitAndChecked) {
  const auto bad = fsdp_train::check_options(parse({"--backend", "mpi"}), 1, nullptr);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0], "--backend 'mpi' is not one of: gloo, nccl");
  const auto nccl_on_cpu = fsdp_train::check_options(parse({"--backend", "nccl"}), 1, nullptr);
  ASSERT_EQ(nccl_on_cpu.size(), 1u);
  EXPECT_EQ(nccl_on_cpu[0],
            "--backend nccl moves CUDA tensors only; pass --device cuda with it, "
            "or leave out --backend (the CPU uses gloo)");
  // Never staged unless asked for: CUDA means NCCL by default.
  const auto staged = parse({"--device", "cuda", "--backend", "gloo"});
  EXPECT_EQ(fsdp_train::training_backend(staged), fsdp::CommBackend::kGloo);
  EXPECT_TRUE(fsdp_train::stages_through_host(staged));
  EXPECT_FALSE(fsdp_train::stages_through_host(parse({"--device", "cuda"})));
  EXPECT_FALSE(fsdp_train::stages_through_host(parse({"--backend", "gloo"})));
  EXPECT_EQ(fsdp_train::training_backend(parse({"--device", "cuda", "--backend", "nccl"})),
            fsdp::CommBackend::kNccl);
#if defined(FSDP_WITH_NCCL)
  const int gpus = static_cast<int>(torch::cuda::device_count());
  EXPECT_EQ(fsdp_train::check_device(staged, gpus + 3), "") << "ranks may share GPUs with gloo";
  const auto device = fsdp_train::select_training_device(staged, gpus + 1);
  EXPECT_EQ(device.index(), 1 % gpus) << "round-robin over the GPUs";
#endif
}

// Where this build has no CUDA, --device cuda is refused naming the fix;
// with CUDA, more ranks than GPUs are.
TEST(TrainerDevice, CudaIsRefusedWhereItCannotRun) {
  const auto cuda = parse({"--device", "cuda"});
#if defined(FSDP_WITH_NCCL)
  const int gpus = static_cast<int>(torch::cuda::device_count());
  const std::string error = fsdp_train::check_device(cuda, gpus + 1);
  EXPECT_NE(error.find("has " + std::to_string(gpus) + " GPU"), std::string::npos) << error;
  EXPECT_NE(error.find("fsdp-run --nproc-per-node"), std::string::npos) << error;
  EXPECT_NE(error.find("or pass --backend gloo to share the GPU"), std::string::npos) << error;
#else
  EXPECT_EQ(fsdp_train::check_device(cuda, 1),
            "--device cuda: this fsdp-train was built against a LibTorch without CUDA; build it "
            "against a CUDA LibTorch (docs/gpu.md), or pass --device cpu");
#endif
}

// [Note: the memory check before building the model]: the bound grows with
// the model and the ranks on a node, and absurd sizes give a number, not an
// overflow.
TEST(TrainerMemoryCheck, RefusesWhatCannotFitWithTheNumbers) {
  fsdp_train::TrainOptions o;  // 4 x 128: about 0.8M parameters
  fsdp_train::BatchLayout layout{2, 16, 16, 1};
  const double small = fsdp_train::estimated_rank_bytes(o, layout);
  EXPECT_GT(small, 4.0 * 800000);  // at least the full fp32 model
  EXPECT_LT(small, 1e9);
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(fsdp_train::check_fits_in_memory(o, layout, 2, 8 * kGiB), "");
  EXPECT_EQ(fsdp_train::check_fits_in_memory(o, layout, 2, std::nullopt), "");

  o.width = 65536;
  const std::string wide = fsdp_train::check_fits_in_memory(o, layout, 2, 24 * kGiB);
  EXPECT_NE(wide.find("the model does not fit: --layers 4 --width 65536 --context 128"),
            std::string::npos)
      << wide;
  EXPECT_NE(wide.find("for the 2 ranks on this node, but only 24.0 GiB is available"),
            std::string::npos)
      << wide;
  o.layers = INT64_MAX;
  const std::string absurd = fsdp_train::check_fits_in_memory(o, layout, 1, 24 * kGiB);
  EXPECT_NE(absurd.find("bytes"), std::string::npos) << absurd;
  EXPECT_GT(fsdp_train::estimated_rank_bytes(o, layout), 1e30);
}

// A rank's own limit (RLIMIT_DATA) is checked too; deferred init builds one
// block at a time, so its lower bound drops by the full model.
TEST(TrainerMemoryCheck, ARanksLimitIsCheckedAndDeferredInitBuildsLess) {
  fsdp_train::TrainOptions o;
  o.layers = 24;
  o.width = 1024;
  o.heads = 16;
  fsdp_train::BatchLayout layout{4, 1, 1, 1};
  constexpr int64_t kGiB = int64_t{1} << 30;
  const double ordinary = fsdp_train::estimated_rank_bytes(o, layout);
  o.deferred_init = true;
  const double deferred = fsdp_train::estimated_rank_bytes(o, layout);
  EXPECT_NEAR(ordinary - deferred, 4.0 * (302.6e6 - 12 * 1024.0 * 1024 - 13 * 1024), 4e6);
  EXPECT_EQ(fsdp_train::check_fits_in_memory(o, layout, 4, 24 * kGiB, 4 * kGiB), "");
  const std::string over = fsdp_train::check_fits_in_memory(o, layout, 4, 24 * kGiB, kGiB);
  EXPECT_NE(over.find("does not fit in this rank's memory limit"), std::string::npos) << over;
  EXPECT_NE(over.find("its limit is 1.00 GiB (RLIMIT_DATA"), std::string::npos) << over;
  EXPECT_NE(over.find("fsdp-plan --fit"), std::string::npos) << over;
}

// A failed allocation gets a hint; other errors do not.
TEST(TrainerMemoryCheck, OutOfMemoryErrorsSayWhatToChange) {
  const std::string hint = fsdp_train::out_of_memory_hint(std::bad_alloc());
  EXPECT_NE(hint.find("this rank ran out of memory"), std::string::npos) << hint;
  EXPECT_NE(hint.find("fsdp-plan"), std::string::npos) << hint;
  EXPECT_NE(fsdp_train::out_of_memory_hint(std::runtime_error(
                "DefaultCPUAllocator: can't allocate memory: you tried to allocate 25192448 bytes")),
            "");
  EXPECT_EQ(fsdp_train::out_of_memory_hint(std::runtime_error("shape mismatch")), "");
}

// A corpus too large for this node's memory is refused before it is read.
TEST(TrainerMemoryCheck, ACorpusTooLargeIsRefusedBeforeItIsRead) {
  const std::string path = ::testing::TempDir() + "/fsdp-corpus-size.txt";
  std::ofstream(path) << std::string(1000, 'a');
  EXPECT_EQ(fsdp_train::check_corpus_fits(path, 1, 4000), "");
  const std::string refused = fsdp_train::check_corpus_fits(path, 2, 3000);
  EXPECT_NE(refused.find("data file '" + path + "' is 1000 B; fsdp-train holds the corpus in "
                         "memory on every rank"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("the 2 ranks on this node need 3.91 KiB, but only 2.93 KiB"),
            std::string::npos)
      << refused;
  EXPECT_EQ(fsdp_train::check_corpus_fits("", 8, 1), "") << "the default corpus is small";
  std::remove(path.c_str());
}

// ---------------------------------------------------------------------------
// metrics.jsonl and the summary's hook times (--hook-times).

fsdp_train::StepRecord hook_step(int64_t step, std::vector<int64_t> hook_us,
                                 std::vector<std::pair<std::string, double>> by_range) {
  fsdp_train::StepRecord r;
  r.step = step;
  r.loss = 5.5;
  r.hook_us = std::move(hook_us);
  r.hook_us_by_range = std::move(by_range);
  return r;
}

TEST(TrainerMetrics, HookTimesSurviveAMetricsLine) {
  const auto r = hook_step(3, {1200, 1500}, {{"pre_forward", 700.25}, {"post_backward", 0.125}});
  const auto back = fsdp_train::StepRecord::from_json_line(r.to_json_line());
  ASSERT_TRUE(back.has_value()) << r.to_json_line();
  EXPECT_EQ(back->hook_us, r.hook_us);
  EXPECT_EQ(back->hook_us_by_range, r.hook_us_by_range);  // in order, exactly
  // A run without --hook-times writes neither key.
  const std::string plain = hook_step(3, {}, {}).to_json_line();
  EXPECT_EQ(plain.find("hook_us"), std::string::npos) << plain;
  EXPECT_TRUE(fsdp_train::StepRecord::from_json_line(plain)->hook_us.empty());
}

TEST(TrainerMetrics, HookSummaryIsTheMedianStepOfTheSlowestRankPerUnit) {
  // Three steps on two ranks; 4 units x 2 micro-batches = 8 unit runs a step.
  const std::vector<fsdp_train::StepRecord> records = {
      hook_step(1, {8000, 800}, {{"pre_forward", 4000}, {"post_backward", 800}}),
      hook_step(2, {80, 1600}, {{"pre_forward", 40}}),  // post_backward absent: zero
      hook_step(3, {160, 2400}, {{"pre_forward", 80}, {"post_backward", 1600}}),
  };
  const auto h = fsdp_train::summarize_hook_times(records, 4, 2, /*includes_waits=*/true);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->units, 4);
  EXPECT_EQ(h->micro_batches, 2);
  EXPECT_TRUE(h->includes_waits);
  EXPECT_DOUBLE_EQ(h->us_per_unit, 2400.0 / 8);  // slowest ranks 8000, 1600, 2400
  ASSERT_EQ(h->by_range.size(), 2u);
  EXPECT_EQ(h->by_range[0].first, "pre_forward");
  EXPECT_DOUBLE_EQ(h->by_range[0].second, 80.0 / 8);  // of 4000, 40, 80
  EXPECT_EQ(h->by_range[1].first, "post_backward");
  EXPECT_DOUBLE_EQ(h->by_range[1].second, 800.0 / 8);  // of 800, 0, 1600
  // No hook times, no summary.
  EXPECT_FALSE(fsdp_train::summarize_hook_times({hook_step(1, {}, {})}, 4, 1,
                                                   /*includes_waits=*/false)
                   .has_value());
  // On the GPU the hooks only launch collectives: no waits to mention.
  EXPECT_FALSE(
      fsdp_train::summarize_hook_times(records, 4, 2, /*includes_waits=*/false).value().includes_waits);
}

// A step that took `ms` milliseconds, as metrics.jsonl records it.
fsdp_train::StepRecord timed_step(int64_t step, double ms) {
  fsdp_train::StepRecord r;
  r.step = step;
  r.loss = 5.0;
  r.ms = ms;
  return r;
}

// [Note: redone work across restarts]: start 0 records steps 1-5 and dies;
// restart 1 resumes at step 4 (redoing step 5), records 5-7 and dies;
// restart 2 resumes at step 2, as if the step-4 checkpoint did not verify,
// which drops steps 3-7 and restart 1's marker with them. The totals still
// count restart 1's step.
TEST(TrainerMetrics, RedoneWorkCountsEveryRestartEvenOneWhoseMarkerIsDropped) {
  fsdp::testing::TempDir dir("fsdp-metrics");
  {
    fsdp_train::MetricsLog start(dir.path(), 0);
    for (int64_t step = 1; step <= 5; ++step) start.append(timed_step(step, 100));
    EXPECT_TRUE(start.restarts().empty());
  }
  {
    fsdp_train::MetricsLog restart1(dir.path(), 4, 1);
    ASSERT_EQ(restart1.restarts().size(), 1u);
    EXPECT_EQ(restart1.restarts()[0].redone_steps, 1);
    EXPECT_EQ(restart1.restarts()[0].total_redone_steps, 1);
    for (int64_t step = 5; step <= 7; ++step) restart1.append(timed_step(step, 100));
  }
  fsdp_train::MetricsLog restart2(dir.path(), 2, 2);
  ASSERT_EQ(restart2.restarts().size(), 1u) << "restart 1's marker came after step 2";
  const fsdp_train::RestartMarker& marker = restart2.restarts()[0];
  EXPECT_EQ(marker.restart, 2);
  EXPECT_EQ(marker.after_step, 2);
  EXPECT_EQ(marker.redone_steps, 5);  // 3 and 4 of start 0, 5-7 of restart 1
  EXPECT_NEAR(marker.redone_s, 0.5, 1e-9);
  EXPECT_EQ(marker.total_redone_steps, 6);  // and restart 1's step 5
  EXPECT_NEAR(marker.total_redone_s, 0.6, 1e-9);
  ASSERT_EQ(restart2.records().size(), 2u);

  // The file says the same: steps 1 and 2, then restart 2's marker.
  std::ifstream in(dir.path() + "/metrics.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  const auto read_back = fsdp_train::RestartMarker::from_json_line(lines[2]);
  ASSERT_TRUE(read_back.has_value()) << lines[2];
  EXPECT_EQ(read_back->total_redone_steps, 6);
  EXPECT_FALSE(fsdp_train::StepRecord::from_json_line(lines[2]).has_value())
      << "a marker must not read as a step";
}

// What --async-save reserves before the first step is exactly what its
// saves then copy: AdamW's moments and steps counted before they exist, at
// 1 and 3 ranks (rank 0 alone saves the steps); once the state exists (a
// resumed run), the pieces alone.
TEST(TrainerAsyncSave, ReservesExactlyWhatEachSaveCopies) {
  for (int world_size : {1, 3}) {
    fsdp::testing::run_ranks(world_size, [](fsdp::testing::RankContext& ctx) {
      at::manual_seed(7);
      const auto config = fsdp::testing::tiny_gpt_config(true);
      auto model = fsdp::fully_shard(fsdp::models::GPT(config), fsdp::FullyShardOptions(ctx.group));
      torch::optim::AdamW adamw(model->parameters());
      const int64_t reserved = fsdp_train::async_copy_bytes(*model, adamw, ctx.rank);

      const at::Tensor tokens = at::randint(0, config.vocab_size, {2, config.context});
      fsdp::models::lm_loss(model->forward(tokens), tokens).backward();
      adamw.step();
      const int64_t copied =
          fsdp::ckpt::host_copy_bytes(fsdp::ckpt::training_state_pieces(*model, &adamw));
      EXPECT_EQ(reserved, copied) << fsdp::testing::rank_str(ctx) << " of " << ctx.world_size;
      EXPECT_EQ(fsdp_train::async_copy_bytes(*model, adamw, ctx.rank), copied)
          << fsdp::testing::rank_str(ctx) << " of " << ctx.world_size << ", state present";
    });
  }
}

}  // namespace
