#include "train/engine.h"

#include <ATen/core/grad_mode.h>

#include "util/error.h"

namespace fedshard::train {

namespace {

// 1 where weight decay applies, over this rank's shard of a unit; undefined when it applies everywhere.
at::Tensor decay_mask(parallel::FlatParam& flat, bool decay_all) {
  if (decay_all) return at::Tensor();
  auto full = at::ones({flat.padded_numel()}, flat.shard().options().requires_grad(false));
  for (const auto& e : flat.entries()) {
    const bool exempt = e.name.find("norm.weight") != std::string::npos || e.name == "tok_embeddings.weight";
    if (exempt) full.narrow(0, e.offset, e.numel).zero_();
  }
  return flat.slice_of(full).clone();
}

}  // namespace

Engine parallelize(const EngineSpec& spec) {
  Engine e;
  e.topo = std::make_unique<comm::Topology>(spec.layout, spec.topology, spec.base);
  const auto& layout = e.topo->layout();
  e.model = std::make_unique<model::Llama>(spec.model, spec.sharding.master_dtype, /*materialize=*/false);
  if (spec.init)
    e.sharded = std::make_unique<parallel::ShardedModel>(*e.model, e.topo->shard(), e.topo->replica(), spec.sharding,
                                                         layout.pad_multiple(), spec.init);
  else
    e.sharded = std::make_unique<parallel::ShardedModel>(*e.model, e.topo->shard(), e.topo->replica(), spec.sharding,
                                                         layout.pad_multiple(), spec.seed);
  std::vector<optim::ParamSlice> slices;
  for (auto& u : e.sharded->units())
    slices.push_back({u->flat().shard(), u->flat().grad(), decay_mask(u->flat(), spec.decay_norms_and_embeddings)});
  e.optimizer = optim::make_optimizer(spec.optimizer, std::move(slices));
  if (spec.federation)
    e.aggregator = std::make_unique<federation::Aggregator>(*e.sharded, *e.topo, *e.optimizer, *spec.federation);
  return e;
}

void hand_over(Engine& from, Engine& to) {
  at::NoGradGuard no_grad;
  const auto& src = from.sharded->units();
  const auto& dst = to.sharded->units();
  FS_CHECK(src.size() == dst.size(), "hand_over: ", src.size(), " units into ", dst.size());
  auto copy = [](at::Tensor dst_t, const at::Tensor& src_t, const char* what, size_t u) {
    FS_CHECK(dst_t.sizes() == src_t.sizes(), "hand_over: ", what, " of unit ", u, " is ", src_t.sizes(), " here and ",
             dst_t.sizes(), " in the new layout");
    dst_t.copy_(src_t);
  };
  const auto inner_from = from.optimizer->state(), inner_to = to.optimizer->state();
  for (size_t u = 0; u < src.size(); ++u) {
    copy(dst[u]->flat().shard().detach(), src[u]->flat().shard().detach(), "the master shard", u);
    FS_CHECK(inner_to[u].size() == inner_from[u].size(), "hand_over: another inner optimizer");
    for (auto& [k, t] : inner_to[u]) copy(t, inner_from[u].at(k), "inner optimizer state", u);
  }
  to.optimizer->set_steps(from.optimizer->steps());
  to.optimizer->set_slice_steps(from.optimizer->slice_steps());
  if (!from.aggregator) return;
  const auto outer_from = from.aggregator->outer().state(), outer_to = to.aggregator->outer().state();
  const auto fed = from.aggregator->state();
  for (size_t u = 0; u < src.size(); ++u) {
    FS_CHECK(outer_to[u].size() == outer_from[u].size(), "hand_over: another outer optimizer");
    for (auto& [k, t] : outer_to[u]) copy(t, outer_from[u].at(k), "outer optimizer state", u);
    for (const auto& [name, t] : fed[u]) to.aggregator->restore_state(u, name, t);
  }
}

}  // namespace fedshard::train
