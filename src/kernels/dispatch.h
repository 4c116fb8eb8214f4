// What the fused operations' host code shares: the one dispatch between the CUDA launcher and the CPU loop, the
// storage dtypes they take, the rounding of each (for the CPU loops), and the dtype code and stream the launchers
// take.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>

#include "kernels/host_device.h"
#include "util/error.h"

#include "kernels/cuda_launch.h"

#ifdef FEDSHARD_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace fedshard::kernels {

// Rounding of a value in the accumulation type to storage type T and back (c10::BFloat16 rounds to nearest even,
// as __float2bfloat16 does on the device).
template <typename T, typename Acc>
struct RoundTo {
  Acc operator()(Acc v) const { return static_cast<Acc>(static_cast<T>(v)); }
};

template <typename T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};

inline at::ScalarType acc_dtype(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// Calls f(T{}) with T the storage type of `t`: float, double or c10::BFloat16.
template <typename F>
void with_storage_type(at::ScalarType t, const char* op, F&& f) {
  switch (t) {
    case at::kFloat: f(float{}); break;
    case at::kDouble: f(double{}); break;
    case at::kBFloat16: f(c10::BFloat16{}); break;
    default: FS_CHECK(false, op, ": model.kernels = fused supports float32, bfloat16 and float64, not ", t);
  }
}

inline cuda::Dtype cuda_dtype(at::ScalarType t) {
  return t == at::kDouble ? cuda::Dtype::Float64 : t == at::kBFloat16 ? cuda::Dtype::BFloat16 : cuda::Dtype::Float32;
}
inline cudaStream_t stream_of([[maybe_unused]] const at::Tensor& t) {
#ifdef FEDSHARD_CUDA
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#else
  return nullptr;
#endif
}

// A fused operation on `t`: on_cuda() (its launcher) for a CUDA tensor, else on_cpu(T{}) with T the storage type.
template <typename OnCuda, typename OnCpu>
void dispatch(const at::Tensor& t, const char* op, OnCuda&& on_cuda, OnCpu&& on_cpu) {
  if (t.is_cuda()) return on_cuda();
  with_storage_type(t.scalar_type(), op, std::forward<OnCpu>(on_cpu));
}

// A CUDA tensor reached a fused operation in a build without the kernels: the config refuses this first.
[[noreturn]] inline void no_cuda_kernels(const char* op) {
  throw std::logic_error(std::string(op) + ": a CUDA tensor in a build without the CUDA kernels");
}

}  // namespace fedshard::kernels
