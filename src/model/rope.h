// Rotary position embedding in the rotate-half layout that Hugging Face Llama checkpoints use:
// the head dimension is split into two halves (x1, x2) rotated as (x1 cos - x2 sin, x2 cos + x1 sin).
#pragma once

#include <ATen/ATen.h>

#include <utility>

#include "model/config.h"

namespace fedshard::model {

// Inverse frequencies theta^(-2i/head_dim), i < head_dim/2, with Llama 3.1 scaling applied if configured.
at::Tensor rope_inv_freq(const ModelConfig& cfg);

class Rope {
 public:
  explicit Rope(const ModelConfig& cfg);
  // x: [B, T, heads, head_dim] -> same shape, rotated by positions start..start+T-1.
  at::Tensor apply(const at::Tensor& x, int64_t start = 0) const;
  // The cos and sin tables apply() rotates x's T positions from `start` with: [T, 1, head_dim] in at least
  // float32, on x's device (the fused kernel takes the same ones).
  std::pair<at::Tensor, at::Tensor> tables(const at::Tensor& x, int64_t start = 0) const;

 private:
  at::Tensor inv_freq_;  // [head_dim/2], float64 on the CPU
  int64_t max_seq_len_;
  // The last [T, 1, head_dim] pair handed out, on the caller's device in at least float32 (reused across
  // blocks and steps; a unit's forward is single-threaded). Tables are built per use rather than for
  // max_seq_len up front: Llama 3.1's 131,072 positions would cost every rank 134 MB of float64.
  mutable at::Tensor cos_cached_, sin_cached_;
  mutable int64_t cached_start_ = -1;
};

}  // namespace fedshard::model
