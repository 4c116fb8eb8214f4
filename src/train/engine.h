// Building the training engine of one rank is this one function (torchtitan's `parallelize`): a layout and
// a model config in; the communicators, the model with its sharding plan applied, the inner optimizer over
// the local shards and, under federation, the lane its rounds travel (the in-job aggregator, or a site's lane) out. The trainer and the tests build it the same way.
// A rank's state in it: train/rank_state.h.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/topology.h"
#include "federation/aggregator.h"
#include "model/llama.h"
#include "optim/optimizer.h"
#include "parallel/sharded_model.h"
#include "sites/site_options.h"
#include "train/rank_state.h"

namespace fedshard::train {

struct EngineSpec {
  comm::Layout layout;
  MPI_Comm base = MPI_COMM_WORLD;  // the ranks the layout numbers (the survivors of a lost group: comm/survivors.h)
  comm::TopologySpec topology;
  model::ModelConfig model;
  parallel::ShardingOptions sharding;
  optim::OptimizerConfig optimizer;
  bool decay_norms_and_embeddings = true;  // false: no weight decay on norm weights and the embedding
  std::optional<federation::FederationOptions> federation;  // fl-* and sites
  std::optional<sites::SiteOptions> site;  // sites.server: this job is a site, its rounds through the round server
  // Parameter values: loaded (e.g. from a Hugging Face checkpoint) when set, else random from `seed`.
  parallel::ShardedModel::Initializer init;
  uint64_t seed = 0;
};

struct Engine {
  std::unique_ptr<comm::Topology> topo;
  std::unique_ptr<model::Llama> model;
  std::unique_ptr<parallel::ShardedModel> sharded;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<federation::Aggregator> aggregator;  // fl-* only: the in-job lane
  std::unique_ptr<federation::Lane> site;              // a site's lane (sites/site_lane.h)
  // The lane the rounds travel (null without federation).
  federation::Lane* lane() const {
    return aggregator ? aggregator.get() : site.get();
  }
};

// Collective over spec.base.
Engine parallelize(const EngineSpec& spec);

}  // namespace fedshard::train
