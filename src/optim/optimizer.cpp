#include "optim/optimizer.h"

#include <torch/version.h>

#include "optim/adamw.h"
#include "optim/sgd.h"
#include "util/error.h"

namespace fedshard::optim {

void Optimizer::set_steps(int64_t steps) {
  steps_ = steps;
  slice_steps_.assign(slices_.size(), steps);
}

void Optimizer::set_slice_steps(std::vector<int64_t> steps) {
  FS_CHECK(steps.size() == slices_.size(), "optimizer step counts for ", steps.size(), " slices, the optimizer has ",
           slices_.size());
  slice_steps_ = std::move(steps);
}

void Optimizer::reset_state(const std::vector<size_t>& slices) {
  for (size_t i : slices) {
    for (auto& [name, t] : state_.at(i)) t.zero_();
    slice_steps_.at(i) = 0;
  }
}

void Optimizer::count_step() {
  ++steps_;
  for (auto& s : slice_steps_) ++s;
}

void apply_weight_decay(const ParamSlice& s, double lr, double wd) {
  if (wd == 0.0) return;
  if (s.decay_mask.defined())
    s.param.mul_(1.0 - lr * wd * s.decay_mask);
  else
    s.param.mul_(1.0 - lr * wd);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<ParamSlice> slices) {
  FS_CHECK(!cfg.fused || cfg.name == "adamw", "optim.fused applies to adamw only (optim.name = ", cfg.name, ")");
  FS_CHECK(!cfg.fused || fused_adamw_available(), "optim.fused = on needs LibTorch >= 2.4 (this build has ",
           TORCH_VERSION, "); use auto or off");
  if (cfg.name == "adamw") return std::make_unique<AdamW>(cfg, std::move(slices));
  if (cfg.name == "sgd") return std::make_unique<Sgd>(cfg, std::move(slices));
  throw Error(cat("unknown optimizer '", cfg.name, "' (expected adamw or sgd)"));
}

}  // namespace fedshard::optim
