#pragma once
// fsdp-bench is a registry of suites: each suite is one file that adds one
// CLI11 subcommand. To add a suite, write <name>_suite.cpp defining
// <name>_suite::register_suite() and list it in kSuites in main.cpp.
//
// [Note: a namespace per suite]
// Each suite keeps its helpers in an anonymous namespace inside its own
// namespace, so suites may use the same names (Setting, Timings, Run) and
// still share one source in a unity build (CI's).

#include <CLI/CLI.hpp>

namespace fsdp::bench {

using SuiteRegistrar = void (*)(CLI::App& app);

// `fsdp-bench comm`: all-gather, reduce-scatter and all-reduce bandwidth.
namespace comm_suite {
void register_suite(CLI::App& app);
}

// `fsdp-bench overhead`: FSDP's CPU cost per unit per step vs local training.
namespace overhead_suite {
void register_suite(CLI::App& app);
}

// `fsdp-bench train`: FSDP step vs compute alone and communication alone.
namespace train_suite {
void register_suite(CLI::App& app);
}

// `fsdp-bench memory`: per-rank sharded bytes and peak gathered bytes.
namespace memory_suite {
void register_suite(CLI::App& app);
}

// `fsdp-bench checkpoint`: sharded save and load MB/s vs raw disk writes.
namespace checkpoint_suite {
void register_suite(CLI::App& app);
}

// `fsdp-bench activations`: peak memory and step time with activation
// checkpointing off, every other block, every block.
namespace activations_suite {
void register_suite(CLI::App& app);
}

// `fsdp-bench optimizer`: LibTorch's optimizer steps in passes over their
// parameters, against a copy (what fsdp-plan charges them).
namespace optimizer_suite {
void register_suite(CLI::App& app);
}

// `fsdp-bench slowlink` (root): fp32, bf16 and int8 communication on two
// namespaced nodes joined by a rate-limited link.
namespace slowlink_suite {
void register_suite(CLI::App& app);
}

}  // namespace fsdp::bench
