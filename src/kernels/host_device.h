// The per-element arithmetic that each fused kernel shares with its CPU loop. FS_HD is __host__ __device__ under
// nvcc and nothing otherwise, so the tests check this arithmetic on the CPU against ATen's compositions, and a GPU
// run has only the launch, the indexing and the reductions left to prove.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define FS_HD __host__ __device__
#else
#define FS_HD
#endif

namespace fedshard::kernels {

FS_HD inline float fs_sqrt(float x) {
#if defined(__CUDA_ARCH__)
  return sqrtf(x);
#else
  return std::sqrt(x);
#endif
}
FS_HD inline double fs_sqrt(double x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}
FS_HD inline float fs_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}
FS_HD inline double fs_exp(double x) {
#if defined(__CUDA_ARCH__)
  return exp(x);
#else
  return std::exp(x);
#endif
}

// A storage type's rounding, applied to a value held in the accumulation type: identity for float32 and float64,
// round-to-nearest-even for bfloat16. The CPU loops and the kernels instantiate it with their own bfloat16 type.
template <typename Acc>
struct NoRounding {
  FS_HD Acc operator()(Acc v) const { return v; }
};

}  // namespace fedshard::kernels
