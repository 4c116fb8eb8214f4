// RMSNorm's per-element arithmetic, as model::rms_norm composes it in ATen: the row statistic in the
// accumulation type (float32, float64 for float64 rows), the normalised value rounded to the storage type and
// then multiplied by the weight and rounded again. The optional residual add (h = x + delta, the norm taken of
// the rounded h) is the block's `h = x + attention; rms_norm(h)`.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace fedshard::kernels {

// 1 / sqrt(mean(x^2) + eps) from the row's sum of squares.
template <typename Acc>
FS_HD inline Acc rms_inverse(Acc sum_of_squares, int64_t dim, Acc eps) {
  return Acc(1) / fs_sqrt(sum_of_squares / static_cast<Acc>(dim) + eps);
}

template <typename Acc, typename Round>
FS_HD inline Acc residual_value(Acc x, Acc delta, Round round) {
  return round(x + delta);
}

template <typename Acc, typename Round>
FS_HD inline Acc rms_norm_value(Acc x, Acc inv, Acc w, Round round) {
  return round(round(x * inv) * w);
}

// Summed over the row, this is the dot product the input's gradient needs.
template <typename Acc>
FS_HD inline Acc rms_norm_dot_term(Acc dy, Acc w, Acc x) {
  return dy * w * x;
}

// d loss / d x_j = inv * (dy_j w_j - x_j inv^2 dot / dim), dot = sum_i dy_i w_i x_i.
template <typename Acc>
FS_HD inline Acc rms_norm_grad_input(Acc dy, Acc w, Acc x, Acc inv, Acc dot, int64_t dim) {
  return inv * (dy * w - x * inv * inv * dot / static_cast<Acc>(dim));
}

// Summed over rows, the weight's gradient: dy times the rounded normalised value the forward multiplied.
template <typename Acc, typename Round>
FS_HD inline Acc rms_norm_grad_weight_term(Acc dy, Acc x, Acc inv, Round round) {
  return dy * round(x * inv);
}

}  // namespace fedshard::kernels
