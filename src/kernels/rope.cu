// Rotary embedding on the GPU: one thread per rotated pair (row, head, i), in place or out of place.
// The arithmetic is kernels/rope_math.h's.
#include "kernels/cuda_storage.cuh"
#include "kernels/rope_math.h"

namespace fedshard::kernels::cuda {

namespace {

template <typename T>
__global__ void rope_kernel(const T* in, T* out, const typename Storage<T>::Acc* cos, const typename Storage<T>::Acc* sin,
                            int64_t pairs, int64_t seq, int64_t heads, int64_t head_dim, bool back) {
  using S = Storage<T>;
  using Acc = typename S::Acc;
  const typename S::Round round;
  const int64_t half = head_dim / 2;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = p % half, head_row = p / half, row = head_row / heads;
    const int64_t t = row % seq, o = head_row * head_dim;
    const Acc c = cos[t * head_dim + i], s = sin[t * head_dim + i];
    const Acc a = S::load(in[o + i]), b = S::load(in[o + half + i]);
    Acc ya, yb;
    if (back)
      rope_rotate_back(a, b, c, s, round, ya, yb);
    else
      rope_rotate(a, b, c, s, round, ya, yb);
    out[o + i] = S::store(ya);
    out[o + half + i] = S::store(yb);
  }
}

}  // namespace

void rope(Dtype t, const void* in, void* out, const void* cos, const void* sin, int64_t rows, int64_t seq,
          int64_t heads, int64_t head_dim, bool back, cudaStream_t stream) {
  const int64_t pairs = rows * heads * (head_dim / 2);
  if (pairs == 0) return;
  with_cuda_type(t, [&](auto tag) {
    using T = decltype(tag);
    using Acc = typename Storage<T>::Acc;
    rope_kernel<T><<<elementwise_blocks(pairs), kElementThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), static_cast<const Acc*>(cos), static_cast<const Acc*>(sin),
        pairs, seq, heads, head_dim, back);
  });
  FS_CUDA_LAUNCHED("rope");
}

}  // namespace fedshard::kernels::cuda
