// What the groups' weighted mean becomes: FedAvg takes it as the new global model; Nesterov (DiLoCo's outer
// optimizer) treats (previous global - mean) as a pseudo-gradient and applies SGD with Nesterov momentum.
// State is kept per aggregation slice, so it is sharded exactly like the aggregation.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fedshard::federation {

struct OuterOptions {
  std::string name = "fedavg";  // fedavg | nesterov
  double lr = 1.0;
  double momentum = 0.9;
};

class OuterOptimizer {
 public:
  virtual ~OuterOptimizer() = default;
  // slice: this rank's slice of unit `unit`'s master weights (the previous global model on entry to the round's
  // sync is not needed by FedAvg); mean: the groups' weighted mean of that slice. Writes the new global slice.
  virtual void step(size_t unit, const at::Tensor& mean, at::Tensor slice) = 0;
  // Per-unit state tensors by name, for checkpoints.
  virtual std::vector<std::map<std::string, at::Tensor>>& state() = 0;
};

// `initial_slices`: this rank's slice of each unit at the start (the first global model).
std::unique_ptr<OuterOptimizer> make_outer_optimizer(const OuterOptions& opts,
                                                     const std::vector<at::Tensor>& initial_slices);

}  // namespace fedshard::federation
