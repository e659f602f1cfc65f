#include "fsdp/fused_adamw.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "compat.h"

// [Note: fused AdamW]
// torch::optim::AdamW's step walks the parameters one by one and launches
// about ten element-wise kernels on each (decay, two moment updates, sqrt,
// divide, add, addcdiv...). On a flat shard cut into per-parameter views,
// that is thousands of small launches per step: 26 ms of a 219 ms step for a
// 1 B GPT on an H200, almost all of it launch overhead. at::_fused_adamw_
// (what Python's AdamW(fused=True) calls) takes lists of tensors and updates
// every element in one pass: one launch per list on CUDA, one parallel loop
// per tensor on the CPU.
//
// The arithmetic is AdamW's, in the same order as the for-loop (decoupled
// decay p *= 1 - lr * wd first, then the moments, then p -= lr / bc1 * m /
// (sqrt(v) / sqrt(bc2) + eps)), but each element is computed in float
// (double for double parameters) and rounded once at the end, where the
// for-loop rounds after every operation to the parameter's dtype. For float
// parameters the two agree to a few ulps a step; for bfloat16 the fused one
// is the more accurate. tests/test_fused_adamw.cpp states the tolerances.
//
// A launch takes one dtype and one device, and one set of hyperparameters,
// so step() makes one per (parameter group, device, dtype).

// [Note: fused AdamW step counts]
// The kernel reads each parameter's step count from a tensor on the
// parameter's device (a 0-dim float32, as Python keeps it for fused=True), so
// that the bias corrections need no host round trip. AdamWParamState keeps
// the count as an int64 on the host, and that stays the authority: state
// dicts, checkpoints and torch::optim::AdamW read and write only it, and
// anyone may replace a parameter's state between steps (a checkpoint load
// does). So DeviceStepCounts keeps, beside each device count, the int64 value
// it holds, and refills the count (an asynchronous fill, no sync) whenever
// that differs from the state's step. Each step then increments all counts of
// a launch with one _foreach_add_ and the int64 steps on the host, never
// reading a device value back. float32 counts are exact up to 2^24 steps.

namespace fsdp {
namespace detail {

// See [Note: fused AdamW step counts].
class DeviceStepCounts {
 public:
  struct Count {
    at::Tensor on_device;  // 0-dim, float32, on the parameter's device
    int64_t value = 0;     // what on_device holds
  };

  // The count for `param`, holding `step`.
  Count& for_param(const at::Tensor& param, int64_t step) {
    Count& count = counts_[param.unsafeGetTensorImpl()];
    if (!count.on_device.defined() || count.on_device.device() != param.device()) {
      count.on_device = at::zeros({}, param.options().dtype(at::kFloat));
      count.value = 0;
    }
    if (count.value != step) {
      count.on_device.fill_(static_cast<double>(step));
      count.value = step;
    }
    return count;
  }

