// FedAvg-style aggregation across federation groups (DESIGN.md "Federation"). Every rank owns a disjoint
// slice of its group's model: piece i (its replica index) of R of its shard, which is the whole shard under
// FL+FSDP (R = 1), piece i of shard h under FL+HSDP and piece p of the full model under FL+DDP (H = 1). A sync
// averages each slice over `cross` (weighted by tokens), lets the outer optimizer turn the mean into the new
// global slice, and all-gathers the pieces over `replica` so every replica holds the new shard. Inter-group
// traffic is R times less than averaging whole shards on every replica.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/topology.h"
#include "federation/outer_optimizer.h"
#include "parallel/sharded_model.h"
#include "train/optimizer.h"

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
  Aggregator(parallel::ShardedModel& model, comm::Topology& topo, train::Optimizer& inner,
             const FederationOptions& opts);

  // Collective over the world. weight: this group's share, e.g. tokens it processed since the last sync.
  void sync(double weight);

  OuterOptimizer& outer() { return *outer_; }
  int64_t syncs() const { return syncs_; }
  void set_syncs(int64_t n) { syncs_ = n; }

 private:
  at::Tensor slice_of(const at::Tensor& shard) const;
  // Weighted mean over `cross` of the slices of `tensors` (summed in `wire` dtype), through the outer
  // optimizer when outer_step, then the pieces all-gathered over `replica`. Collectives for all units are in
  // flight together.
  void average(const std::vector<at::Tensor>& tensors, double scale, bool outer_step, at::ScalarType wire);

  parallel::ShardedModel& model_;
  comm::Topology& topo_;
  train::Optimizer& inner_;
  FederationOptions opts_;
  std::unique_ptr<OuterOptimizer> outer_;
  int64_t syncs_ = 0;
};

}  // namespace fedshard::federation
