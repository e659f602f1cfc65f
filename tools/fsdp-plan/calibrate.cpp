#include "calibrate.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "fsdp/comm/launch_env.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/cpu_heap.h"
#include "calibration_sizes.h"
#include "compute_fit.h"
#include "gpt_workload.h"
#include "hardware_profile.h"
#include "median_profile.h"
#include "proc_status.h"
#include "time_plan.h"

namespace fsdp_plan {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call of fn, repeated for about `budget` seconds (at least 3).
template <class Fn>
double seconds_per_call(Fn&& fn, double budget) {
  fn();  // warm up
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 3 || std::chrono::duration<double>(Clock::now() - start).count() < budget) {
    const auto t0 = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

double matmul_flops(at::ScalarType dtype, double budget) {
  const int64_t n = 1024;
  at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  const double s = seconds_per_call([&] { at::mm(a, b); }, budget);
  return 2.0 * n * n * n / s;
}

double copy_bytes_per_s(double budget) {
  at::Tensor a = at::ones({32 << 20}), b = at::empty({32 << 20});
  const double s = seconds_per_call([&] { b.copy_(a); }, budget);
  return 2.0 * static_cast<double>(a.nbytes()) / s;  // read and write
}

double all_gather_s(fsdp::ProcessGroup& group, int64_t bytes_total, double budget) {
  const int64_t per_rank = bytes_total / 4 / group.size();
  at::Tensor in = at::ones({per_rank}), out = at::empty({per_rank * group.size()});
  // Every rank must run the same number of calls: a fixed count from the budget.
  const double once = seconds_per_call([&] { group.all_gather(out, in)->wait(); }, 0);
  const int calls = static_cast<int>(std::clamp(budget / std::max(once, 1e-6), 3.0, 200.0));
  at::Tensor agreed = at::tensor({static_cast<double>(calls)}, at::kDouble);
  group.all_reduce(agreed, fsdp::ReduceOp::kMin)->wait();
  std::vector<double> times;
  for (int i = 0; i < static_cast<int>(agreed.item<double>()); ++i) {
    const auto t0 = Clock::now();
    group.all_gather(out, in)->wait();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

double mem_total_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  double kib = 0;
  meminfo >> name >> kib;  // MemTotal is the first line
  return kib * 1024;
}

// Median over ranks of one figure (collective).
double median_over_ranks(fsdp::ProcessGroup& group, double mine) {
  at::Tensor in = at::tensor({mine}, at::kDouble);
  at::Tensor all = at::empty({group.size()}, at::kDouble);
  group.all_gather(all, in)->wait();
  std::vector<double> v(all.data_ptr<double>(), all.data_ptr<double>() + group.size());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// [Note: resident memory beyond the tensors]
// A rank's resident memory exceeds its runtime plus its live tensors:
// fsdp-train keeps freed memory in glibc's heap for reuse ([Note: freed CPU
// memory kept for reuse] in fsdp/cpu_heap.h), fragmented, and calibrate
// keeps it the same way. How much is kept depends on the allocator and the
// workload, so calibrate measures it on the workload the planner models: a
// few AdamW steps of a GPT, as the fraction of the tensor peak that the
// resident high-water mark exceeds it by, on a model wide enough that
// glibc's fixed arenas do not dwarf its tensors, and first, before other
// workloads have left freed memory in the heap. The GPT is sharded over all
// the ranks, as fsdp-train's: the communication thread allocates from an
// arena of its own, which keeps its own freed memory (here 27% beyond the
// tensors at one rank, 74% at two).
double measure_retention(const fsdp::ProcessGroupPtr& world) {
  const WorkloadResult wide = run_gpt_workload({2, 256, 4, 64, 256}, 4, 3, false, world);
  return std::max(0.0, wide.resident_beyond / wide.tensor_peak);
}

using Say = std::function<void(const std::string&)>;

// [Note: compute calibrated on the GPT]
// A matmul's rate overstates what a training step achieves: elementwise
// operations, per-operation and per-unit overhead (hooks, the optimizer's
// per-parameter loop) add time that shrinks in proportion as a model grows.
// Calibrate times the GPT's steps at six sizes (two depths x three widths,
// none of them a size `validate` checks) and fits the planner's compute
// model, t - optimizer = flops / (fraction x matmul rate) + units x unit
// cost, to all six by least squares (compute_fit.h): the achieved fraction
// and the cost per unit. The narrowest width, 48, pins the cost per unit,
// which the smallest models' steps are mostly made of: fitted on widths 96
// and 192 alone, it varied from 1.7 to 3.1 ms between calibrations on this
// VM, and the 2 x 64 GPT was planned at 1.04-1.60 of its measured step.
// The points are each size's median step over the ranks, so every rank fits
// the same ones and one rank's slow steps do not skew a fit of their own.
// Separately for fp32 and for bf16 mixed precision, whose casts and
// elementwise work cost more on a CPU without native bf16 arithmetic. The
// ranks run the steps at once, so the fit includes what sharing the
// machine's cores and memory costs at this many ranks.
ComputeFit fit_compute(fsdp::ProcessGroup& world, const HardwareProfile& measured, bool bf16,
                       const Say& say) {
  HardwareProfile ideal = measured;
  ideal.achieved_fraction = ideal.bf16_achieved_fraction = 1;
  ideal.unit_overhead_s = ideal.bf16_unit_overhead_s = 0;
  TrainingSetup one;
  one.micro_batch = kCalibrationBatch;
  one.bf16 = bf16;
  std::vector<ComputePoint> points;
  for (const GptSizes& size : calibration_gpt_sizes()) {
    const WorkloadResult run = run_gpt_workload(size, one.micro_batch, 9, bf16);
    const ModelSpec spec = gpt_model_spec(size);
    const TimePlan plan = plan_time(spec, one, ideal);
    // Every rank fits the same points: each size's median step over ranks.
    points.push_back({fmt::format("{}x{}", size.layers, size.width), plan.compute_s,
                      static_cast<double>(spec.units.size()),
                      median_over_ranks(world, run.step_s) - plan.optimizer_s});
  }
  const ComputeFit fit = fit_compute_model(points);
  say(fmt::format("GPT steps in {}: {:.0f}% of the matmul rate, {:.2f} ms per unit",
                  bf16 ? "bf16" : "fp32", 100 * fit.achieved_fraction, 1e3 * fit.unit_overhead_s));
  say(fmt::format("  fitted/measured per GPT size: {}", fit_summary(fit, points)));
  return fit;
}

// [Note: synchronization calibrated on sharded steps]
// Ranks that train together pay more than their collectives' alpha-beta
// cost. Each ring step of a collective wakes threads (the caller's, the
// communication worker's, Gloo's) that compete with compute for the cores;
// every collective waits for the slowest rank; compute beside a collective
// slows down. Calibrate's all-gathers, run back to back on idle ranks, see
// little of this: on this 2-core VM, GPT steps at two ranks took 8-12 ms
// (3 blocks) to 30-40 ms (7 blocks) longer than the plan from those
// figures, at every strategy. So calibrate runs the six GPT sizes of
// [Note: compute calibrated on the GPT] again, fully sharded over all its
// ranks, and takes per size the measured step less the step planned
// without this cost, per ring step the plan counts (an all-gather or a
// reduce-scatter over p ranks has p - 1, an all-reduce 2(p - 1)); the
// profile keeps the median over sizes. Counting ring steps, not units,
// charges `grad-op` (no gather in backward) and `none` (one all-reduce)
// less than `full`, as measured. It is fitted in fp32 and again in bf16,
// whose gathers move half the bytes: on a CPU with native bf16 matmuls the
// fp32 figure over-planned bf16 steps by up to 30%. Shipped GPU profiles
// leave both at 0: NCCL runs on the GPU's own engines and its launches cost
// microseconds.
double fit_sync_per_ring_step(const fsdp::ProcessGroupPtr& world, const HardwareProfile& measured,
                              bool bf16) {
  TrainingSetup sharded;
  sharded.nproc_per_node = world->size();
  sharded.micro_batch = kCalibrationBatch;
  sharded.bf16 = bf16;
  std::vector<double> per_step;
  for (const GptSizes& size : calibration_gpt_sizes()) {
    const WorkloadResult run = run_gpt_workload(size, sharded.micro_batch, 9, bf16, world);
    const TimePlan plan = plan_time(gpt_model_spec(size), sharded, measured);
    per_step.push_back((median_over_ranks(*world, run.step_s) - plan.step_s) / plan.ring_steps);
  }
  std::sort(per_step.begin(), per_step.end());
  const size_t n = per_step.size();
  return std::max(0.0, (per_step[(n - 1) / 2] + per_step[n / 2]) / 2);
}

int relaunch_under_fsdp_run(const CalibrateOptions& o, const std::string& self) {
  const auto run = std::filesystem::path(self).parent_path() / "fsdp-run";
  if (!std::filesystem::exists(run)) {
    fmt::print(stderr, "fsdp-plan calibrate: fsdp-run is not next to {}; run `fsdp-run "
               "--standalone --nproc-per-node {} -- {} calibrate --output {}` yourself\n",
               self, o.nproc_per_node, self, o.output);
    return 1;
  }
  const std::string n = std::to_string(o.nproc_per_node);
  fmt::print("fsdp-plan calibrate: measuring with {} rank{} under {}\n", n,
             o.nproc_per_node == 1 ? "" : "s", run.string());
  std::fflush(stdout);
  std::vector<std::string> args = {run.string(), "--standalone", "--nproc-per-node", n, "--",
                                   self, "calibrate", "--output", o.output,
                                   "--repeats", std::to_string(o.repeats)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  fmt::print(stderr, "fsdp-plan calibrate: cannot run {}\n", run.string());
  return 1;
}

// [Note: measured overlap]
// On a GPU a collective runs beside the compute kernels. On CPU ranks it
// does not, entirely: Gloo's thread copies and waits on the same cores the
// rank computes on, and with more ranks than cores nothing runs beside
// anything. So calibrate times an all-gather alone (g), a run of matmuls
// about as long alone (c), and the two together: the gather issued, the
// matmuls run, the gather waited for (b). Perfect overlap gives b =
// max(g, c); none gives b = g + c. The overlap fraction is
// (g + c - b) / min(g, c), clamped to [0, 1], and the planner hides only
// that fraction of a collective behind compute.
double measure_overlap(fsdp::ProcessGroup& group, double budget) {
  const int64_t per_rank = (8 << 20) / 4 / group.size();
  at::Tensor in = at::ones({per_rank}), out = at::empty({per_rank * group.size()});
  const at::Tensor a = at::randn({256, 256}), b = at::randn({256, 256});
  const double gather_s = all_gather_s(group, 8 << 20, budget);
  const double matmul_s = seconds_per_call([&] { at::mm(a, b); }, budget / 4);
  // Every rank runs the same count, the smallest any rank wants.
  at::Tensor agreed = at::tensor({std::max(1.0, std::round(gather_s / matmul_s))}, at::kDouble);
  group.all_reduce(agreed, fsdp::ReduceOp::kMin)->wait();
  const int matmuls = static_cast<int>(agreed.item<double>());
  const auto compute = [&] {
    for (int i = 0; i < matmuls; ++i) at::mm(a, b);
  };
  const double compute_s = seconds_per_call(compute, budget / 4);
  // The rounds with the gather are collective: a fixed count on every rank.
  std::vector<double> both;
  for (int round = 0; round < 9; ++round) {
    const auto t0 = Clock::now();
    fsdp::WorkPtr work = group.all_gather(out, in);
    compute();
    work->wait();
    both.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(both.begin(), both.begin() + both.size() / 2, both.end());
  const double together_s = both[both.size() / 2];
  return std::clamp((gather_s + compute_s - together_s) / std::min(gather_s, compute_s), 0.0, 1.0);
}

// The link: all-gathers of two sizes fitted to the ring's alpha-beta cost.
Link measure_link(fsdp::ProcessGroup& world, double budget) {
  const double small = 16 << 10, big = 32 << 20;
  const double t_small = median_over_ranks(world, all_gather_s(world, static_cast<int64_t>(small), budget));
  const double t_big = median_over_ranks(world, all_gather_s(world, static_cast<int64_t>(big), budget));
  const double p = world.size(), share = (p - 1) / p;
  const double beta = std::max(1e-15, (t_big - t_small) / (share * (big - small)));
  const double alpha = std::max(0.0, (t_small - share * small * beta) / (p - 1));
  return Link{alpha, 1 / beta};
}

// Every figure, the median over ranks (collective).
HardwareProfile measure(const fsdp::ProcessGroupPtr& world_ptr, const fsdp::LaunchEnv& env,
                        double budget, const Say& say) {
  fsdp::ProcessGroup& world = *world_ptr;
  HardwareProfile prof;
  matmul_flops(at::kFloat, 0);  // thread pools and BLAS buffers up before the runtime is read
  prof.runtime_bytes = median_over_ranks(world, proc_status_bytes("VmRSS:"));
  say(fmt::format("runtime resident memory {:.0f} MiB", prof.runtime_bytes / (1 << 20)));
  // Before the rate measurements, whose freed buffers (256 MiB for the
  // copy) stay in the heap and would hide the workload's own growth.
  prof.allocator_retention = median_over_ranks(world, measure_retention(world_ptr));
  say(fmt::format("the allocator keeps {:.0f}% beyond the tensors", 100 * prof.allocator_retention));
  prof.peak_flops_fp32 = median_over_ranks(world, matmul_flops(at::kFloat, budget));
  say(fmt::format("matmul fp32 {:.1f} GFLOP/s per rank", prof.peak_flops_fp32 / 1e9));
  prof.peak_flops_bf16 = median_over_ranks(world, matmul_flops(at::kBFloat16, budget));
  say(fmt::format("matmul bf16 {:.1f} GFLOP/s per rank", prof.peak_flops_bf16 / 1e9));
  prof.memory_bytes_per_s = median_over_ranks(world, copy_bytes_per_s(budget));
  say(fmt::format("memory {:.1f} GB/s per rank", prof.memory_bytes_per_s / 1e9));
  prof.host_link_bytes_per_s = prof.host_memory_bytes_per_s = prof.memory_bytes_per_s;
  for (const bool bf16 : {false, true}) {
    const ComputeFit fit = fit_compute(world, prof, bf16, say);
    (bf16 ? prof.bf16_achieved_fraction : prof.achieved_fraction) = fit.achieved_fraction;
    (bf16 ? prof.bf16_unit_overhead_s : prof.unit_overhead_s) = fit.unit_overhead_s;
  }
  if (world.size() > 1) {
    prof.intra_node = prof.inter_node = measure_link(world, budget);
    say(fmt::format("link: alpha {:.1f} us, {:.2f} GB/s", prof.intra_node.latency_s * 1e6,
                    prof.intra_node.bytes_per_s / 1e9));
    prof.comm_compute_overlap = median_over_ranks(world, measure_overlap(world, budget));
    say(fmt::format("communication overlaps compute: {:.0f}%", 100 * prof.comm_compute_overlap));
    for (const bool bf16 : {false, true}) {
      (bf16 ? prof.bf16_sync_per_ring_step_s : prof.sync_per_ring_step_s) =
          fit_sync_per_ring_step(world_ptr, prof, bf16);
      say(fmt::format("sharded GPT steps in {}: {:.2f} ms per ring step beyond the plan",
                      bf16 ? "bf16" : "fp32", 1e3 * prof.sync_per_ring_step(bf16)));
    }
  } else {
    // One rank sends nothing; the profile still needs a link to be a valid
    // one, so it gets a local copy's cost and says so.
    prof.intra_node = prof.inter_node = Link{0, prof.memory_bytes_per_s};
    say("link: not measured with one rank (memory bandwidth written in its place)");
  }
  prof.memory_bytes = mem_total_bytes() / env.local_world_size;
  prof.host_memory_bytes = mem_total_bytes();
  prof.ranks_per_node = env.local_world_size;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  prof.name = fmt::format("calibrated-{}", host);
  prof.source = fmt::format(
      "fsdp-plan calibrate, {} rank{} of {} threads on one machine; inter-node link = {}",
      env.local_world_size, env.local_world_size == 1 ? "" : "s", at::get_num_threads(),
      env.local_world_size == 1 ? "not measured (memory bandwidth)" : "the measured local one");
  return prof;
}

}  // namespace

int calibrate(const CalibrateOptions& o, const std::string& self) {
  if (!fsdp::launched_distributed()) return relaunch_under_fsdp_run(o, self);
  const fsdp::LaunchEnv env = fsdp::read_launch_env();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(omp && std::atoi(omp) > 0 ? std::atoi(omp)
                                                : std::max(1, cores / env.local_world_size));
  fsdp::keep_freed_cpu_memory();  // as fsdp-train does, whose steps calibrate measures
  auto world = fsdp::init_process_group_from_env();
  const bool rank0 = world->rank() == 0;
  const Say say = [&](const std::string& what) {
    if (rank0) fmt::print("  {}\n", what), std::fflush(stdout);
  };
  std::vector<HardwareProfile> passes;
  for (int pass = 1; pass <= o.repeats; ++pass) {
    if (o.repeats > 1) say(fmt::format("pass {} of {}:", pass, o.repeats));
    passes.push_back(measure(world, env, o.seconds_per_measure, say));
  }
  const HardwareProfile prof = median_profile(passes);
  if (rank0) {
    save_profile(prof, o.output);
    fmt::print("fsdp-plan calibrate: wrote {}\n", o.output);
  }
  world->barrier()->wait();
  return 0;
}

}  // namespace fsdp_plan
