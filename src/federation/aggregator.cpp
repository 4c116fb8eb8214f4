#include "federation/aggregator.h"

#include <ATen/core/grad_mode.h>

#include "util/error.h"

namespace fedshard::federation {

Aggregator::Aggregator(parallel::ShardedModel& model, comm::Topology& topo, train::Optimizer& inner,
                       const FederationOptions& opts)
    : model_(model), topo_(topo), inner_(inner), opts_(opts) {
  FS_CHECK(opts_.inner_state == "keep" || opts_.inner_state == "average" || opts_.inner_state == "reset",
           "federation.inner_state must be keep, average or reset, got '", opts_.inner_state, "'");
  std::vector<at::Tensor> slices;
  for (auto& u : model_.units()) slices.push_back(slice_of(u->flat().shard().detach()));
  outer_ = make_outer_optimizer(opts_.outer, slices);
}

at::Tensor Aggregator::slice_of(const at::Tensor& shard) const {
  const int64_t r = topo_.layout().replicas();
  const int64_t len = shard.numel() / r;  // FlatParam pads to a multiple of the group size, so this divides
  return shard.narrow(0, topo_.replica_index() * len, len);
}

void Aggregator::average(const std::vector<at::Tensor>& tensors, double scale, bool outer_step, at::ScalarType wire) {
  std::vector<at::Tensor> sums;
  std::vector<comm::WorkHandle> works;
  for (const auto& t : tensors) {
    sums.push_back((slice_of(t) * scale).to(wire));
    works.push_back(topo_.cross().all_reduce(sums.back(), comm::ReduceOp::Sum));
  }
  std::vector<comm::WorkHandle> gathers;
  for (size_t u = 0; u < tensors.size(); ++u) {
    works[u]->wait();
    auto slice = slice_of(tensors[u]);
    const auto mean = sums[u].to(slice.scalar_type());
    if (outer_step)
      outer_->step(u, mean, slice);
    else
      slice.copy_(mean);
    if (topo_.replica().size() > 1) gathers.push_back(topo_.replica().all_gather(slice, tensors[u]));
  }
  for (auto& g : gathers) g->wait();
}

void Aggregator::sync(double weight) {
  at::NoGradGuard no_grad;
  auto total = at::full({1}, weight, model_.units().front()->flat().shard().options().dtype(at::kDouble));
  topo_.cross().all_reduce(total, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
  const double scale = weight / total.item<double>();

  std::vector<at::Tensor> params;
  for (auto& u : model_.units()) params.push_back(u->flat().shard().detach());
  const auto master = params.front().scalar_type();
  average(params, scale, /*outer_step=*/true,
          opts_.reduce_dtype == at::ScalarType::Undefined ? master : opts_.reduce_dtype);

  if (opts_.inner_state == "average") {
    for (const char* key : {"exp_avg", "exp_avg_sq", "momentum_buffer"}) {
      std::vector<at::Tensor> state;
      for (auto& s : inner_.state())
        if (s.count(key)) state.push_back(s.at(key));
      if (!state.empty()) average(state, scale, /*outer_step=*/false, state.front().scalar_type());
    }
  } else if (opts_.inner_state == "reset") {
    for (auto& s : inner_.state())
      for (auto& [name, t] : s) t.zero_();
    inner_.set_steps(0);
  }
  ++syncs_;
}

}  // namespace fedshard::federation
