// Rotary embedding's per-pair arithmetic in the rotate-half layout (model/rope.h): element i of a head and
// element i + head_dim/2 rotate together by the angle of (position, i). As model::Rope composes it: in the
// accumulation type with the same cos/sin tables, rounded once to the storage type.
#pragma once

#include "kernels/host_device.h"

namespace fedshard::kernels {

template <typename Acc, typename Round>
FS_HD inline void rope_rotate(Acc x1, Acc x2, Acc c, Acc s, Round round, Acc& y1, Acc& y2) {
  y1 = round(x1 * c - x2 * s);
  y2 = round(x2 * c + x1 * s);
}

// The gradient of a rotation is the inverse rotation of the output's gradient.
template <typename Acc, typename Round>
FS_HD inline void rope_rotate_back(Acc dy1, Acc dy2, Acc c, Acc s, Round round, Acc& dx1, Acc& dx2) {
  dx1 = round(dy1 * c + dy2 * s);
  dx2 = round(dy2 * c - dy1 * s);
}

}  // namespace fedshard::kernels
