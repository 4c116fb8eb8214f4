#include "train/engine.h"

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
  if (spec.site)
    e.site = sites::make_site_lane(*e.sharded, *e.topo, *e.optimizer, *spec.federation, *spec.site);
  else if (spec.federation)
    e.aggregator = std::make_unique<federation::Aggregator>(*e.sharded, *e.topo, *e.optimizer, *spec.federation);
  return e;
}

}  // namespace fedshard::train
