// The autograd function that runs one call site of a sharded unit: gather -> forward -> free, and in
// backward gather -> recompute (or reuse kept activations) -> local backward -> launch gradient reduction.
#pragma once

#include <ATen/ATen.h>

#include "parallel/sharded_model.h"

namespace fedshard::parallel {

// Runs `site` on x in training mode; with targets (the last site) its unit's loss instead of its output. The master
// shard is passed as an input only so that autograd calls our backward even where x needs no gradient (token
// ids); its gradient arrives through the reduction instead.
at::Tensor run_call_site(CallSite& site, const at::Tensor& x, const at::Tensor& targets, kernels::Reduction reduction);

}  // namespace fedshard::parallel
