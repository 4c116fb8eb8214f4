// A model with a sharding plan applied: every unit's parameters live in a ShardedUnit (FlatParam sharded
// over `shard`, replicated over `replica`). DDP, FSDP and HSDP are this one mechanism with H = 1, H = S and
// 1 < H < S. The model itself is unchanged: its parameter slots are rebound to gathered buffers.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/topology.h"
#include "model/llama.h"
#include "parallel/sharded_unit.h"

namespace fedshard::parallel {

// How a model's units map onto FlatParams: a unit that reuses a slot of an earlier unit (tied embeddings) joins
// that unit's FlatParam and becomes a second call site of it.
struct UnitGrouping {
  std::vector<std::vector<model::ParamSlot>> slots;  // per FlatParam, in first-use order
  std::vector<size_t> flat_of_unit;                  // per model unit
};
UnitGrouping group_units(const model::Llama& model);

// One use of a ShardedUnit in the forward order (a tied weight's unit has two call sites).
struct CallSite {
  model::Unit* unit = nullptr;
  ShardedUnit* sharded = nullptr;
  CallSite* prev = nullptr;
  CallSite* next = nullptr;
  // Kept activations when not recomputing: the unit's inner graph from forward until its backward.
  std::vector<at::Tensor> leaves;
  at::Tensor x_leaf;
  at::Tensor y;
};

class ShardedModel {
 public:
  using Initializer = SliceInit;

  // `model` must be unmaterialized or materialized-but-uninitialized: `init` fills each unit's shard on this
  // rank directly, so no rank holds a full unit. pad_multiple: see FlatParam.
  ShardedModel(model::Llama& model, comm::Communicator& shard, comm::Communicator& replica,
               const ShardingOptions& opts, int64_t pad_multiple, const Initializer& init);
  // Random initialization from `seed` (model::init_parameter; each parameter drawn whole, one at a time).
  ShardedModel(model::Llama& model, comm::Communicator& shard, comm::Communicator& replica,
               const ShardingOptions& opts, int64_t pad_multiple, uint64_t seed);

  const model::ModelConfig& config() const { return model_.config(); }
  const ShardingOptions& options() const { return opts_; }
  comm::Communicator& shard_comm() { return shard_; }
  comm::Communicator& replica_comm() { return replica_; }

  // tokens [B, T] -> logits [B, T, V]. With grad mode on, backward re-gathers, recomputes (or reuses kept
  // activations) and launches each unit's gradient reduction as soon as it is ready.
  at::Tensor forward(const at::Tensor& tokens);
  // The next-token loss of tokens [B, T] against targets [B, T] (the head's Unit::forward_loss: with
  // model.cross_entropy = chunked the logits never exist at once); backward as for forward.
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets,
                  kernels::Reduction reduction = kernels::Reduction::Mean);
  // Waits for every outstanding gradient reduction (call after backward, before the optimizer).
  void wait_grads();
  // Gradient accumulation: with sync off, backward passes sum gradients locally; the first backward with
  // sync on reduces the sum (ShardedUnit::set_requires_gradient_sync).
  void set_requires_gradient_sync(bool sync);

  const std::vector<std::unique_ptr<ShardedUnit>>& units() const { return units_; }

  // Global gradient norm: sqrt of the sum over `shard` of each rank's squared shard norms (shards are
  // disjoint and replicas identical). Scales the gradients down to max_norm if max_norm > 0 and exceeded.
  // Returns the norm as a float64 scalar on the model's device: reading it is the caller's host sync.
  at::Tensor clip_grad_norm(double max_norm);

  // Full (unpadded) values of every parameter, gathered over `shard`; collective.
  std::map<std::string, at::Tensor> full_parameters();

 private:
  // forward, or with targets loss: the last call site then returns the loss.
  at::Tensor run(const at::Tensor& tokens, const at::Tensor& targets, kernels::Reduction reduction);

  model::Llama& model_;
  comm::Communicator& shard_;
  comm::Communicator& replica_;
  ShardingOptions opts_;
  std::vector<std::unique_ptr<ShardedUnit>> units_;
  std::vector<std::unique_ptr<CallSite>> sites_;
};

}  // namespace fedshard::parallel
