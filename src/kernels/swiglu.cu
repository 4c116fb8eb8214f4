// The SwiGLU gate on the GPU, one thread per element. The arithmetic is kernels/swiglu_math.h's.
#include "kernels/cuda_storage.cuh"
#include "kernels/swiglu_math.h"

namespace fedshard::kernels::cuda {

namespace {

template <typename T>
__global__ void swiglu_forward_kernel(const T* g, const T* u, T* y, int64_t n) {
  using S = Storage<T>;
  const typename S::Round round;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = S::store(swiglu_value(S::load(g[i]), S::load(u[i]), round));
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* g, const T* u, const T* dy, T* dg, T* du, int64_t n) {
  using S = Storage<T>;
  using Acc = typename S::Acc;
  const typename S::Round round;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc a, b;
    swiglu_grad(S::load(g[i]), S::load(u[i]), S::load(dy[i]), round, a, b);
    dg[i] = S::store(a);
    du[i] = S::store(b);
  }
}

}  // namespace

void swiglu_forward(Dtype t, const void* g, const void* u, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_cuda_type(t, [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<T><<<elementwise_blocks(n), kElementThreads, 0, stream>>>(static_cast<const T*>(g), static_cast<const T*>(u),
                                                                        static_cast<T*>(y), n);
  });
  FS_CUDA_LAUNCHED("swiglu_forward");
}

void swiglu_backward(Dtype t, const void* g, const void* u, const void* dy, void* dg, void* du, int64_t n,
                     cudaStream_t stream) {
  if (n == 0) return;
  with_cuda_type(t, [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<elementwise_blocks(n), kElementThreads, 0, stream>>>(
        static_cast<const T*>(g), static_cast<const T*>(u), static_cast<const T*>(dy), static_cast<T*>(dg),
        static_cast<T*>(du), n);
  });
  FS_CUDA_LAUNCHED("swiglu_backward");
}

}  // namespace fedshard::kernels::cuda
