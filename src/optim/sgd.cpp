#include "optim/sgd.h"

#include <ATen/core/grad_mode.h>

namespace fedshard::optim {

Sgd::Sgd(const OptimizerConfig& cfg, std::vector<ParamSlice> slices) : Optimizer(cfg, std::move(slices)) {
  if (cfg_.momentum > 0)
    for (size_t i = 0; i < slices_.size(); ++i) state_[i]["momentum_buffer"] = at::zeros_like(slices_[i].param);
}

void Sgd::step(double lr) {
  at::NoGradGuard no_grad;
  count_step();
  for (size_t i = 0; i < slices_.size(); ++i) {
    const auto& s = slices_[i];
    apply_weight_decay(s, lr, cfg_.weight_decay);
    if (cfg_.momentum > 0) {
      auto& buf = state_[i].at("momentum_buffer");
      buf.mul_(cfg_.momentum).add_(s.grad);
      s.param.add_(buf, -lr);
    } else {
      s.param.add_(s.grad, -lr);
    }
  }
}

}  // namespace fedshard::optim
