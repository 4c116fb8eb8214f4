// The training engine as the trainer builds it (train::parallelize), driven with explicit batches so tests
// can compare it with the single-process reference.
#pragma once

#include <memory>
#include <string>

#include "comm/mpi_runtime.h"
#include "parallel/strategy.h"
#include "train/engine.h"

namespace fedshard::fixture {

// Equal groups: S ranks per group (0 = the world), H per shard (0 = the group), emulated nodes (0 = detect).
struct Sizes {
  int group_size = 0, shard_size = 0, ranks_per_node = 0;
};

struct Engine : train::Engine {
  Engine(const model::ModelConfig& cfg, comm::Layout layout, parallel::ShardingOptions opts,
         const std::string& optimizer = "adamw", bool federated = false, federation::FederationOptions fed = {},
         int ranks_per_node = 0) {
    train::EngineSpec spec;
    spec.layout = std::move(layout);
    spec.topology.ranks_per_node = ranks_per_node;
    spec.model = cfg;
    spec.sharding = opts;
    spec.optimizer.name = optimizer;
    if (federated) spec.federation = fed;
    spec.seed = 5;
    static_cast<train::Engine&>(*this) = train::parallelize(spec);
  }
  Engine(const model::ModelConfig& cfg, Sizes s, parallel::ShardingOptions opts, const std::string& optimizer = "adamw",
         bool federated = false, federation::FederationOptions fed = {})
      : Engine(cfg, comm::Layout::uniform(comm::MpiRuntime::get().world_size(), s.group_size, s.shard_size), opts,
               optimizer, federated, fed, s.ranks_per_node) {}

  // One step on this rank's rows of `batch`: rows [row0, row0 + rows). Returns the loss averaged over `mean_over`.
  double step(const at::Tensor& batch, int64_t row0, int64_t rows, double lr, double max_norm,
              comm::Communicator& mean_over) {
    const int64_t t = batch.size(1) - 1;
    auto local = batch.narrow(0, row0, rows);
    auto loss = sharded->loss(local.narrow(1, 0, t), local.narrow(1, 1, t));
    loss.backward();
    sharded->wait_grads();
    sharded->clip_grad_norm(max_norm);
    optimizer->step(lr);
    auto l = loss.detach().to(at::kDouble).reshape({1}).clone();
    mean_over.all_reduce(l, comm::ReduceOp::Mean, comm::Traffic::Control)->wait();
    return l.item<double>();
  }
};

inline double max_abs_diff(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  double worst = 0;
  for (const auto& [name, t] : b)
    worst = std::max(worst, (a.at(name).to(at::kDouble) - t.to(at::kDouble)).abs().max().item<double>());
  return worst;
}

}  // namespace fedshard::fixture
