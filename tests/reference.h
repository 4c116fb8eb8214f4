// Independent single-process float64 reference for the equivalence tests: a plain materialized model trained
// on the concatenated global batch with autograd, clipping and AdamW/SGD written out here (not the code
// under test).
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "model/llama.h"

namespace fedshard::reference {

struct ReferenceOptions {
  std::string optimizer = "adamw";  // adamw | sgd
  double lr = 1e-2;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double max_norm = 0.0;  // 0: no clipping
};

class ReferenceTrainer {
 public:
  ReferenceTrainer(const model::ModelConfig& cfg, uint64_t seed, ReferenceOptions opts);
  // One step on tokens [B, T+1]; returns the loss before the update and records the pre-clip grad norm.
  double step(const at::Tensor& tokens);
  double last_grad_norm() const { return last_norm_; }
  std::map<std::string, at::Tensor> parameters() const;
  void set_parameters(const std::map<std::string, at::Tensor>& values);
  // What a federation round does to the inner AdamW state: inner_state = reset zeroes the moments and the
  // step count; average gives every trainer the trainers' mean moments (equal weights).
  void reset_optimizer();
  static void average_optimizers(std::vector<ReferenceTrainer>& trainers);

 private:
  model::Llama model_;
  ReferenceOptions opts_;
  std::vector<model::ParamSlot> params_;
  std::vector<at::Tensor> m_, v_;
  int64_t t_ = 0;
  double last_norm_ = 0;
};

// Deterministic token batch [rows, seq_len+1] for a step (same on every rank).
at::Tensor synthetic_batch(int64_t step, int64_t rows, int64_t seq_len, int64_t vocab);

// Tiny float64-friendly config used by the equivalence tests.
model::ModelConfig tiny_config();

}  // namespace fedshard::reference
