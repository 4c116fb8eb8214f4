#include "federation/aggregator.h"

#include <ATen/core/grad_mode.h>

#include "util/error.h"

namespace fedshard::federation {

Aggregator::Aggregator(parallel::ShardedModel& model, comm::Topology& topo, optim::Optimizer& inner,
                       const FederationOptions& opts)
    : model_(model), topo_(topo), inner_(inner), opts_(opts) {
  FS_CHECK(opts_.inner_state == "keep" || opts_.inner_state == "average" || opts_.inner_state == "reset",
           "federation.inner_state must be keep, average or reset, got '", opts_.inner_state, "'");
  std::vector<at::Tensor> slices;
  for (size_t u = 0; u < model_.units().size(); ++u) slices.push_back(slice_of(u, model_.units()[u]->flat().shard().detach()));
  outer_ = make_outer_optimizer(opts_.outer, slices);
}

at::Tensor Aggregator::slice_of(size_t unit, const at::Tensor& shard) const {
  const int64_t padded = model_.units()[unit]->flat().padded_numel();
  const auto [a, b] = topo_.layout().slice_range(padded, topo_.world_rank());
  const int64_t shard_begin = topo_.layout().shard_range(padded, topo_.world_rank()).first;
  return shard.narrow(0, a - shard_begin, b - a);
}

void Aggregator::average(const std::vector<at::Tensor>& tensors, double scale, bool outer_step, at::ScalarType wire) {
  const auto& layout = topo_.layout();
  std::vector<at::Tensor> sums;
  std::vector<std::vector<comm::WorkHandle>> works(tensors.size());
  for (size_t u = 0; u < tensors.size(); ++u) {
    sums.push_back((slice_of(u, tensors[u]) * scale).to(wire));
    const int64_t padded = model_.units()[u]->flat().padded_numel();
    const int64_t slice_begin = layout.slice_range(padded, topo_.world_rank()).first;
    for (const auto& s : topo_.segments()) {
      const auto [a, b] = layout.segment_range(s.segment, padded);
      works[u].push_back(s.comm->all_reduce(sums.back().narrow(0, a - slice_begin, b - a), comm::ReduceOp::Sum));
    }
  }
  std::vector<comm::WorkHandle> gathers;
  for (size_t u = 0; u < tensors.size(); ++u) {
    for (auto& w : works[u]) w->wait();
    auto slice = slice_of(u, tensors[u]);
    const auto mean = sums[u].to(slice.scalar_type());
    if (outer_step)
      outer_->step(u, mean, slice);
    else
      slice.copy_(mean);
    if (topo_.replica().size() > 1) gathers.push_back(topo_.replica().all_gather(slice, tensors[u]));
  }
  for (auto& g : gathers) g->wait();
}

bool Aggregator::sync(double weight, bool stop) {
  at::NoGradGuard no_grad;
  // Every segment has one rank of each group, so each yields the total weight (and the groups' stop
  // requests); it is summed over all of this rank's segments because every member of a communicator must
  // take part. One group has no segments to average over, but its outer optimizer still steps.
  const auto device = model_.units().front()->flat().shard().device();
  std::vector<at::Tensor> totals;
  std::vector<comm::WorkHandle> works;
  for (const auto& s : topo_.segments()) {
    totals.push_back(at::tensor({weight, stop ? 1.0 : 0.0}, at::kDouble).to(device));
    works.push_back(s.comm->all_reduce(totals.back(), comm::ReduceOp::Sum, comm::Traffic::Control));
  }
  for (auto& w : works) w->wait();
  const auto total = totals.empty() ? at::tensor({weight, stop ? 1.0 : 0.0}, at::kDouble) : totals.front().cpu();
  const double scale = weight / total[0].item<double>();
  const bool any_stop = total[1].item<double>() > 0;

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
  return any_stop;
}

}  // namespace fedshard::federation
