// The CUDA kernels' launchers (kernels/*.cu): raw pointers on the caller's stream, so that the .cu files need no
// ATen header. Storage dtype by code; `Acc` buffers (inv, dw) are float32 for float32 and bfloat16 data, float64
// for float64 data. A build without CUDA declares them too and kernels/no_cuda_kernels.cpp defines them to refuse,
// so the operations' host code is one in both builds (kernels/dispatch.h).
#pragma once

#if defined(FEDSHARD_CUDA) || defined(__CUDACC__)
#include <cuda_runtime_api.h>
#else
struct CUstream_st;
using cudaStream_t = CUstream_st*;
#endif

#include <cstdint>

namespace fedshard::kernels::cuda {

enum class Dtype { Float32, Float64, BFloat16 };

// y = rms_norm(x) * w per row; with delta, h = x + delta first (written to h) and the norm taken of it.
void rms_norm_forward(Dtype t, const void* x, const void* delta, const void* w, void* h, void* y, void* inv,
                      int64_t rows, int64_t dim, double eps, cudaStream_t stream);
// dx (plus dh where given) per row; dw summed over rows into `dw` (Acc, dim elements) through `partial` (Acc,
// blocks x dim): `blocks` is rms_norm_backward_blocks(rows).
int64_t rms_norm_backward_blocks(int64_t rows);
void rms_norm_backward(Dtype t, const void* dy, const void* dh, const void* x, const void* w, const void* inv, void* dx,
                       void* partial, void* dw, int64_t rows, int64_t dim, cudaStream_t stream);

// Rotates (or with `back`, rotates back) pairs of every head of rows [B*T, heads*head_dim]; in and out may alias.
// cos/sin: Acc [seq, head_dim].
void rope(Dtype t, const void* in, void* out, const void* cos, const void* sin, int64_t rows, int64_t seq,
          int64_t heads, int64_t head_dim, bool back, cudaStream_t stream);

void swiglu_forward(Dtype t, const void* g, const void* u, void* y, int64_t n, cudaStream_t stream);
void swiglu_backward(Dtype t, const void* g, const void* u, const void* dy, void* dg, void* du, int64_t n,
                     cudaStream_t stream);

}  // namespace fedshard::kernels::cuda
