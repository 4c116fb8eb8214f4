// How close a fused kernel's outputs must be to those of the ATen composition it replaces, as the largest
// difference relative to the largest magnitude of the ATen output (max |fused - aten| / max |aten|). The tests
// (on the CPU loops) and the GPU check (bench/kernels.cpp, on the CUDA kernels) hold them to these.
#pragma once

#include <ATen/ATen.h>

namespace fedshard::kernels {

// Both sides do the same arithmetic in the same accumulation type, so they differ only where they sum in another
// order (a row's statistics, the weight's gradient over rows), where one multiplies-and-adds in one rounding (FMA
// on the GPU), or where the fused backward keeps in float32 what ATen's autograd rounds to the storage type between
// ops:
// - float64: summation order alone, ~dim * 2^-53 relative: 1e-12 leaves a factor of 100 over rows of 10^4.
// - float32: the same at 2^-24, ~1e-7 per rounding over sums of a few thousand terms: 2e-5.
// - bfloat16 values: the final rounding to bfloat16 can go either way where the float32 values differ in their last
//   bits: one bfloat16 ulp, 2^-8 of the largest element. 2^-7 allows two.
// - bfloat16 gradients: ATen's backward rounds each intermediate (dy * w, the product's gradients) to bfloat16
//   where the fused backward does not; a few such roundings, each half an ulp, compound in the cancelling
//   difference of RMSNorm's input gradient: 2^-5 (eight ulps of the largest element).
// Measured on the CPU loops (tests/test_kernels.cpp, 2026-12-06): float32 at most 2.3e-7; bfloat16 values at most
// 0.0056, gradients at most 0.0078 (two ulps); float64 below 1e-15.
inline double fused_tolerance(at::ScalarType dtype, bool gradient) {
  if (dtype == at::kDouble) return 1e-12;
  if (dtype == at::kFloat) return 2e-5;
  return gradient ? 1.0 / 32 : 1.0 / 128;
}

}  // namespace fedshard::kernels
