// Inner optimizers over parameter slices. They see only (parameter, gradient, decay mask) triples, so the
// same code steps a full replica (DDP), a shard (FSDP/HSDP) or a single process.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fedshard::optim {

struct ParamSlice {
  at::Tensor param;       // master values, updated in place
  at::Tensor grad;        // averaged gradient, same shape
  at::Tensor decay_mask;  // 1 where weight decay applies, 0 elsewhere; undefined = everywhere
};

struct OptimizerConfig {
  std::string name = "adamw";  // adamw | sgd
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double momentum = 0.0;  // sgd only
  bool fused = false;     // adamw: one at::_fused_adamw_ call per step (needs fused_adamw_available())
};

// Whether this LibTorch has at::_fused_adamw_ for CPU and CUDA tensors (2.4 and later).
bool fused_adamw_available();

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& cfg, std::vector<ParamSlice> slices)
      : cfg_(cfg), slices_(std::move(slices)), state_(slices_.size()), slice_steps_(slices_.size(), 0) {}
  virtual ~Optimizer() = default;
  virtual void step(double lr) = 0;
  // Optimizer steps taken by the run.
  int64_t steps() const { return steps_; }
  // Sets the run's count and every slice's (a fresh optimizer's state after `steps` steps).
  void set_steps(int64_t steps);
  // Per slice: steps since its state was last reset, the t of AdamW's bias corrections. A federation round
  // over some units only (overlap = streaming:F) resets only their slices' state, so the counts differ.
  const std::vector<int64_t>& slice_steps() const { return slice_steps_; }
  void set_slice_steps(std::vector<int64_t> steps);
  // Zeroes the state of these slices and restarts their counts (federation.inner_state = reset).
  void reset_state(const std::vector<size_t>& slices);
  // Per-slice state tensors by name (e.g. "exp_avg"), for checkpoints and federation's state policies.
  std::vector<std::map<std::string, at::Tensor>>& state() { return state_; }

 protected:
  void count_step();  // every step() starts with it

  OptimizerConfig cfg_;
  std::vector<ParamSlice> slices_;
  std::vector<std::map<std::string, at::Tensor>> state_;
  int64_t steps_ = 0;
  std::vector<int64_t> slice_steps_;
};

// Decoupled weight decay (p *= 1 - lr * wd, masked), applied before the update by every optimizer.
void apply_weight_decay(const ParamSlice& s, double lr, double wd);

// Throws fedshard::Error on an unknown optimizer name.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<ParamSlice> slices);

}  // namespace fedshard::optim
