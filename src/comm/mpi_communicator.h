// Communicator over an MPI communicator for CPU tensors. Collectives are started as non-blocking MPI calls
// on the process's comm thread, which polls them to completion (docs/perf.md: why not the training thread).
#pragma once

#include <mpi.h>

#include "comm/communicator.h"

namespace fedshard::comm {

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor). Collective over `comm`: every member constructs.
  MpiCommunicator(MPI_Comm comm, std::string name, Tier tier);
  ~MpiCommunicator() override;

  WorkHandle all_gather(const at::Tensor& in, const at::Tensor& out, Traffic k) override;
  WorkHandle reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op, Traffic k) override;
  WorkHandle all_reduce(const at::Tensor& inout, ReduceOp op, Traffic k) override;
  WorkHandle broadcast(const at::Tensor& inout, int root, Traffic k) override;
  WorkHandle barrier() override;

  MPI_Comm mpi_comm() const { return comm_; }

 private:
  // Runs `start` (which issues one non-blocking MPI call into `req`) on the comm thread, polls it, runs
  // `finish`, records the bytes. Size-1 communicators run synchronously and record nothing.
  WorkHandle launch(Collective c, const at::Tensor& t, double full_bytes, Traffic k,
                    std::function<void(MPI_Request*)> start, std::function<void()> finish);

  MPI_Comm comm_;
};

int rank_in(MPI_Comm comm);
// Every rank's world rank in `comm`, in comm-rank order (collective over comm).
std::vector<int> world_ranks_of(MPI_Comm comm);

}  // namespace fedshard::comm
