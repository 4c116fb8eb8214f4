// FedAvg-style aggregation across federation groups (DESIGN.md "Federation"). Every rank owns a disjoint
// slice of its group's model (the Layout's slice_range: piece i of R_g of its shard; the whole shard under
// FL+FSDP, piece p of the model under FL+DDP). Groups may differ in size, so their slices need not line up:
// the Layout cuts the model into segments, each held by one rank of every group, and a sync averages each
// segment over the communicator of its owners (weighted by tokens), lets the outer optimizer turn the mean
// into the new global slice, and all-gathers the slices over `replica` so every replica holds the new shard.
// Every element crosses groups once per round, as in a ring all-reduce of the model among G parties.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/topology.h"
#include "federation/outer_optimizer.h"
#include "optim/optimizer.h"
#include "parallel/sharded_model.h"

namespace fedshard::federation {

struct FederationOptions {
  OuterOptions outer;
  std::string inner_state = "keep";  // keep | average | reset: the inner optimizer's state after a sync
  // The model average on the wire (parallel.reduce_dtype); Undefined: the master dtype. Optimizer state
  // (inner_state = average) always travels in the master dtype.
  at::ScalarType reduce_dtype = at::ScalarType::Undefined;
};

class Aggregator {
 public:
  Aggregator(parallel::ShardedModel& model, comm::Topology& topo, optim::Optimizer& inner,
             const FederationOptions& opts);

  // Collective over the world. weight: this group's share, e.g. tokens it processed since the last sync.
  // stop: this group wants the job to stop (agreed inside the group); returns whether any group does, the
  // same on every rank.
  bool sync(double weight, bool stop = false);

  OuterOptimizer& outer() { return *outer_; }

 private:
  // This rank's aggregation slice of a unit's shard-sized tensor.
  at::Tensor slice_of(size_t unit, const at::Tensor& shard) const;
  // Weighted mean over the groups of the slices of `tensors` (summed in `wire` dtype, segment by segment),
  // through the outer optimizer when outer_step, then the slices all-gathered over `replica`. Collectives
  // for all units are in flight together.
  void average(const std::vector<at::Tensor>& tensors, double scale, bool outer_step, at::ScalarType wire);

  parallel::ShardedModel& model_;
  comm::Topology& topo_;
  optim::Optimizer& inner_;
  FederationOptions opts_;
  std::unique_ptr<OuterOptimizer> outer_;
};

}  // namespace fedshard::federation
