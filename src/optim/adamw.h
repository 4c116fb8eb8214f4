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
  std::vector<at::Tensor> step_counts_;  // the fused kernel's state_steps: one per slice, then a shared one
};

}  // namespace fedshard::optim
