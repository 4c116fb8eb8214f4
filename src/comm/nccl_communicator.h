// Communicator over NCCL for CUDA tensors (built only when the LibTorch found has CUDA: FEDSHARD_CUDA).
// The world communicator is made from an NCCL unique id broadcast over MPI; every other one (group, shard,
// replica, segments) is split from it with ncclCommSplit, with the same colour and key as its MPI twin.
//
// Ordering: all communicators of a rank share one comm stream, so collectives run in submission order, as
// the CPU backend's comm thread runs them (a replica all-reduce reads what the shard reduce-scatter before it
// wrote into the same buffer). Each launch makes the comm stream wait for the caller's stream (the buffers'
// producers); Work::wait makes the caller's stream wait for the collective's event, without blocking the
// host, so kernel launches are not stalled at every unit. A host callback on the comm stream completes the
// handle and records the bytes. Barriers, and collectives on a link-emulated tier, do block the host.
#pragma once

#ifdef FEDSHARD_CUDA

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/communicator.h"

namespace fedshard::comm {

// The rank's one comm stream, shared by all its NCCL communicators, and the completion events of their
// collectives. A collective's handle may be dropped by its caller before the collective ends, so the host
// function that completes it may drop the last reference: CUDA forbids CUDA calls in a host function, so an
// event is handed back to this pool (a mutex and a vector) and destroyed only with the pool. The pool dies
// after the last communicator, which synchronizes the stream first, so no host function still runs then.
struct CommStream {
  explicit CommStream(int device);
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;
  cudaEvent_t take_event();            // a free event, or a new one (host thread only)
  void give_back(cudaEvent_t event);   // no CUDA call: safe inside a host function
  int device;
  cudaStream_t stream = nullptr;

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
  std::vector<cudaEvent_t> all_;
};

class NcclCommunicator : public Communicator {
 public:
  // The world communicator over `comm`'s members (collective over `comm`, which the caller keeps and frees).
  NcclCommunicator(MPI_Comm comm, std::string name, Tier tier, int device);
  // A sub-communicator of `parent` (collective over every member of parent): the ranks that pass the same
  // colour, ordered by key; `comm` is its MPI twin (same members), used only to learn them.
  NcclCommunicator(NcclCommunicator& parent, int color, int key, MPI_Comm comm, std::string name, Tier tier);
  // This rank's part in a split of `parent` that does not include it.
  static void sit_out_split(NcclCommunicator& parent);
  ~NcclCommunicator() override;

  WorkHandle all_gather(const at::Tensor& in, const at::Tensor& out, Traffic k) override;
  WorkHandle reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op, Traffic k) override;
  WorkHandle all_reduce(const at::Tensor& inout, ReduceOp op, Traffic k) override;
  WorkHandle all_to_all(const at::Tensor& in, const at::Tensor& out, Traffic k) override;
  WorkHandle broadcast(const at::Tensor& inout, int root, Traffic k) override;
  WorkHandle barrier() override;
  // ncclCommAbort: ends this rank's pending NCCL work on the communicator, which is unusable after it.
  void revoke() override;

 private:
  WorkHandle launch(Collective c, const std::vector<at::Tensor>& buffers, double full_bytes, Traffic k,
                    bool host_blocking, const std::function<ncclResult_t(cudaStream_t)>& op);

  ncclComm_t comm_ = nullptr;
  std::shared_ptr<CommStream> stream_;
  cudaEvent_t ready_ = nullptr;  // the caller's stream at launch, for the comm stream to wait on
};

}  // namespace fedshard::comm

#endif  // FEDSHARD_CUDA
