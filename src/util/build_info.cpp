#include "util/build_info.h"

#include <mpi.h>
#include <torch/version.h>

#ifdef FEDSHARD_SITES
#include <grpcpp/grpcpp.h>
#endif
#ifdef FEDSHARD_MPI_ULFM
#include <mpi-ext.h>
#endif

#ifdef FEDSHARD_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#include "util/error.h"

namespace fedshard {

namespace {

#ifdef FEDSHARD_CUDA
// cudaGetDeviceCount, not LibTorch's device count: the latter warns on stderr when no driver is present,
// and an error must stay one line.
int device_count(std::string* why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (why) *why = cudaGetErrorString(rc);
    return 0;
  }
  return n;
}
#endif

// The MPI library's name for itself up to its first comma or line end (e.g. "Open MPI v5.0.11"), and whether
// it has ULFM, the fault-tolerance extension (MPIX_Comm_revoke/agree/shrink). Callable before MPI_Init.
std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string name(text, static_cast<size_t>(len));
  name = name.substr(0, name.find_first_of(",\n"));
#ifdef FEDSHARD_MPI_ULFM
  name += " with ULFM";
#endif
  return name;
}

}  // namespace

bool built_with_ulfm() {
#ifdef FEDSHARD_MPI_ULFM
  return true;
#else
  return false;
#endif
}

bool built_with_cuda() {
#ifdef FEDSHARD_CUDA
  return true;
#else
  return false;
#endif
}

void use_gpu(int device) {
#ifdef FEDSHARD_CUDA
  const cudaError_t rc = cudaSetDevice(device);
  FS_CHECK(rc == cudaSuccess, "cannot use GPU ", device, ": ", cudaGetErrorString(rc));
#else
  (void)device;
#endif
}

int gpu_compute_capability(int device) {
#ifdef FEDSHARD_CUDA
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return 0;
  return major * 10 + minor;
#else
  (void)device;
  return 0;
#endif
}

int visible_gpus() {
#ifdef FEDSHARD_CUDA
  return device_count(nullptr);
#else
  return 0;
#endif
}

namespace {

// Sites across facilities (src/sites/): whether this build has the round server and a site's lane.
std::string sites_description() {
#ifdef FEDSHARD_SITES
  return cat("; sites: yes (gRPC ", grpc::Version(), ")");
#else
  return "; sites: no (built without gRPC C++ or OpenSSL)";
#endif
}

}  // namespace

std::string build_description() {
#ifdef FEDSHARD_CUDA
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int nccl = 0;
  ncclGetVersion(&nccl);
  std::string why;
  const int gpus = device_count(&why);
  return cat("LibTorch ", TORCH_VERSION, " with CUDA ", CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10,
             " (runtime ", runtime / 1000, ".", runtime % 1000 / 10, "), NCCL ", nccl / 10000, ".", nccl % 10000 / 100,
             ".", nccl % 100, "; MPI: ", mpi_library(), "; GPUs visible: ",
             gpus > 0 ? std::to_string(gpus) : "none (" + why + ")", sites_description());
#else
  return cat("LibTorch ", TORCH_VERSION, ", CPU only (built without CUDA: model.device = cuda is not available)",
             "; MPI: ", mpi_library(), sites_description());
#endif
}

}  // namespace fedshard
