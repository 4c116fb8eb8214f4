// The launchers of kernels/cuda_launch.h in a build without CUDA: a CUDA tensor cannot reach them (the config
// refuses model.device = cuda first), and if one did, they say so instead of running.
#ifndef FEDSHARD_CUDA

#include "kernels/dispatch.h"

namespace fedshard::kernels::cuda {

void rms_norm_forward(Dtype, const void*, const void*, const void*, void*, void*, void*, int64_t, int64_t, double,
                      cudaStream_t) {
  no_cuda_kernels("rms_norm");
}
int64_t rms_norm_backward_blocks(int64_t) { no_cuda_kernels("rms_norm backward"); }
void rms_norm_backward(Dtype, const void*, const void*, const void*, const void*, const void*, void*, void*, void*,
                       int64_t, int64_t, cudaStream_t) {
  no_cuda_kernels("rms_norm backward");
}
void rope(Dtype, const void*, void*, const void*, const void*, int64_t, int64_t, int64_t, int64_t, bool, cudaStream_t) {
  no_cuda_kernels("rope");
}
void swiglu_forward(Dtype, const void*, const void*, void*, int64_t, cudaStream_t) { no_cuda_kernels("swiglu_gate"); }
void swiglu_backward(Dtype, const void*, const void*, const void*, void*, void*, int64_t, cudaStream_t) {
  no_cuda_kernels("swiglu_gate backward");
}

}  // namespace fedshard::kernels::cuda

#endif
