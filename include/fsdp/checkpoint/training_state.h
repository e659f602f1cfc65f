#pragma once
// Saving and loading a sharded model and its optimizer: the bridge between
// fully_shard's shards and the distributed checkpoint format.
//
//   fsdp::ckpt::SaveOptions options;
//   options.step = 100;
//   options.extras_json = R"({"data_position": 12800})";
//   fsdp::ckpt::save_training_state(*world, "runs/x/step_100", *model, &opt, options);
//   auto info = fsdp::ckpt::load_training_state(*world, "runs/x/step_100",
//                                               *model, &opt);
//
// Each parameter is stored under its original name at its full shape; each
// rank writes the flat range it holds. Optimizer state is stored under
// "optim/<param name>/<field>" (the fields of fsdp/optim_state_dict.h:
// AdamW/Adam exp_avg, exp_avg_sq, ..., step; SGD momentum_buffer; Adagrad
// sum, step; RMSprop square_avg, ...), sharded exactly
// like its parameter. Buffers are written
// once, by rank 0. Loading works at any world size: each rank reads only the
// ranges its shards cover.

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/checkpoint/save.h"
#include "fsdp/sharded.h"

namespace torch::optim {
class Optimizer;
}

namespace fsdp::ckpt {

// This rank's pieces of the model (parameters; buffers on rank 0) and, if
// `optimizer` is given, of its state.
std::vector<TensorPiece> training_state_pieces(const UnitModule& root,
                                               const torch::optim::Optimizer* optimizer);

// Collective: every rank must call it. Throws on every rank if any rank fails.
void save_training_state(ProcessGroup& group, const std::string& dir, const UnitModule& root,
                         const torch::optim::Optimizer* optimizer, const SaveOptions& options = {});

struct LoadResult {
  int64_t step = 0;
  std::string extras_json = "{}";  // SaveOptions::extras_json of the save, as compact JSON text
  int saved_world_size = 0;
};

// Collective. Fills the local shards of `root` and, if given, the optimizer's
// state (created if the optimizer has not stepped yet). `strict`: every
// expected tensor must be present with its shape and dtype, and none extra;
// all problems are reported at once, by name.
LoadResult load_training_state(ProcessGroup& group, const std::string& dir, UnitModule& root,
                               torch::optim::Optimizer* optimizer, bool strict = true);

}  // namespace fsdp::ckpt
