// Communicator over an MPI communicator for CPU tensors (device tensors are staged through host copies). Each
// collective runs on its lane's comm thread (docs/perf.md: why not the training thread): all-gather,
// reduce-scatter and all-reduce as rings, all-to-all as pairwise exchanges and broadcast as a pipelined chain,
// all of non-blocking point-to-point messages (mpi_ops.h: why not MPI's own) whose bytes are counted as they
// are handed to MPI; barrier as a non-blocking MPI barrier (no payload).
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_ops.h"

namespace fedshard::comm {

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor). Collective over `comm`: every member constructs.
  MpiCommunicator(MPI_Comm comm, std::string name, Tier tier, Lane lane = Lane::Inner);
  ~MpiCommunicator() override;

  WorkHandle all_gather(const at::Tensor& in, const at::Tensor& out, Traffic k) override;
  WorkHandle reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op, Traffic k) override;
  WorkHandle all_reduce(const at::Tensor& inout, ReduceOp op, Traffic k) override;
  WorkHandle all_to_all(const at::Tensor& in, const at::Tensor& out, Traffic k) override;
  WorkHandle broadcast(const at::Tensor& inout, int root, Traffic k) override;
  WorkHandle barrier() override;
  void revoke() override;

  MPI_Comm mpi_comm() const { return comm_; }

 private:
  // Runs `run` (the whole collective, blocking; returns the bytes it sent) on the comm thread and records it.
  // Size-1 communicators run it synchronously and record nothing.
  WorkHandle launch(Collective c, const at::Tensor& t, double full_bytes, Traffic k, std::function<int64_t()> run);

  // The next collective's ring, with its own tag (mpi_ops.h: Ring::tag).
  Ring next_ring();

  MPI_Comm comm_;
  Lane lane_;
  int64_t launched_ = 0;
  bool revoked_ = false;
};

int rank_in(MPI_Comm comm);
// Every rank's world rank in `comm`, in comm-rank order (collective over comm).
std::vector<int> world_ranks_of(MPI_Comm comm);

}  // namespace fedshard::comm
