#include "harness/switch_cases.h"

#include <algorithm>

#include "harness/parity.h"

namespace fsdp::testing::switches {

at::Tensor global_count_loss(const at::Tensor& out, const at::Tensor& target) {
  return (out - target).pow(2).sum() / kRows;
}

Data make_data() {
  at::manual_seed(341);
  return {at::randn({kMicro, kRows, 7}, at::kDouble), at::randn({kMicro, kRows, 3}, at::kDouble)};
}

Mlp make_initial() {
  at::manual_seed(342);
  Mlp initial(7, 10, 3, /*units=*/true);
  initial->to(at::kDouble);
  return initial;
}

Mlp reference_after(const Mlp& initial, const Data& data, int micro) {
  Mlp reference(7, 10, 3, true);
  reference->to(at::kDouble);
  copy_state(*reference, *initial);
  for (int m = 0; m < micro; ++m) {
    (global_count_loss(reference->forward(data.x[m]), data.y[m]) / micro).backward();
  }
  return reference;
}

Mlp local_copy(const Mlp& initial) {
  Mlp local(7, 10, 3, true);
  local->to(at::kDouble);
  copy_state(*local, *initial);
  return local;
}

void expect_grads_match(const UnitModule& root, torch::nn::Module& reference,
                        const std::function<at::Tensor(const at::Tensor&)>& expected_of,
                        const std::string& who) {
  auto ref_params = reference.named_parameters();
  for (const auto& shard : param_shards(root)) {
    if (shard.numel == 0) continue;
    const at::Tensor expected_full = expected_of(ref_params[shard.name].grad());
    at::Tensor expected = expected_full.reshape(-1).narrow(0, shard.flat_begin, shard.numel);
    const at::Tensor& grad = shard.param.grad();
    ASSERT_TRUE(grad.defined()) << who << ": " << shard.name << " has no gradient";
    const double scale = std::max(expected_full.abs().max().item<double>(), 1e-12);
    const double diff = (grad.reshape(-1) - expected).abs().max().item<double>();
    EXPECT_LE(diff / scale, kSwitchRtol) << who << ": gradient of " << shard.name << " differs by "
                                         << diff << " (largest element " << scale << ")";
  }
}

UnitModule& nested_unit(const Mlp& local, size_t index) {
  auto* unit = dynamic_cast<UnitModule*>(local->layers->ptr(index).get());
  TORCH_CHECK(unit != nullptr, "layers.", index, " is not a unit");
  return *unit;
}

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  return std::string(fsdp::to_string(info.param.strategy)) + "_ws" +
         std::to_string(info.param.world_size);
}

void PrintTo(const Layout& layout, std::ostream* os) { *os << layout_name({layout, 0}); }

bool is_hybrid(ShardingStrategy strategy) {
  return strategy == ShardingStrategy::kHybridShard ||
         strategy == ShardingStrategy::kHybridShardZero2;
}

FullyShardOptions options_for(const Layout& layout, RankContext& ctx) {
  if (is_hybrid(layout.strategy)) {
    return FullyShardOptions(make_hybrid_mesh(ctx.group, 2)).strategy(layout.strategy);
  }
  return FullyShardOptions(ctx.group).strategy(layout.strategy);
}

ProcessGroup& shard_group(const FullyShardOptions& options, RankContext& ctx) {
  return options.mesh() ? *options.mesh()->shard : *ctx.group;
}

}  // namespace fsdp::testing::switches
