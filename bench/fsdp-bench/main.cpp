// fsdp-bench <suite> [options]: benchmarks for libfsdp. Every suite prints a
// table, or one JSON object per line with --json (see bench_util.h), and
// measures its baseline in the same run.

#include <CLI/CLI.hpp>

#include "fsdp/cpu_heap.h"
#include "fsdp/error_message.h"
#include "suites.h"

namespace {

constexpr fsdp::bench::SuiteRegistrar kSuites[] = {
    fsdp::bench::comm_suite::register_suite,       fsdp::bench::overhead_suite::register_suite,
    fsdp::bench::train_suite::register_suite,      fsdp::bench::memory_suite::register_suite,
    fsdp::bench::checkpoint_suite::register_suite, fsdp::bench::activations_suite::register_suite,
    fsdp::bench::optimizer_suite::register_suite,  fsdp::bench::slowlink_suite::register_suite,
};

}  // namespace

int main(int argc, char** argv) {
  // As fsdp-train does: the suites time training steps, which with glibc's
  // defaults fault their freed buffers in again every step
  // ([Note: freed CPU memory kept for reuse] in fsdp/cpu_heap.h).
  fsdp::keep_freed_cpu_memory();
  CLI::App app{"fsdp-bench: benchmarks for libfsdp"};
  app.require_subcommand(1);
  for (auto add_suite : kSuites) add_suite(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-bench: %s\n", fsdp::error_message(e).c_str());
    return 1;
  }
  return 0;
}
