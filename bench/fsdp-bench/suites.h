#pragma once
// fsdp-bench is a registry of suites: each suite is one file that adds one
// CLI11 subcommand. To add a suite, write <name>_suite.cpp with a
// register_<name>_suite() and list it in kSuites in main.cpp.

#include <CLI/CLI.hpp>

namespace fsdp::bench {

using SuiteRegistrar = void (*)(CLI::App& app);

// `fsdp-bench comm`: all-gather, reduce-scatter and all-reduce bandwidth.
void register_comm_suite(CLI::App& app);

// `fsdp-bench overhead`: FSDP's CPU cost per unit per step vs local training.
void register_overhead_suite(CLI::App& app);

// `fsdp-bench train`: FSDP step vs compute alone and communication alone.
void register_train_suite(CLI::App& app);

// `fsdp-bench memory`: per-rank sharded bytes and peak gathered bytes.
void register_memory_suite(CLI::App& app);

// `fsdp-bench checkpoint`: sharded save and load MB/s vs raw disk writes.
void register_checkpoint_suite(CLI::App& app);

// `fsdp-bench activations`: peak memory and step time with activation
// checkpointing off, every other block, every block.
void register_activations_suite(CLI::App& app);

// `fsdp-bench optimizer`: LibTorch's optimizer steps in passes over their
// parameters, against a copy (what fsdp-plan charges them).
void register_optimizer_suite(CLI::App& app);

// `fsdp-bench slowlink` (root): fp32, bf16 and int8 communication on two
// namespaced nodes joined by a rate-limited link.
void register_slowlink_suite(CLI::App& app);

}  // namespace fsdp::bench
