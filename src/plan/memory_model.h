// What one rank holds at the peak of a training step, by component (derivation in docs/cost-model.md §9). One
// estimate serves `fedshard plan` (per strategy, --memory-per-rank) and `fedshard train`'s preflight, which
// refuses a job that cannot fit before anything large is allocated.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace fedshard::plan {

struct MemoryInputs {
  model::ModelConfig model;
  int shard = 1;             // H: ranks one replica of the model is sharded over
  int replicas = 1;          // ranks holding the same shard (the aggregation slices split it)
  int64_t batch = 1;         // sequences per micro-batch
  int64_t seq_len = 2048;
  int64_t grad_accum = 1;    // micro-batches per step (> 1 keeps a float32 sum of every unit's full gradient)
  int master_bytes = 4;
  int compute_bytes = 4;
  int reduce_bytes = 4;
  bool recompute = false;
  bool reshard_after_forward = true;
  std::string optimizer = "adamw";  // adamw | sgd
  double momentum = 0;              // sgd: a momentum buffer when > 0
  bool math_attention = false;      // the attention kernel keeps the T x T scores (LibTorch < 2, or math)
  bool federated = false;
  std::string outer = "fedavg";     // fedavg | nesterov (a momentum buffer)
  bool round_copy = false;          // compression, overlap or normalization keep the round's global model
  bool residuals = false;           // int8/bf16 compression keeps error-feedback residuals
  int groups_per_rank = 1;          // emulation: groups held in turn, each with its own state
  double runtime_bytes = 0;         // the process itself (libraries, runtime, CUDA context)
};

struct MemoryComponent {
  std::string name;  // master, gradients, optimizer, federation, gathered, gradient_buffers, activations, runtime
  double bytes = 0;
};

struct MemoryEstimate {
  std::vector<MemoryComponent> components;
  double total() const;
  double bytes(const std::string& name) const;
};

MemoryEstimate estimate_memory(const MemoryInputs& in);

// Changes that would make `in` fit in `available` bytes, most useful first (at most three): "use fsdp",
// "turn on recomputation", "batch-size <= N". Empty when nothing short of more ranks or memory helps.
std::vector<std::string> memory_suggestions(const MemoryInputs& in, double available, int group_size);

}  // namespace fedshard::plan
