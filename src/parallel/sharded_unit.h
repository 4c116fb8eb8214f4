// ShardedUnit owns everything about one FlatParam's communication (FSDP2's FSDPParamGroup): the all-gather
// of the full parameter before use (prefetchable), its release, the accumulation of the full gradient over
// the unit's call sites and over micro-batches, and the asynchronous reduce-scatter over `shard` (+ all-reduce over `replica`)
// into the master shard's gradient. Nothing else touches these buffers.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "parallel/flat_param.h"

namespace fedshard::parallel {

// FSDP2's MixedPrecisionPolicy: param_dtype = compute_dtype, reduce_dtype; master weights and optimizer
// state stay in master_dtype.
struct ShardingOptions {
  at::ScalarType master_dtype = at::kFloat;   // master weights, optimizer state, reduced gradient
  at::ScalarType compute_dtype = at::kFloat;  // gathered parameters and activations
  at::ScalarType reduce_dtype = at::ScalarType::Undefined;  // gradient reductions on the wire; Undefined: master
  at::ScalarType reduce() const { return reduce_dtype == at::ScalarType::Undefined ? master_dtype : reduce_dtype; }
  bool recompute = true;                      // per-unit activation checkpointing
  bool reshard_after_forward = true;          // free gathered params after forward (re-gather in backward)
  at::Device device = at::kCPU;               // where shards, gathers and compute live
  bool gradients = true;                      // false: forward only (eval), no gradient buffer per shard
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
  // Adds one call site's per-entry gradients (FlatParam::flatten's input); after the last call site, launches
  // the reduction in reduce_dtype and frees. Several call sites accumulate in at least float32.
  void backward_done(const std::vector<at::Tensor>& grads);
  // Waits for the reduction: flat().grad() then holds the averaged gradient of this rank's shard.
  void wait_grad();
  // Gradient accumulation (FSDP2's set_requires_gradient_sync): while off, each backward adds the unit's full
  // gradient to a local buffer and reduces nothing; the next backward with sync on reduces the sum once.
  void set_requires_gradient_sync(bool sync) { sync_ = sync; }

 private:
  // This rank's shard in the compute dtype, the all-gather's input. A unit that is gathered again in backward keeps
  // the cast from its forward until its gradient is reduced: the master cannot change in between, and the
  // re-gather then casts nothing (the cast's version check catches an in-place change all the same).
  at::Tensor compute_shard();
  bool regathered_in_backward() const;

  std::unique_ptr<FlatParam> flat_;
  comm::Communicator& shard_comm_;
  comm::Communicator& replica_comm_;
  ShardingOptions opts_;
  int call_sites_;
  int forward_calls_ = 0;
  int backward_calls_ = 0;
  at::Tensor full_;
  at::Tensor cast_;
  int64_t cast_version_ = 0;
  comm::WorkHandle gather_;
  at::Tensor grad_accum_;
  bool sync_ = true;
  at::Tensor unsynced_;  // the full gradient summed over backwards without sync, in at least float32
  at::Tensor reduced_;  // the shard's reduced gradient in reduce_dtype, when that is not master_dtype
  std::vector<comm::WorkHandle> reductions_;
};

}  // namespace fedshard::parallel
