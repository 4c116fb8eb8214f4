#include "parallel/unit_function.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace fedshard::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor as_leaf(const at::Tensor& x) {
  return x.is_floating_point() ? x.detach().requires_grad_(true) : x;
}

at::Tensor run_unit(CallSite& site, const at::Tensor& x, const at::Tensor& targets, int64_t reduction) {
  if (!targets.defined()) return site.unit->forward(x);
  return site.unit->forward_loss(x, targets, static_cast<kernels::Reduction>(reduction));
}

class UnitFunction : public torch::autograd::Function<UnitFunction> {
 public:
  // The targets travel as an IValue (None for the sites before the last): they are no input of the graph.
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::Tensor /*master_shard*/, int64_t site_addr,
                            c10::IValue targets_value, int64_t reduction) {
    const at::Tensor targets = targets_value.isTensor() ? targets_value.toTensor() : at::Tensor();
    // saved_data holds only IValues: the call site (owned by the ShardedModel, which outlives the graph)
    // travels as its address.
    ctx->saved_data["site"] = site_addr;
    ctx->saved_data["targets"] = targets;
    ctx->saved_data["reduction"] = reduction;
    auto& site = *reinterpret_cast<CallSite*>(site_addr);
    auto& su = *site.sharded;
    su.prefetch();
    if (site.next) site.next->sharded->prefetch();
    const at::Tensor& full = su.full();
    at::Tensor y;
    if (su.options().recompute) {
      su.flat().bind(full);
      y = run_unit(site, x, targets, reduction);
      ctx->save_for_backward({x});
    } else {
      at::AutoGradMode enable(true);
      site.leaves = su.flat().bind_leaves(full);
      site.x_leaf = as_leaf(x);
      site.y = run_unit(site, site.x_leaf, targets, reduction);
      y = site.y.detach();
    }
    if (su.forward_done(/*training=*/true)) su.free();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto& site = *reinterpret_cast<CallSite*>(ctx->saved_data["site"].toInt());
    auto& su = *site.sharded;
    at::AutoGradMode enable(true);  // custom backward runs with grad off; the recomputation needs it
    std::vector<at::Tensor> leaves;
    at::Tensor x_leaf, y;
    if (su.options().recompute) {
      su.prefetch();
      if (site.prev) site.prev->sharded->prefetch();
      leaves = su.flat().bind_leaves(su.full());
      x_leaf = as_leaf(ctx->get_saved_variables()[0]);
      y = run_unit(site, x_leaf, ctx->saved_data["targets"].toTensor(), ctx->saved_data["reduction"].toInt());
    } else {
      if (site.prev) site.prev->sharded->prefetch();
      leaves = std::move(site.leaves);
      x_leaf = std::move(site.x_leaf);
      y = std::move(site.y);
    }
    std::vector<at::Tensor> inputs = leaves;
    const bool x_grad = x_leaf.requires_grad();
    if (x_grad) inputs.push_back(x_leaf);
    auto grads = torch::autograd::grad({y}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    at::Tensor grad_x = x_grad ? grads.back() : at::Tensor();
    if (x_grad) grads.pop_back();
    su.backward_done(grads);
    return {grad_x, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor run_call_site(CallSite& site, const at::Tensor& x, const at::Tensor& targets, kernels::Reduction reduction) {
  return UnitFunction::apply(x, site.sharded->flat().shard(), reinterpret_cast<int64_t>(&site),
                             targets.defined() ? c10::IValue(targets) : c10::IValue(), static_cast<int64_t>(reduction));
}

}  // namespace fedshard::parallel
