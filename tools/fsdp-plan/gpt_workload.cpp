#include "gpt_workload.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <vector>

#include "fsdp/clip_grad.h"
#include "fsdp/cpu_allocation_counter.h"
#include "fsdp/fully_shard.h"
#include "fsdp/models/gpt.h"
#include "proc_status.h"

namespace fsdp_plan {

WorkloadResult run_gpt_workload(const GptSizes& sizes, int64_t batch, int steps, bool bf16,
                                std::shared_ptr<fsdp::ProcessGroup> group) {
  using Clock = std::chrono::steady_clock;
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
  const double rss_before = proc_status_bytes("VmRSS:");
  auto& counter = fsdp::CpuAllocationCounter::install();
  const int64_t counted_before = counter.current_bytes();
  fsdp::models::GPTConfig config;
  config.vocab_size = sizes.vocab;
  config.context = sizes.context;
  config.d_model = sizes.width;
  config.n_head = sizes.heads;
  config.n_layer = sizes.layers;
  WorkloadResult result;
  {
    fsdp::MixedPrecisionPolicy precision;
    if (bf16) precision.param_dtype(at::kBFloat16).reduce_dtype(at::kFloat);
    auto model = fsdp::fully_shard(
        fsdp::models::GPT(config),
        fsdp::FullyShardOptions(group ? group : fsdp::make_single_process_group())
            .mp(precision));
    torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
    counter.reset_peak();
    std::vector<double> times;
    for (int step = 0; step <= steps; ++step) {
      const auto start = Clock::now();
      optimizer.zero_grad();
      at::Tensor tokens = at::randint(0, sizes.vocab, {batch, sizes.context});
      at::Tensor logits = model->forward(tokens);
      at::Tensor loss = fsdp::models::lm_loss(logits, tokens);
      loss.backward();
      at::Tensor loss_sum = loss.detach().to(at::kDouble).reshape({1});
      fsdp::clip_grad_norm_(*model, 1.0);  // as fsdp-train's step does
      optimizer.step();
      // fsdp-train's step ends by summing the loss over the ranks.
      if (group) group->all_reduce(loss_sum, fsdp::ReduceOp::kSum)->wait();
      if (step > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    result.step_s = times[times.size() / 2];
    result.tensor_peak = static_cast<double>(counter.peak_bytes() - counted_before);
  }
  result.resident_beyond = proc_status_bytes("VmHWM:") - rss_before - result.tensor_peak;
  return result;
}

}  // namespace fsdp_plan
