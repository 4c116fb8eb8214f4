// What the CUDA kernels share: each storage type's loads, stores and rounding, the dtype switch of the launchers,
// a block-wide sum, and the launch check (llm.c's cudaCheck: file and line of a failed launch).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "kernels/cuda_launch.h"
#include "kernels/host_device.h"

namespace fedshard::kernels::cuda {

template <typename T>
struct Storage;

template <>
struct Storage<float> {
  using Acc = float;
  using Round = NoRounding<float>;
  static __device__ __forceinline__ float load(float v) { return v; }
  static __device__ __forceinline__ float store(float v) { return v; }
};

template <>
struct Storage<double> {
  using Acc = double;
  using Round = NoRounding<double>;
  static __device__ __forceinline__ double load(double v) { return v; }
  static __device__ __forceinline__ double store(double v) { return v; }
};

struct RoundBf16 {
  FS_HD float operator()(float v) const { return __bfloat162float(__float2bfloat16(v)); }
};

template <>
struct Storage<__nv_bfloat16> {
  using Acc = float;
  using Round = RoundBf16;
  static __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 store(float v) { return __float2bfloat16(v); }
};

template <typename F>
void with_cuda_type(Dtype t, F&& f) {
  switch (t) {
    case Dtype::Float32: f(float{}); break;
    case Dtype::Float64: f(double{}); break;
    case Dtype::BFloat16: f(__nv_bfloat16{}); break;
  }
}

inline void check_launch(const char* what, const char* file, int line) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " + cudaGetErrorString(e));
}
#define FS_CUDA_LAUNCHED(what) ::fedshard::kernels::cuda::check_launch(what, __FILE__, __LINE__)

// The sum of v over the block (blockDim.x a multiple of 32), returned to every thread.
template <typename Acc>
__device__ Acc block_sum(Acc v) {
  __shared__ Acc warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? warp_sums[lane] : Acc(0);
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) warp_sums[0] = v;
  }
  __syncthreads();
  const Acc total = warp_sums[0];
  __syncthreads();  // warp_sums is written again by the next call
  return total;
}

// Blocks of kElementThreads for a grid-stride loop over n elements: enough to cover them, at most 65536 (each
// thread then takes several).
constexpr int kElementThreads = 256;
inline unsigned elementwise_blocks(int64_t n) {
  const int64_t b = (n + kElementThreads - 1) / kElementThreads;
  return static_cast<unsigned>(b < 65536 ? b : 65536);
}

// Threads per row-block: a multiple of 32, at most 512, no more than the row needs.
inline int row_threads(int64_t dim) {
  const int64_t t = (dim + 31) / 32 * 32;
  return static_cast<int>(t < 512 ? t : 512);
}

}  // namespace fedshard::kernels::cuda
