// AdamW with decoupled weight decay (Loshchilov & Hutter; PyTorch's torch.optim.AdamW update order).
#pragma once

#include "train/optimizer.h"

namespace fedshard::train {

class AdamW : public Optimizer {
 public:
  AdamW(const OptimizerConfig& cfg, std::vector<ParamSlice> slices);
  void step(double lr) override;
  int64_t steps() const override { return steps_; }
  void set_steps(int64_t steps) override { steps_ = steps; }
  std::vector<std::map<std::string, at::Tensor>>& state() override { return state_; }

 private:
  OptimizerConfig cfg_;
  std::vector<ParamSlice> slices_;
  std::vector<std::map<std::string, at::Tensor>> state_;  // exp_avg, exp_avg_sq
  int64_t steps_ = 0;
};

// Plain SGD (optionally with heavy-ball momentum) with the same decoupled decay; used where a test needs
// the optimizer to be linear in the gradient.
class Sgd : public Optimizer {
 public:
  Sgd(const OptimizerConfig& cfg, std::vector<ParamSlice> slices);
  void step(double lr) override;
  int64_t steps() const override { return steps_; }
  void set_steps(int64_t steps) override { steps_ = steps; }
  std::vector<std::map<std::string, at::Tensor>>& state() override { return state_; }

 private:
  OptimizerConfig cfg_;
  std::vector<ParamSlice> slices_;
  std::vector<std::map<std::string, at::Tensor>> state_;  // momentum_buffer (if momentum > 0)
  int64_t steps_ = 0;
};

}  // namespace fedshard::train
