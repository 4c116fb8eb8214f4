#include "parallel/sharded_model.h"

#include <ATen/core/grad_mode.h>
#include <unordered_map>

#include "parallel/unit_function.h"
#include "util/error.h"

namespace fedshard::parallel {

UnitGrouping group_units(const model::Llama& model) {
  UnitGrouping g;
  std::unordered_map<const at::Tensor*, size_t> flat_of_slot;
  for (const auto& u : model.units()) {
    size_t f = g.slots.size();
    for (const auto& s : u->params()) {
      auto it = flat_of_slot.find(s.tensor);
      if (it != flat_of_slot.end()) f = it->second;
    }
    if (f == g.slots.size()) g.slots.emplace_back();
    for (const auto& s : u->params())
      if (flat_of_slot.emplace(s.tensor, f).second) g.slots[f].push_back(s);
    g.flat_of_unit.push_back(f);
  }
  return g;
}

ShardedModel::ShardedModel(model::Llama& model, comm::Communicator& shard, comm::Communicator& replica,
                           const ShardingOptions& opts, int64_t pad_multiple, uint64_t seed)
    : ShardedModel(model, shard, replica, opts, pad_multiple,
                   [&model, seed, dtype = opts.master_dtype](const model::ParamSlot& s, int64_t begin, at::Tensor dst) {
                     at::Tensor full;
                     model::init_parameter({s.name, &full, s.shape}, model.config(), seed, dtype);
                     dst.copy_(full.reshape({-1}).narrow(0, begin, dst.numel()));
                   }) {}

ShardedModel::ShardedModel(model::Llama& model, comm::Communicator& shard, comm::Communicator& replica,
                           const ShardingOptions& opts, int64_t pad_multiple, const Initializer& init)
    : model_(model), shard_(shard), replica_(replica), opts_(opts) {
  const auto& units = model_.units();
  const auto grouping = group_units(model_);
  const auto& group_slots = grouping.slots;
  const auto& group_of_unit = grouping.flat_of_unit;
  std::vector<int> sites_per_group(group_slots.size(), 0);
  for (size_t g : group_of_unit) ++sites_per_group[g];
  for (size_t g = 0; g < group_slots.size(); ++g) {
    auto flat = std::make_unique<FlatParam>(group_slots[g], pad_multiple, shard_.size(), shard_.rank(),
                                            opts_.master_dtype, init, opts_.device, opts_.gradients);
    units_.push_back(std::make_unique<ShardedUnit>(std::move(flat), shard_, replica_, opts_, sites_per_group[g]));
  }

  for (size_t i = 0; i < units.size(); ++i) {
    auto site = std::make_unique<CallSite>();
    site->unit = units[i].get();
    site->sharded = units_[group_of_unit[i]].get();
    if (!sites_.empty()) {
      site->prev = sites_.back().get();
      sites_.back()->next = site.get();
    }
    sites_.push_back(std::move(site));
  }
}

at::Tensor ShardedModel::forward(const at::Tensor& tokens) { return run(tokens, at::Tensor(), kernels::Reduction::Mean); }

at::Tensor ShardedModel::loss(const at::Tensor& tokens, const at::Tensor& targets, kernels::Reduction reduction) {
  return run(tokens, targets, reduction);
}

at::Tensor ShardedModel::run(const at::Tensor& tokens, const at::Tensor& targets, kernels::Reduction reduction) {
  at::Tensor x = tokens;
  if (at::GradMode::is_enabled()) {
    for (auto& site : sites_) x = run_call_site(*site, x, site->next ? at::Tensor() : targets, reduction);
    return x;
  }
  for (auto& site : sites_) {
    auto& su = *site->sharded;
    su.prefetch();
    if (site->next) site->next->sharded->prefetch();
    su.flat().bind(su.full());
    x = site->next || !targets.defined() ? site->unit->forward(x) : site->unit->forward_loss(x, targets, reduction);
    if (su.forward_done(/*training=*/false)) su.free();
  }
  return x;
}

void ShardedModel::set_requires_gradient_sync(bool sync) {
  for (auto& u : units_) u->set_requires_gradient_sync(sync);
}

void ShardedModel::wait_grads() {
  for (auto& u : units_) u->wait_grad();
}

at::Tensor ShardedModel::clip_grad_norm(double max_norm) {
  at::NoGradGuard no_grad;
  // Each unit's norm in its gradient's dtype (one reduction, as torch.nn.utils.clip_grad_norm_ does), their
  // squares summed in float64. Casting whole gradients to float64 first cost a tenth of a step on the H200
  // (docs/perf.md); float64 runs, which the numerics contract is about, are unchanged.
  auto sq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(opts_.device));
  for (auto& u : units_) sq += at::linalg_vector_norm(u->flat().grad(), 2).to(at::kDouble).square();
  shard_.all_reduce(sq, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
  auto norm = sq.sqrt();
  // torch.nn.utils.clip_grad_norm_'s rule, so runs compare with PyTorch trainers; the coefficient stays on the
  // device (a factor of 1 leaves the gradients exact).
  if (max_norm > 0) {
    const auto coef = (max_norm / (norm + 1e-6)).clamp_max(1.0);
    // The factor in the gradient's dtype: a float64 one would make the multiply run in float64 (3-7% of an H200
    // step, docs/perf.md).
    for (auto& u : units_) {
      auto grad = u->flat().grad();
      grad.mul_(coef.to(grad.scalar_type()));
    }
  }
  return norm;
}

std::map<std::string, at::Tensor> ShardedModel::full_parameters() {
  at::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> out;
  for (auto& u : units_) {
    auto& flat = u->flat();
    auto full = at::empty({flat.padded_numel()}, flat.shard().options().requires_grad(false));
    shard_.all_gather(flat.shard().detach(), full)->wait();
    for (const auto& e : flat.entries()) out[e.name] = full.narrow(0, e.offset, e.numel).view(e.shape).clone();
  }
  return out;
}

}  // namespace fedshard::parallel
