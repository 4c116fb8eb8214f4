// AdamW with decoupled weight decay (Loshchilov & Hutter; PyTorch's torch.optim.AdamW update order).
#pragma once

#include "optim/optimizer.h"

namespace fedshard::optim {

// State per slice: exp_avg, exp_avg_sq. Fused: the same update in one multi-tensor kernel
// (torch.optim.AdamW(fused=True)); slices with a decay mask take their decay beforehand, as the unfused path does.
class AdamW : public Optimizer {
 public:
  AdamW(const OptimizerConfig& cfg, std::vector<ParamSlice> slices);
  void step(double lr) override;

 private:
  void fused_step(double lr);
  at::Tensor step_count_;  // the fused kernel's state_steps, shared by every slice
};

}  // namespace fedshard::optim
