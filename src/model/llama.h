// The Llama-3 model as a sequence of units: embedding, one unit per transformer block, final norm + head.
// The model knows nothing about ranks: a parallelization plan (src/parallel) wraps the units and rebinds
// their parameter slots to gathered buffers without this code changing.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cross_entropy.h"
#include "model/config.h"
#include "model/rope.h"

namespace fedshard::model {

// A named parameter of a unit. `tensor` points at the member the unit's forward reads, so whoever owns the
// storage (the model here, a FlatParam under sharding) can rebind it to a view of its own buffer.
struct ParamSlot {
  std::string name;  // Meta-style name, e.g. "layers.3.attention.wq.weight"
  at::Tensor* tensor;
  std::vector<int64_t> shape;
};

// Keys and values of every position seen so far, per block, so decoding one more token costs one position's
// work (generate). Blocks allocate their [B, capacity, KV, head_dim] buffers on first use.
struct KvCache {
  explicit KvCache(int64_t capacity) : capacity(capacity) {}
  int64_t capacity;
  int64_t length = 0;  // positions cached
  std::vector<at::Tensor> k, v;  // per block
};

class Unit {
 public:
  virtual ~Unit() = default;
  virtual std::string name() const = 0;
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // x holds the positions after the cached ones; blocks attend to the cache and append to it.
  virtual at::Tensor forward(const at::Tensor& x, KvCache& cache) {
    (void)cache;
    return forward(x);
  }
  // The loss of next-token targets (kernels::kIgnoreIndex leaves a position out) in place of the output: the last
  // unit's (the head's), whose logits then need not exist at once (model.cross_entropy).
  virtual at::Tensor forward_loss(const at::Tensor& x, const at::Tensor& targets, kernels::Reduction reduction);
  // Fixed order. A tied parameter appears in every unit that uses it, with the same tensor pointer.
  virtual std::vector<ParamSlot> params() = 0;
};

class Llama {
 public:
  // Allocates every parameter (uninitialized) in `dtype`, or none when !materialize: a sharding plan then
  // materializes one unit at a time, so no rank ever holds the whole model.
  Llama(ModelConfig cfg, at::ScalarType dtype, bool materialize = true);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<std::unique_ptr<Unit>>& units() const { return units_; }
  // Unique parameters in unit order (a tied weight listed once, under its first unit).
  std::vector<ParamSlot> named_parameters() const;

  // tokens [B, T] int64 -> logits [B, T, vocab].
  at::Tensor forward(const at::Tensor& tokens) const;
  // The next-token loss of tokens [B, T] against targets [B, T] (the head's forward_loss).
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets,
                  kernels::Reduction reduction = kernels::Reduction::Mean) const;
  // The same for tokens at positions cache.length .. cache.length + T - 1, extending the cache.
  at::Tensor forward(const at::Tensor& tokens, KvCache& cache) const;

 private:
  ModelConfig cfg_;
  std::shared_ptr<Rope> rope_;
  std::vector<std::unique_ptr<Unit>> units_;
};

// Deterministic initialization in the torchtitan style. Each parameter draws from its own generator seeded by
// (seed, parameter name), in float32 then cast, so the values do not depend on dtype, unit order or on which
// rank initializes which part.
// An undefined slot is allocated in `dtype` first.
void init_parameter(const ParamSlot& slot, const ModelConfig& cfg, uint64_t seed, at::ScalarType dtype);
void init_parameters(const Llama& model, uint64_t seed);  // materialized model, in its own dtype

// Mean next-token cross entropy; logits are upcast to at least float32.
at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace fedshard::model
