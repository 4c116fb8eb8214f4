#include "federation/outer_optimizer.h"

#include "util/error.h"

namespace fedshard::federation {

namespace {

class FedAvg : public OuterOptimizer {
 public:
  explicit FedAvg(size_t units) : state_(units) {}  // stateless: one empty map per unit
  void step(size_t, const at::Tensor& mean, at::Tensor slice) override { slice.copy_(mean); }
  std::vector<std::map<std::string, at::Tensor>>& state() override { return state_; }

 private:
  std::vector<std::map<std::string, at::Tensor>> state_;
};

class Nesterov : public OuterOptimizer {
 public:
  Nesterov(const OuterOptions& o, const std::vector<at::Tensor>& initial) : o_(o) {
    for (const auto& s : initial)
      state_.push_back({{"global", s.detach().clone()}, {"momentum_buffer", at::zeros_like(s)}});
  }
  void step(size_t unit, const at::Tensor& mean, at::Tensor slice) override {
    auto& global = state_[unit].at("global");
    auto& buf = state_[unit].at("momentum_buffer");
    auto delta = global - mean;  // pseudo-gradient: how far the groups moved, as a descent direction
    buf.mul_(o_.momentum).add_(delta);
    global.sub_(delta.add_(buf, o_.momentum), o_.lr);  // torch.optim.SGD(nesterov=True)
    slice.copy_(global);
  }
  std::vector<std::map<std::string, at::Tensor>>& state() override { return state_; }

 private:
  OuterOptions o_;
  std::vector<std::map<std::string, at::Tensor>> state_;
};

}  // namespace

std::unique_ptr<OuterOptimizer> make_outer_optimizer(const OuterOptions& opts,
                                                     const std::vector<at::Tensor>& initial_slices) {
  if (opts.name == "fedavg") return std::make_unique<FedAvg>(initial_slices.size());
  if (opts.name == "nesterov") return std::make_unique<Nesterov>(opts, initial_slices);
  throw Error(cat("unknown outer optimizer '", opts.name, "' (expected fedavg or nesterov)"));
}

}  // namespace fedshard::federation
