// A sharded (and optionally federated) training engine assembled from the real parts, driven with explicit
// batches so tests can compare it with the single-process reference.
#pragma once

#include <memory>
#include <string>

#include "comm/mpi_runtime.h"
#include "comm/topology.h"
#include "federation/aggregator.h"
#include "model/llama.h"
#include "parallel/sharded_model.h"
#include "train/optimizer.h"

namespace fedshard::fixture {

struct Engine {
  std::unique_ptr<comm::Topology> topo;
  std::unique_ptr<model::Llama> model;
  std::unique_ptr<parallel::ShardedModel> sharded;
  std::unique_ptr<train::Optimizer> opt;
  std::unique_ptr<federation::Aggregator> agg;

  Engine(const model::ModelConfig& cfg, comm::TopologySpec spec, parallel::ShardingOptions opts,
         const std::string& optimizer = "adamw", bool federated = false,
         federation::FederationOptions fed = {}) {
    topo = std::make_unique<comm::Topology>(spec);
    model = std::make_unique<model::Llama>(cfg, opts.master_dtype, /*materialize=*/false);
    sharded = std::make_unique<parallel::ShardedModel>(*model, topo->shard(), topo->replica(), opts,
                                                       topo->layout().group_size, /*seed=*/5);
    std::vector<train::ParamSlice> slices;
    for (auto& u : sharded->units()) slices.push_back({u->flat().shard(), u->flat().grad(), at::Tensor()});
    train::OptimizerConfig oc;
    oc.name = optimizer;
    opt = train::make_optimizer(oc, slices);
    if (federated) agg = std::make_unique<federation::Aggregator>(*sharded, *topo, *opt, fed);
  }

  // One step on this rank's rows of `batch`: rows [row0, row0 + rows). Returns the loss averaged over `mean_over`.
  double step(const at::Tensor& batch, int64_t row0, int64_t rows, double lr, double max_norm,
              comm::Communicator& mean_over) {
    const int64_t t = batch.size(1) - 1;
    auto local = batch.narrow(0, row0, rows);
    auto logits = sharded->forward(local.narrow(1, 0, t));
    auto loss = model::next_token_loss(logits, local.narrow(1, 1, t));
    loss.backward();
    sharded->wait_grads();
    sharded->clip_grad_norm(max_norm);
    opt->step(lr);
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
