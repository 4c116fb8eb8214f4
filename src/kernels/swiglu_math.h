// SwiGLU's gate, silu(g) * u with g = w1 x and u = w3 x (model::swiglu), per element. As ATen composes it:
// silu in the accumulation type rounded to the storage type, then the product rounded again.
#pragma once

#include "kernels/host_device.h"

namespace fedshard::kernels {

template <typename Acc>
FS_HD inline Acc sigmoid(Acc g) {
  return Acc(1) / (Acc(1) + fs_exp(-g));
}

template <typename Acc>
FS_HD inline Acc silu(Acc g) {
  return g / (Acc(1) + fs_exp(-g));
}

template <typename Acc, typename Round>
FS_HD inline Acc swiglu_value(Acc g, Acc u, Round round) {
  return round(round(silu(g)) * u);
}

// d/dg silu(g) = s (1 + g (1 - s)), s = sigmoid(g); d/du = silu(g) as the forward rounded it.
template <typename Acc, typename Round>
FS_HD inline void swiglu_grad(Acc g, Acc u, Acc dy, Round round, Acc& dg, Acc& du) {
  const Acc s = sigmoid(g);
  dg = round(dy * u * s * (Acc(1) + g * (Acc(1) - s)));
  du = round(dy * round(silu(g)));
}

}  // namespace fedshard::kernels
