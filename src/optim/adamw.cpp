#include "optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"

// at::_fused_adamw_ runs on CPU tensors from LibTorch 2.4 on (on CUDA from 2.0).
#define FEDSHARD_HAS_FUSED_ADAMW (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace fedshard::optim {


AdamW::AdamW(const OptimizerConfig& cfg, std::vector<ParamSlice> slices) : Optimizer(cfg, std::move(slices)) {
  for (size_t i = 0; i < slices_.size(); ++i)
    state_[i] = {{"exp_avg", at::zeros_like(slices_[i].param)}, {"exp_avg_sq", at::zeros_like(slices_[i].param)}};
}

bool fused_adamw_available() { return FEDSHARD_HAS_FUSED_ADAMW; }

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  count_step();
  if (cfg_.fused) {
    fused_step(lr);
    return;
  }
  for (size_t i = 0; i < slices_.size(); ++i) {
    const auto& s = slices_[i];
    const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(slice_steps_[i]));
    const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(slice_steps_[i]));
    auto& m = state_[i].at("exp_avg");
    auto& v = state_[i].at("exp_avg_sq");
    apply_weight_decay(s, lr, cfg_.weight_decay);
    m.mul_(cfg_.beta1).add_(s.grad, 1.0 - cfg_.beta1);
    v.mul_(cfg_.beta2).addcmul_(s.grad, s.grad, 1.0 - cfg_.beta2);
    auto denom = (v.sqrt() / std::sqrt(bc2)).add_(cfg_.eps);
    s.param.addcdiv_(m, denom, -lr / bc1);
  }
}

void AdamW::fused_step(double lr) {
#if FEDSHARD_HAS_FUSED_ADAMW
  bool masked = false;
  for (const auto& s : slices_) masked = masked || s.decay_mask.defined();
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  for (size_t i = 0; i < slices_.size(); ++i) {
    if (masked) apply_weight_decay(slices_[i], lr, cfg_.weight_decay);
    params.push_back(slices_[i].param);
    grads.push_back(slices_[i].grad);
    exp_avgs.push_back(state_[i].at("exp_avg"));
    exp_avg_sqs.push_back(state_[i].at("exp_avg_sq"));
  }
  if (step_counts_.size() != params.size() + 1 || step_counts_.front().device() != params.front().device()) {
    step_counts_.clear();
    for (size_t i = 0; i <= params.size(); ++i)
      step_counts_.push_back(at::zeros({}, params.front().options().dtype(at::kFloat).requires_grad(false)));
  }
  // The kernel's bias corrections read each slice's count: one shared count (one fill) while they agree,
  // which they do unless a streaming round reset some slices.
  std::vector<at::Tensor> steps;
  if (std::equal(slice_steps_.begin() + 1, slice_steps_.end(), slice_steps_.begin())) {
    step_counts_.back().fill_(static_cast<double>(slice_steps_.front()));
    steps.assign(params.size(), step_counts_.back());
  } else {
    for (size_t i = 0; i < params.size(); ++i) step_counts_[i].fill_(static_cast<double>(slice_steps_[i]));
    steps.assign(step_counts_.begin(), step_counts_.end() - 1);
  }
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, cfg_.beta1, cfg_.beta2,
                    masked ? 0.0 : cfg_.weight_decay, cfg_.eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)lr;
  FS_ASSERT(false, "fused AdamW on LibTorch ", TORCH_VERSION);
#endif
}

}  // namespace fedshard::optim

#undef FEDSHARD_HAS_FUSED_ADAMW  // one source of a unity batch; see tests/unity_names.py
