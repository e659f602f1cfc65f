#pragma once
// fsdp-train run as a real program by the tests (build/bin/fsdp-train):
// alone or on several ranks, with a tiny model so each run takes seconds,
// and its metrics.jsonl read back. Shared by test_trainer.cpp,
// test_trainer_resume.cpp and test_trainer_run_dir.cpp.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/json_value.h"
#include "harness/multiprocess.h"
#include "harness/temp_dir.h"

namespace fsdp::testing {

// Upper bound on a run that should end long before it; never a speed test.
constexpr std::chrono::seconds kTrainerRunLimit{180};

// The corpus the tests train on, shipped in the repository
// (tests/data/corpus.txt: this project's own README and docs), so no test
// depends on Debian's `fortunes`, the trainer's default.
std::string test_corpus_path();

// A model small enough that a step takes milliseconds, on the test corpus,
// followed by `extra`.
std::vector<std::string> tiny(std::vector<std::string> extra = {});

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b);

class TrainerTempDir : public TempDir {
 public:
  TrainerTempDir() : TempDir("fsdp_trainer") {}
};

// Runs fsdp-train with no launcher environment (one rank, standalone).
ProcessResult run_alone(const std::vector<std::string>& args);

// Runs fsdp-train on `world_size` ranks with torchrun's variables.
std::vector<ProcessResult> run_trainer_ranks(const std::vector<std::string>& args, int world_size);

// Every rank's exit and output, for a failure message.
std::string describe(const std::vector<ProcessResult>& results);
void expect_all_ok(const std::vector<ProcessResult>& results);

// The lines of <run_dir>/metrics.jsonl, and the same keyed by step.
std::vector<JsonValue> read_metrics(const std::string& run_dir);
std::map<int64_t, JsonValue> by_step(const std::vector<JsonValue>& lines);

std::string read_text(const std::string& path);
void expect_close(double a, double b, double rel, const std::string& what);
// The same for two numbers read from JSON.
inline void expect_close(const JsonValue& a, const JsonValue& b, double rel,
                         const std::string& what) {
  expect_close(a.get<double>(), b.get<double>(), rel, what);
}

}  // namespace fsdp::testing
