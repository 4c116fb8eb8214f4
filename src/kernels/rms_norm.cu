// RMSNorm (with the block's residual add fused where given) on the GPU: one block per row for the forward and
// the input's gradient; the weight's gradient summed per column over each block's rows in shared memory, then
// over blocks. The arithmetic is kernels/rms_norm_math.h's.
#include "kernels/cuda_storage.cuh"
#include "kernels/rms_norm_math.h"

namespace fedshard::kernels::cuda {

namespace {

template <typename T>
__global__ void rms_norm_forward_kernel(const T* x, const T* delta, const T* w, T* h, T* y,
                                        typename Storage<T>::Acc* inv, int64_t dim, double eps) {
  using S = Storage<T>;
  using Acc = typename S::Acc;
  const typename S::Round round;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * dim;
  Acc sum = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    Acc v = S::load(x[o + j]);
    if (delta) {
      v = residual_value(v, S::load(delta[o + j]), round);
      h[o + j] = S::store(v);
    }
    sum += v * v;
  }
  const Acc iv = rms_inverse(block_sum(sum), dim, static_cast<Acc>(eps));
  if (threadIdx.x == 0) inv[blockIdx.x] = iv;
  const T* src = delta ? h : x;  // each thread reads back only the h elements it wrote
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    y[o + j] = S::store(rms_norm_value(S::load(src[o + j]), iv, S::load(w[j]), round));
}

template <typename T>
__global__ void rms_norm_backward_kernel(const T* dy, const T* dh, const T* x, const T* w,
                                         const typename Storage<T>::Acc* inv, T* dx, typename Storage<T>::Acc* partial,
                                         int64_t rows, int64_t dim) {
  using S = Storage<T>;
  using Acc = typename S::Acc;
  const typename S::Round round;
  extern __shared__ unsigned char shared_bytes[];
  Acc* dw = reinterpret_cast<Acc*>(shared_bytes);  // this block's sum per column; each column has one thread
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dw[j] = 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t o = r * dim;
    Acc dot = 0;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
      dot += rms_norm_dot_term(S::load(dy[o + j]), S::load(w[j]), S::load(x[o + j]));
    dot = block_sum(dot);
    const Acc iv = inv[r];
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const Acc g = S::load(dy[o + j]), xv = S::load(x[o + j]);
      Acc d = rms_norm_grad_input(g, S::load(w[j]), xv, iv, dot, dim);
      if (dh) d += S::load(dh[o + j]);
      dx[o + j] = S::store(d);
      dw[j] += rms_norm_grad_weight_term(g, xv, iv, round);
    }
  }
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) partial[static_cast<int64_t>(blockIdx.x) * dim + j] = dw[j];
}

template <typename Acc>
__global__ void sum_partials_kernel(const Acc* partial, Acc* out, int64_t blocks, int64_t dim) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  Acc s = 0;
  for (int64_t b = 0; b < blocks; ++b) s += partial[b * dim + j];
  out[j] = s;
}

}  // namespace

void rms_norm_forward(Dtype t, const void* x, const void* delta, const void* w, void* h, void* y, void* inv,
                      int64_t rows, int64_t dim, double eps, cudaStream_t stream) {
  if (rows == 0) return;
  with_cuda_type(t, [&](auto tag) {
    using T = decltype(tag);
    using Acc = typename Storage<T>::Acc;
    rms_norm_forward_kernel<T><<<static_cast<unsigned>(rows), row_threads(dim), 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(delta), static_cast<const T*>(w), static_cast<T*>(h),
        static_cast<T*>(y), static_cast<Acc*>(inv), dim, eps);
  });
  FS_CUDA_LAUNCHED("rms_norm_forward");
}

int64_t rms_norm_backward_blocks(int64_t rows) { return rows < 1024 ? (rows > 0 ? rows : 1) : 1024; }

void rms_norm_backward(Dtype t, const void* dy, const void* dh, const void* x, const void* w, const void* inv, void* dx,
                       void* partial, void* dw, int64_t rows, int64_t dim, cudaStream_t stream) {
  const int64_t blocks = rms_norm_backward_blocks(rows);
  with_cuda_type(t, [&](auto tag) {
    using T = decltype(tag);
    using Acc = typename Storage<T>::Acc;
    const size_t shared = static_cast<size_t>(dim) * sizeof(Acc);
    // Above the default 48 KiB of shared memory a kernel must ask for more (Hopper allows up to 227 KiB).
    if (shared > 48 * 1024)
      cudaFuncSetAttribute(rms_norm_backward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(shared));
    rms_norm_backward_kernel<T><<<static_cast<unsigned>(blocks), row_threads(dim), shared, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(dh), static_cast<const T*>(x), static_cast<const T*>(w),
        static_cast<const Acc*>(inv), static_cast<T*>(dx), static_cast<Acc*>(partial), rows, dim);
    FS_CUDA_LAUNCHED("rms_norm_backward");
    sum_partials_kernel<Acc><<<static_cast<unsigned>((dim + 255) / 256), 256, 0, stream>>>(
        static_cast<const Acc*>(partial), static_cast<Acc*>(dw), blocks, dim);
  });
  FS_CUDA_LAUNCHED("rms_norm_backward (weight)");
}

}  // namespace fedshard::kernels::cuda
