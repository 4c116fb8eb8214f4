// Communicator over NCCL for CUDA tensors (built only when the LibTorch found has CUDA: FEDSHARD_CUDA).
// The NCCL unique id travels over the MPI sub-communicator that defines the members, so every fedshard
// communicator (group, shard, replica, cross) has an NCCL twin with the same ranks. Collectives run on a
// dedicated CUDA stream that first waits for the caller's current stream; a host callback on that stream
// completes the Work handle and records the bytes, so wait() returns once the result is in place.
#pragma once

#ifdef FEDSHARD_CUDA

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include "comm/communicator.h"

namespace fedshard::comm {

class NcclCommunicator : public Communicator {
 public:
  // Collective over `comm` (not taken over: the caller keeps and frees it). `device`: this rank's GPU.
  NcclCommunicator(MPI_Comm comm, std::string name, Tier tier, int device);
  ~NcclCommunicator() override;

  WorkHandle all_gather(const at::Tensor& in, const at::Tensor& out, Traffic k) override;
  WorkHandle reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op, Traffic k) override;
  WorkHandle all_reduce(const at::Tensor& inout, ReduceOp op, Traffic k) override;
  WorkHandle broadcast(const at::Tensor& inout, int root, Traffic k) override;
  WorkHandle barrier() override;

 private:
  WorkHandle launch(Collective c, const std::vector<at::Tensor>& buffers, double full_bytes, Traffic k,
                    const std::function<ncclResult_t(cudaStream_t)>& op);

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  int device_ = 0;
};

}  // namespace fedshard::comm

#endif  // FEDSHARD_CUDA
