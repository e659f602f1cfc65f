// examples/train_mlp.cpp: the "Using libfsdp in your model" example of the
// README, complete. A small regression MLP whose two hidden layers are FSDP
// units; the output layer belongs to the root unit.
//
//   build/bin/fsdp-run --nproc-per-node 2 --standalone -- build/bin/train_mlp --steps 20
//
// Every rank builds the same model and the same global batch from one seed,
// trains on its rows of it, and prints the global mean loss. The losses are
// those of one process training on the whole batch.

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "fsdp/fsdp.h"

// 1. Mark the units: wrap each submodule that should be gathered and freed
//    on its own in fsdp::Sharded<...>. Nothing else in the model changes, and
//    without fully_shard the wrapper is a plain pass-through.
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t hidden, int64_t out) {
    body = register_module("body", torch::nn::Sequential(
                                       fsdp::Sharded<torch::nn::Linear>(in, hidden),  // unit
                                       torch::nn::GELU(),
                                       fsdp::Sharded<torch::nn::Linear>(hidden, hidden),  // unit
                                       torch::nn::GELU()));
    head = register_module("head", torch::nn::Linear(hidden, out));  // in the root unit
  }
  at::Tensor forward(const at::Tensor& x) { return head->forward(body->forward(x)); }

  torch::nn::Sequential body{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Mlp);

int main(int argc, char** argv) {
  int steps = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  try {
    // 2. Join the job the launcher (fsdp-run, torchrun, mpirun, srun) started.
    fsdp::ProcessGroupPtr world = fsdp::init_process_group_from_env();
    const int rank = world->rank();
    const int world_size = world->size();

    // 3. Build the same model on every rank, then shard it. fully_shard
    //    returns the root unit; each rank now holds 1/N of every parameter.
    at::manual_seed(0);
    auto model = fsdp::fully_shard(Mlp(16, 64, 4), fsdp::FullyShardOptions(world));

    // 4. Build the optimizer after sharding, over the model's parameters:
    //    it steps the local shards, and its state is 1/N-sized too.
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));

    // A fixed regression problem, the same on every rank.
    at::manual_seed(1);
    const int64_t global_batch = 64;
    at::Tensor x = at::randn({global_batch, 16});
    at::Tensor w = at::randn({16, 4});
    at::Tensor y = at::tanh(x.matmul(w));
    TORCH_CHECK(global_batch % world_size == 0, "the batch of ", global_batch,
                " does not split over ", world_size, " ranks");
    const int64_t rows = global_batch / world_size;
    at::Tensor local_x = x.narrow(0, rank * rows, rows);
    at::Tensor local_y = y.narrow(0, rank * rows, rows);

    for (int step = 0; step < steps; ++step) {
      // 5. Train as usual: forward gathers each unit and frees it after,
      //    backward re-gathers and reduce-scatters the gradients, and each
      //    parameter's .grad() is left as its shard's gradient.
      at::Tensor loss = at::mse_loss(model->forward(local_x), local_y);
      opt.zero_grad();
      loss.backward();
      fsdp::clip_grad_norm_(*model, 1.0);  // collective: every rank calls it
      opt.step();

      at::Tensor global_loss = loss.detach().clone();
      world->all_reduce(global_loss, fsdp::ReduceOp::kSum)->wait();
      if (rank == 0) {
        std::printf("step %d loss %.7f\n", step, global_loss.item<double>() / world_size);
      }
    }
    if (rank == 0) {
      const fsdp::MemoryStats stats = fsdp::memory_stats(*model);
      std::printf("rank 0 holds %lld of %lld parameter bytes\n",
                  static_cast<long long>(stats.sharded_param_bytes),
                  static_cast<long long>(stats.unsharded_param_bytes));
    }
    return 0;
  } catch (const std::exception& e) {
    // Not e.what(): a c10::Error's what() appends a C++ backtrace.
    std::fprintf(stderr, "train_mlp: %s\n", fsdp::error_message(e).c_str());
    return 1;
  }
}
