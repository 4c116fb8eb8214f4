// Building the training engine of one rank is this one function (torchtitan's `parallelize`): a layout and
// a model config in; the communicators, the model with its sharding plan applied, the inner optimizer over
// the local shards and, under federation, the aggregator out. The trainer and the tests build it the same way.
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

namespace fedshard::train {

struct EngineSpec {
  comm::Layout layout;
  MPI_Comm base = MPI_COMM_WORLD;  // the ranks the layout numbers (the survivors of a lost group: comm/survivors.h)
  comm::TopologySpec topology;
  model::ModelConfig model;
  parallel::ShardingOptions sharding;
  optim::OptimizerConfig optimizer;
  bool decay_norms_and_embeddings = true;  // false: no weight decay on norm weights and the embedding
  std::optional<federation::FederationOptions> federation;  // fl-* only
  // Parameter values: loaded (e.g. from a Hugging Face checkpoint) when set, else random from `seed`.
  parallel::ShardedModel::Initializer init;
  uint64_t seed = 0;
};

struct Engine {
  std::unique_ptr<comm::Topology> topo;
  std::unique_ptr<model::Llama> model;
  std::unique_ptr<parallel::ShardedModel> sharded;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<federation::Aggregator> aggregator;  // fl-* only
};

// Collective over spec.base.
Engine parallelize(const EngineSpec& spec);

// One rank's training state, defined once: checkpoints save and restore it, the hand-over after a lost group
// copies it, a rejoin sends it and the audit sums it. Per unit, in order: its master shard ("param"), its inner
// optimizer's state ("opt.NAME"), and under federation its outer optimizer's ("outer.NAME") and its aggregator's
// ("fed.NAME"; those of a round in flight only once it is settled); the optimizer's step counts beside them
// (optim::Optimizer::steps and slice_steps).
struct StateTensor {
  size_t unit = 0;
  std::string key;    // its name within the unit, as checkpoints store it (train/checkpoint.h: "uU.KEY")
  at::Tensor tensor;  // the live tensor; an aggregator's is a view that set_state writes back through
};
std::vector<StateTensor> rank_state(parallel::ShardedModel& sharded, optim::Optimizer& inner,
                                    federation::Aggregator* agg);
// Writes `value` into state tensor s (the aggregator's own state through Aggregator::restore_state).
void set_state(const StateTensor& s, const at::Tensor& value, federation::Aggregator* agg);

// Copies this rank's training state (rank_state and the step counts) from one engine into another whose rank
// holds the same shards and slices: a group that goes on after other groups were lost keeps its geometry.
// Local; a round in flight in `from` must have been abandoned (federation::Aggregator::abandon_round).
void hand_over(Engine& from, Engine& to);

// The same state over MPI, from a rank of one group to the rank at the same position of a group that joins
// (Trainer::rejoin): point to point over comm, every tensor as its bytes. The two engines were built from the
// same spec, so their state has the same tensors in the same order; no round may be in flight. Each returns
// the bytes it moved: handed to MPI_Send, or as MPI_Recv's statuses count them.
int64_t send_state(Engine& from, MPI_Comm comm, int dest);
int64_t receive_state(Engine& to, MPI_Comm comm, int source);
// The sum of every state tensor's 32-bit words and the step counts (federation.audit): equal on two ranks that
// hold the same state.
int64_t state_checksum(Engine& e);

}  // namespace fedshard::train
