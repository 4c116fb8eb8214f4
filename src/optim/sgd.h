// Plain SGD (optionally with heavy-ball momentum) with AdamW's decoupled weight decay.
#pragma once

#include "optim/optimizer.h"

namespace fedshard::optim {

// Used where a test needs
// the optimizer to be linear in the gradient. State per slice: momentum_buffer (if momentum > 0).
class Sgd : public Optimizer {
 public:
  Sgd(const OptimizerConfig& cfg, std::vector<ParamSlice> slices);
  void step(double lr) override;
};

}  // namespace fedshard::optim
