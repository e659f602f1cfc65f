// LibTorch's containers as units and as roots: a Sequential root, Sequential
// units (Sequential's forward is a template; the unit takes and returns one
// tensor), and units held in ModuleList and ModuleDict members. Each trains
// like one process on the same global batch.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "fsdp/fsdp.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kBatch = 6;  // divisible by 2 and 3
constexpr double kLossRtol = 1e-5;
constexpr double kParamTol = 1e-5;

// The reference's stand-in for a Sequential unit: LibTorch cannot hold a
// plain Sequential inside a Sequential (its forward is a template), which is
// what the unit makes possible. Same children, same parameter names.
class PlainSequentialImpl : public torch::nn::Module {
 public:
  explicit PlainSequentialImpl(torch::nn::Sequential inner) : inner_(std::move(inner)) {
    for (const auto& child : inner_->named_children()) register_module(child.key(), child.value());
  }
  at::Tensor forward(const at::Tensor& x) { return inner_->forward(x); }

 private:
  torch::nn::Sequential inner_;
};
TORCH_MODULE(PlainSequential);

// Linear -> ReLU -> [Linear -> Tanh] -> Linear; the two inner parts are
// units when `units` is true.
torch::nn::Sequential make_sequential(bool units) {
  torch::nn::Linear first(8, 16);
  torch::nn::Sequential middle(torch::nn::Linear(16, 16), torch::nn::Tanh());
  if (!units) {
    return torch::nn::Sequential(first, torch::nn::ReLU(), PlainSequential(middle),
                                 torch::nn::Linear(16, 4));
  }
  return torch::nn::Sequential(Sharded<torch::nn::Linear>(first), torch::nn::ReLU(),
                               Sharded<torch::nn::Sequential>(middle), torch::nn::Linear(16, 4));
}

// Units reached through a ModuleList and a ModuleDict.
class ContainersImpl : public torch::nn::Module {
 public:
  explicit ContainersImpl(bool units) {
    list = register_module("list", torch::nn::ModuleList());
    dict = register_module("dict", torch::nn::ModuleDict());
    for (int i = 0; i < 2; ++i) {
      torch::nn::Linear layer(8, 8);
      if (units) {
        list->push_back(Sharded<torch::nn::Linear>(layer));
      } else {
        list->push_back(layer);
      }
    }
    torch::nn::Linear head(8, 4);
    std::shared_ptr<torch::nn::Module> member = head.ptr();
    if (units) member = Sharded<torch::nn::Linear>(head).ptr();
    dict->update({{"head", member}});
  }
  at::Tensor forward(at::Tensor x) {
    for (const auto& layer : *list) x = torch::relu(call(*layer, x));
    return call(*(*dict)["head"], x);
  }

  torch::nn::ModuleList list{nullptr};
  torch::nn::ModuleDict dict{nullptr};

 private:
  // A member is a Linear or a unit wrapping one.
  static at::Tensor call(torch::nn::Module& member, const at::Tensor& x) {
    if (auto* unit = member.as<ShardedImpl<torch::nn::LinearImpl>>()) return unit->forward(x);
    return member.as<torch::nn::LinearImpl>()->forward(x);
  }
};
TORCH_MODULE(Containers);

template <class Holder>
void expect_trains_like_one_process(int world_size, size_t units_with_root,
                                    const std::function<Holder(bool)>& make) {
  at::manual_seed(77);
  Holder reference = make(false);
  Holder initial = make(true);
  copy_state(*initial, *reference);
  at::Tensor inputs = at::randn({kSteps, kBatch, 8});
  at::Tensor targets = at::randn({kSteps, kBatch, 4});
  auto ref_opt = make_optimizer(OptimizerKind::kSgdMomentum, reference->parameters());
  const auto ref_losses = train_steps(*ref_opt, kSteps, [&](int s) {
    return at::mse_loss(reference->forward(inputs[s]), targets[s]);
  });
  run_ranks(world_size, [&](RankContext& ctx) {
    Holder local = make(true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, model->parameters());
    const auto losses = train_steps(*opt, kSteps, [&](int s) {
      at::Tensor x = local_rows(inputs[s], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(targets[s], ctx.rank, ctx.world_size);
      return at::mse_loss(model->forward(x), y);
    });
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_LE(relative_diff(global_mean(*ctx.group, losses[s]), ref_losses[s]), kLossRtol)
          << "rank " << ctx.rank << " step " << s;
    }
    expect_shards_match(*model, *reference, kParamTol, kParamTol, "rank " + std::to_string(ctx.rank));
    EXPECT_EQ(unit_infos(*model).size(), units_with_root);
  });
}

TEST(SequentialUnits, SequentialRootWithSequentialAndLinearUnitsTrainsLikeOneProcess) {
  for (int ws : {2, 3}) expect_trains_like_one_process<torch::nn::Sequential>(ws, 3, make_sequential);
}

TEST(SequentialUnits, UnitsInModuleListAndModuleDictTrainLikeOneProcess) {
  for (int ws : {2, 3}) {
    expect_trains_like_one_process<Containers>(ws, 4, [](bool units) { return Containers(units); });
  }
}

TEST(SequentialUnits, NamesAreThoseOfThePlainModel) {
  auto plain = make_sequential(false)->named_parameters().keys();
  auto wrapped = make_sequential(true)->named_parameters().keys();
  EXPECT_EQ(wrapped, plain);
}

}  // namespace
}  // namespace fsdp::testing
