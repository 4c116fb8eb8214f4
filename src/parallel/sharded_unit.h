// ShardedUnit owns everything about one FlatParam's communication (FSDP2's FSDPParamGroup): the all-gather
// of the full parameter before use (prefetchable), its release, the accumulation of the full gradient over
// the unit's call sites, and the asynchronous reduce-scatter over `shard` (+ all-reduce over `replica`)
// into the master shard's gradient. Nothing else touches these buffers.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "parallel/flat_param.h"

namespace fedshard::parallel {

struct ShardingOptions {
  at::ScalarType master_dtype = at::kFloat;   // master weights, optimizer state, gradient reduction
  at::ScalarType compute_dtype = at::kFloat;  // gathered parameters and activations
  bool recompute = true;                      // per-unit activation checkpointing
  bool reshard_after_forward = true;          // free gathered params after forward (re-gather in backward)
  at::Device device = at::kCPU;               // where shards, gathers and compute live
};

class ShardedUnit {
 public:
  ShardedUnit(std::unique_ptr<FlatParam> flat, comm::Communicator& shard, comm::Communicator& replica,
              const ShardingOptions& opts, int call_sites);

  FlatParam& flat() { return *flat_; }
  const ShardingOptions& options() const { return opts_; }

  // Starts the all-gather if the full parameter is neither gathered nor in flight.
  void prefetch();
  // The full parameter in compute dtype (waits for the gather, issuing it if needed).
  const at::Tensor& full();
  void free();
  bool gathered() const { return full_.defined(); }

  // Call-site bookkeeping for one training step (a tied weight's unit runs at several call sites).
  // Returns true when the parameter may be freed after this forward call.
  bool forward_done(bool training);
  // Adds one call site's full gradient; after the last call site, launches the reduction and frees.
  void backward_done(const at::Tensor& full_grad);
  // Waits for the reduction: flat().grad() then holds the averaged gradient of this rank's shard.
  void wait_grad();

 private:
  std::unique_ptr<FlatParam> flat_;
  comm::Communicator& shard_comm_;
  comm::Communicator& replica_comm_;
  ShardingOptions opts_;
  int call_sites_;
  int forward_calls_ = 0;
  int backward_calls_ = 0;
  at::Tensor full_;
  comm::WorkHandle gather_;
  at::Tensor grad_accum_;
  std::vector<comm::WorkHandle> reductions_;
};

}  // namespace fedshard::parallel
