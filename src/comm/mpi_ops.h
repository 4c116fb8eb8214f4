// MPI plumbing of MpiCommunicator: checked calls, tensor datatypes, request polling, and the ring
// collectives it runs on its comm thread.
//
// Why our own rings: Open MPI's non-blocking collectives (libnbc) reduce-scatter by a binomial reduce to
// rank 0 and a linear scatter, and all-reduce in place by a binomial tree, so rank 0's link carries log2(p)
// full buffers where a ring carries (p-1)/p of one. Rings send exactly the bytes the Ledger counts and the
// cost model prices (docs/perf.md, docs/cost-model.md section 8).
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

namespace fedshard::comm {

void mpi_check(int rc, const char* call);
MPI_Datatype mpi_type(const at::Tensor& t);
// Polls a request to completion without pinning a core.
void wait_request(MPI_Request* req);

struct Ring {
  MPI_Comm comm;
  int rank;
  int size;
};

// All of these take contiguous CPU tensors, block until done and sum in the tensors' dtype.
// out (n elements) = sum over ranks of in[rank*n : (rank+1)*n]; in (size*n elements) is not modified.
void ring_reduce_scatter(const Ring& ring, const at::Tensor& in, const at::Tensor& out);
// buf (size*n elements): on entry segment `rank` holds this rank's part, on return every segment.
void ring_all_gather(const Ring& ring, const at::Tensor& buf);
// io = sum over ranks of io, any length.
void ring_all_reduce(const Ring& ring, const at::Tensor& io);
// Part r of out (size equal parts) = part `rank` of rank r's in: step s sends part rank+s to rank+s and
// receives part rank-s from rank-s, so each rank sends (p-1)/p of its buffer.
void pairwise_all_to_all(const Ring& ring, const at::Tensor& in, const at::Tensor& out);

}  // namespace fedshard::comm