 private:
  std::unordered_map<const c10::TensorImpl*, Count> counts_;
};

}  // namespace detail

namespace {

// "parameter 3 of group 1 (shape [4, 8], Float on cuda:0)", for errors.
std::string where(const at::Tensor& p, size_t group, size_t index) {
  return c10::str("fsdp::FusedAdamW: parameter ", index, " of group ", group, " (shape ", p.sizes(),
                  ", ", p.scalar_type(), " on ", p.device(), ")");
}

// What both paths need of a gradient. The for-loop would fail inside ATen,
// with no name, on a gradient of another dtype; the kernel needs one dtype.
void check_gradient(const at::Tensor& p, const at::Tensor& grad, size_t group, size_t index) {
  TORCH_CHECK(!grad.is_sparse(), where(p, group, index),
              " has a sparse gradient, which AdamW does not support; use torch::optim::SparseAdam");
  TORCH_CHECK(grad.scalar_type() == p.scalar_type() && grad.device() == p.device(),
              where(p, group, index), " has a gradient of ", grad.scalar_type(), " on ",
              grad.device(), "; AdamW needs both in one dtype on one device: cast the gradient");
}

}  // namespace

#if FSDP_FUSED_ADAMW
namespace {

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;
using StateMap =
    std::remove_reference_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;

// One kernel launch: the parameters of one group on one device in one dtype.
struct FusedLaunch {
  c10::Device device;
  at::ScalarType dtype;
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
  std::vector<AdamWParamState*> states;
  std::vector<detail::DeviceStepCounts::Count*> counts;
};

FusedLaunch& launch_for(std::vector<FusedLaunch>& launches, const at::Tensor& param) {
  for (auto& launch : launches) {
    if (launch.device == param.device() && launch.dtype == param.scalar_type()) return launch;
  }
  launches.push_back(
      FusedLaunch{param.device(), param.scalar_type(), {}, {}, {}, {}, {}, {}, {}, {}});
  return launches.back();
}

// What the kernel needs of a parameter, beyond check_gradient.
void check_fusable(const at::Tensor& p, size_t group, size_t index) {
  TORCH_CHECK(p.device().is_cpu() || p.device().is_cuda(), where(p, group, index),
              ": the fused kernel runs on CPU and CUDA only; use torch::optim::AdamW for it");
  TORCH_CHECK(at::isFloatingType(p.scalar_type()), where(p, group, index),
              ": AdamW needs floating-point parameters");
  TORCH_CHECK(p.is_contiguous(), where(p, group, index),
              " is not contiguous, and the fused kernel walks it as one run; pass a contiguous "
              "parameter, or use torch::optim::AdamW");
}

// The state of `p`, created as torch::optim::AdamW creates it on its first step.
AdamWParamState& state_of(StateMap& state, const at::Tensor& p, const AdamWOptions& options) {
  const auto key = compat::optimizer_state_key(state, p);
  auto it = state.find(key);
  if (it == state.end()) {
    auto fresh = std::make_unique<AdamWParamState>();
    fresh->step(0);
    fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
    fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    if (options.amsgrad()) fresh->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    it = state.insert({key, std::move(fresh)}).first;
  }
  auto* typed = dynamic_cast<AdamWParamState*>(it->second.get());
  TORCH_INTERNAL_ASSERT(typed, "FusedAdamW holds a state that is not an AdamWParamState");
  return *typed;
}

// A state tensor the kernel updates in place alongside `p`.
void check_state_tensor(const at::Tensor& t, const char* name, const at::Tensor& p, size_t group,
                        size_t index) {
  TORCH_CHECK(
      t.defined(), "fsdp::FusedAdamW: parameter ", index, " of group ", group,
      " has a state without ", name,
      (std::string(name) == "max_exp_avg_sq"
           ? " while its group has amsgrad on; load a state saved with amsgrad, or turn it off"
           : "; load a complete AdamW state"));
  TORCH_CHECK(
      t.sizes() == p.sizes() && t.scalar_type() == p.scalar_type() && t.device() == p.device() &&
          t.is_contiguous(),
      "fsdp::FusedAdamW: the ", name, " of parameter ", index, " of group ", group, " is ",
      t.sizes(), ", ", t.scalar_type(), " on ", t.device(), " but the parameter is ", p.sizes(),
      ", ", p.scalar_type(), " on ", p.device(),
      "; load a state made for this parameter (contiguous, of its shape, dtype and device)");
}

// The launches of one parameter group: every parameter with a gradient, its
// state (created on its first step) and its device step count.
std::vector<FusedLaunch> collect_launches(const std::vector<at::Tensor>& params, size_t group,
                                          const AdamWOptions& options, StateMap& state,
                                          detail::DeviceStepCounts& device_steps) {
  std::vector<FusedLaunch> launches;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    if (!p.grad().defined()) continue;
    check_gradient(p, p.grad(), group, i);
    check_fusable(p, group, i);
    AdamWParamState& s = state_of(state, p, options);
    check_state_tensor(s.exp_avg(), "exp_avg", p, group, i);
    check_state_tensor(s.exp_avg_sq(), "exp_avg_sq", p, group, i);
    FusedLaunch& launch = launch_for(launches, p);
    if (options.amsgrad()) {
      check_state_tensor(s.max_exp_avg_sq(), "max_exp_avg_sq", p, group, i);
      launch.max_exp_avg_sqs.push_back(s.max_exp_avg_sq());
    }
    launch.params.push_back(p);
    launch.grads.push_back(p.grad().contiguous());  // a view of a contiguous grad: no copy
    launch.exp_avgs.push_back(s.exp_avg());
    launch.exp_avg_sqs.push_back(s.exp_avg_sq());
    auto& count = device_steps.for_param(p, s.step());
    launch.steps.push_back(count.on_device);
    launch.counts.push_back(&count);
    launch.states.push_back(&s);
  }
  return launches;
}

// Steps the counts (device and host), then the parameters and moments.
// See [Note: fused AdamW step counts].
void run_launch(FusedLaunch& launch, const AdamWOptions& options, bool maximize) {
  at::_foreach_add_(launch.steps, 1);
  for (auto* count : launch.counts) ++count->value;
  const auto betas = options.betas();
  at::_fused_adamw_(launch.params, launch.grads, launch.exp_avgs, launch.exp_avg_sqs,
                    launch.max_exp_avg_sqs, launch.steps, options.lr(), std::get<0>(betas),
                    std::get<1>(betas), options.weight_decay(), options.eps(), options.amsgrad(),
                    maximize);
  for (auto* state : launch.states) state->step(state->step() + 1);
}

}  // namespace
#endif  // FSDP_FUSED_ADAMW

FusedAdamW::FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                       torch::optim::AdamWOptions defaults, bool maximize)
    : torch::optim::AdamW(std::move(param_groups), std::move(defaults)),
      maximize_(maximize),
      device_steps_(std::make_unique<detail::DeviceStepCounts>()) {}

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults,
                       bool maximize)
    : FusedAdamW(std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(
                     std::move(params))},
                 std::move(defaults), maximize) {}

FusedAdamW::~FusedAdamW() = default;

bool FusedAdamW::fused_kernel_available() { return FSDP_FUSED_ADAMW != 0; }

at::Tensor FusedAdamW::step(LossClosure closure) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  at::NoGradGuard no_grad;
  if (fused_kernel_available()) {
    fused_step();
  } else {
    for_loop_step();
  }
  return loss;
}

void FusedAdamW::fused_step() {
#if FSDP_FUSED_ADAMW
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    auto& group = param_groups_[g];
    const auto& options = static_cast<const AdamWOptions&>(group.options());
    for (FusedLaunch& launch :
         collect_launches(group.params(), g, options, state_, *device_steps_)) {
      run_launch(launch, options, maximize_);
    }
  }
#else
  TORCH_INTERNAL_ASSERT(false, "FusedAdamW::fused_step without at::_fused_adamw_");
#endif
}

// torch::optim::AdamW has no maximize; ascending is descending on -grad, and
// negating is exact, so the gradients are negated around its step and back.
void FusedAdamW::for_loop_step() {
  std::vector<at::Tensor> negated;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& params = param_groups_[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].grad().defined()) continue;
      check_gradient(params[i], params[i].grad(), g, i);
      if (maximize_) negated.push_back(params[i].grad());
    }
  }
  for (auto& grad : negated) grad.neg_();
  try {
    torch::optim::AdamW::step(nullptr);
  } catch (...) {
    for (auto& grad : negated) grad.neg_();
    throw;
  }
  for (auto& grad : negated) grad.neg_();
}

}  // namespace fsdp
