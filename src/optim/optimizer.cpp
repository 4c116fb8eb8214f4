#include "optim/optimizer.h"

#include <torch/version.h>

#include "optim/adamw.h"
#include "optim/sgd.h"
#include "util/error.h"

namespace fedshard::optim {

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
