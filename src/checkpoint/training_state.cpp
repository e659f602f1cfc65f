#include "fsdp/checkpoint/training_state.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <map>
#include <set>

#include "checkpoint/error_cause.h"
#include "checkpoint/index.h"
#include "checkpoint/verdict.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/strict_check.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/introspection.h"
#include "root_state.h"
#include "state_dict/optimizer_fields.h"
#include "unit_module_access.h"

namespace fsdp::ckpt {
namespace {

std::string state_name(const std::string& param, const std::string& field) {
  return optimizer_entry_name(param, field);
}

bool is_optimizer_entry(const std::string& name) { return optimizer_entry_param(name).has_value(); }

TensorPiece piece_of(const std::string& name, const ParamShard& shard, const at::Tensor& data) {
  return TensorPiece{name, shard.full_shape, data.scalar_type(), shard.flat_begin,
                     data.detach().reshape(-1)};
}

}  // namespace

std::vector<TensorPiece> training_state_pieces(const UnitModule& root,
                                               const torch::optim::Optimizer* optimizer) {
  fsdp::detail::RootState& state = fsdp::detail::root_state_of(root, "save_training_state");
  std::vector<TensorPiece> pieces;
  const auto shards = param_shards(root);
  const bool rank0 = state.world().rank() == 0;
  for (const auto& shard : shards) {
    if (!shard.primary) continue;
    pieces.push_back(piece_of(shard.name, shard, shard.param));
    if (!optimizer) continue;
    fsdp::detail::OptimizerFields fields;
    if (!fsdp::detail::read_optimizer_state(*optimizer, shard.param, &fields)) continue;
    for (const auto& f : fields.tensors) {
      pieces.push_back(piece_of(state_name(shard.name, f.first), shard, f.second));
    }
    if (fields.step >= 0 && rank0) {
      pieces.push_back(TensorPiece{state_name(shard.name, "step"), {}, at::kLong, 0,
                                   at::full({1}, fields.step, at::kLong)});
    }
  }
  if (rank0) {
    for (const auto& buffer : root.named_buffers()) {
      pieces.push_back(TensorPiece{buffer.key(), buffer.value().sizes().vec(),
                                   buffer.value().scalar_type(), 0,
                                   buffer.value().detach().reshape(-1)});
    }
  }
  return pieces;
}

void save_training_state(ProcessGroup& group, const std::string& dir, const UnitModule& root,
                         const torch::optim::Optimizer* optimizer, const SaveOptions& options) {
  save(group, dir, training_state_pieces(root, optimizer), options);
}

namespace {

// What `root` expects of a checkpoint, by name: its parameters and buffers,
// plus every optimizer entry `reader` has (loading the weights only is a
// normal use, so those are always accepted).
std::map<std::string, ExpectedTensor> expected_tensors(const UnitModule& root,
                                                       const std::vector<ParamShard>& shards,
                                                       const Reader& reader) {
  std::map<std::string, ExpectedTensor> expected;
  for (const auto& shard : shards) expected[shard.name] = {shard.full_shape, shard.param.scalar_type()};
  for (const auto& buffer : root.named_buffers()) {
    expected[buffer.key()] = {buffer.value().sizes().vec(), buffer.value().scalar_type()};
  }
  for (const auto& name : reader.names()) {
    if (is_optimizer_entry(name)) expected[name] = {reader.global_shape(name), reader.dtype(name)};
  }
  return expected;
}

// The optimizer fields the checkpoint holds for `param` ("exp_avg", "step"...).
std::set<std::string> saved_fields(const Reader& reader, const std::string& param) {
  std::set<std::string> fields;
  for (const auto& field : fsdp::detail::optimizer_tensor_fields()) {
    if (reader.contains(state_name(param, field))) fields.insert(field);
  }
  if (reader.contains(state_name(param, "step"))) fields.insert("step");
  return fields;
}

std::string joined(const std::set<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

// [Note: a strict load tells lost optimizer state from none]
// A strict load refuses optimizer state that is only partly there: a
// parameter whose saved fields are a strict subset of what the others have
// (its moments removed, say) would restart those moments silently. A
// parameter with no state at all is fine if it never had any (one that never
// received a gradient), but not if it lost all of it: the index records
// which parameters had state (Index::params_with_optimizer_state), and a
// recorded one with no entries left is refused too. A checkpoint saved before
// that record cannot tell the two apart, and accepts both, as it did.
detail::Verdict check_optimizer_state_complete(const Reader& reader,
                                               const std::vector<ParamShard>& shards) {
  const auto& recorded = reader.index().params_with_optimizer_state;
  const std::set<std::string> had_state =
      recorded ? std::set<std::string>(recorded->begin(), recorded->end())
               : std::set<std::string>{};
  std::set<std::string> all;
  std::map<std::string, std::set<std::string>> by_param;
  for (const auto& shard : shards) {
    by_param[shard.name] = saved_fields(reader, shard.name);
    all.insert(by_param[shard.name].begin(), by_param[shard.name].end());
  }
  std::string problems;
  int count = 0;
  for (const auto& [param, fields] : by_param) {
    const bool lost_all = fields.empty() && had_state.count(param);
    if ((fields.empty() && !lost_all) || fields == all) continue;
    std::set<std::string> missing;
    for (const auto& f : all) {
      if (!fields.count(f)) missing.insert(f);
    }
    if (++count > 10) continue;
    problems += "\n  '" + param + "' lacks " + (missing.empty() ? "its state" : joined(missing));
    if (lost_all) problems += " (all of its state, which the index records it had)";
  }
  if (count == 0) return detail::Verdict::success();
  return detail::Verdict::failure(c10::str(
      "its optimizer state is incomplete for ", count, " parameter", count == 1 ? "" : "s",
      " (the others have ", all.empty() ? "none" : joined(all), "):", problems,
      "\nLoading it would restart that state silently. Resume from a checkpoint whose optimizer "
      "state is whole instead (with fsdp-train: --resume <that checkpoint's dir>, e.g. an earlier "
      "<run dir>/checkpoints/step-*); a program that means to restart that state can call "
      "load_training_state with strict=false"));
}

// Whether `reader` can load into `root` (and an optimizer), and why not.
detail::Verdict check_loadable(const Reader& reader, const UnitModule& root,
                               const std::vector<ParamShard>& shards, bool with_optimizer, bool strict) {
  const auto names = reader.names();
  const bool has_optimizer_state = std::any_of(names.begin(), names.end(), is_optimizer_entry);
  if (with_optimizer && !has_optimizer_state) {
    return detail::Verdict::failure("it holds no optimizer state; pass no optimizer to load the weights only");
  }
  if (strict) {
    const KeyCheck check = compare_keys(reader, expected_tensors(root, shards, reader));
    if (!check.ok()) return detail::Verdict::failure(check.message("it", "the checkpoint"));
    if (with_optimizer) return check_optimizer_state_complete(reader, shards);
  }
  return detail::Verdict::success();
}

void load_model(const Reader& reader, UnitModule& root, const std::vector<ParamShard>& shards) {
  for (const auto& shard : shards) {
    if (shard.numel == 0) continue;
    at::Tensor host = at::empty({shard.numel}, shard.param.options().device(at::kCPU));
    reader.read_into(shard.name, shard.flat_begin, host);
    shard.param.detach().view({-1}).copy_(host);
  }
  for (auto& buffer : root.named_buffers()) {
    if (!reader.contains(buffer.key())) continue;
    buffer.value().copy_(reader.read_full(buffer.key()));
  }
}

void load_optimizer(const Reader& reader, torch::optim::Optimizer& optimizer,
                    const std::vector<ParamShard>& shards) {
  for (const auto& shard : shards) {
    std::map<std::string, at::Tensor> fields;
    for (const auto& field : fsdp::detail::optimizer_tensor_fields()) {
      const std::string name = state_name(shard.name, field);
      if (!reader.contains(name)) continue;
      fields[field] =
          reader.read(name, shard.flat_begin, shard.numel).to(shard.param.device()).view(shard.param.sizes());
    }
    if (fields.empty()) continue;
    const std::string step_name = state_name(shard.name, "step");
    const int64_t step = reader.contains(step_name) ? reader.read_full(step_name).item<int64_t>() : 0;
    fsdp::detail::install_optimizer_state(optimizer, shard.param, fields, step);
  }
}

}  // namespace

LoadResult load_training_state(ProcessGroup& group, const std::string& dir, UnitModule& root,
                               torch::optim::Optimizer* optimizer, bool strict) {
  fsdp::detail::root_state_of(root, "load_training_state");  // throws for any other module
  const auto shards = param_shards(root);
  // Every rank opens and checks the checkpoint; a failure on any rank is
  // reported on all of them, so none is left waiting in a later collective.
  detail::Verdict mine;
  c10::optional<Reader> reader;
  try {
    reader = Reader::open(dir);
    mine = check_loadable(*reader, root, shards, optimizer != nullptr, strict);
  } catch (const std::exception& e) {
    mine = detail::Verdict::failure(detail::error_cause(e));
  }
  const auto verdicts = detail::all_gather_verdicts(group, mine);
  for (size_t r = 0; r < verdicts.size(); ++r) {
    TORCH_CHECK(verdicts[r].ok, "fsdp: loading checkpoint '", dir, "' failed on rank ", r, ": ",
                verdicts[r].message);
  }

  at::NoGradGuard no_grad;
  load_model(*reader, root, shards);
  if (optimizer) load_optimizer(*reader, *optimizer, shards);
  return LoadResult{reader->step(), reader->extras_json(), reader->saved_world_size()};
}

}  // namespace fsdp::ckpt
