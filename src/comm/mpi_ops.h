// MPI plumbing of MpiCommunicator: checked calls, tensor datatypes, request polling, and the ring
// collectives it runs on its comm thread.
//
// Why our own rings: Open MPI's non-blocking collectives (libnbc) reduce-scatter by a binomial reduce to
// rank 0 and a linear scatter, and all-reduce in place by a binomial tree, so rank 0's link carries log2(p)
// full buffers where a ring carries (p-1)/p of one. Our rings send, summed over the ranks, exactly what the
// cost model prices, and each call returns the bytes it handed to MPI so the Ledger counts what was sent
// (docs/perf.md, docs/cost-model.md sections 1 and 8).
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

#include <functional>

namespace fedshard::comm {

void mpi_check(int rc, const char* call);
// An MPI call of a thread other than the one that agrees on failures, under comm::progress_mutex (survivors.h).
int serialized(const std::function<int()>& call);
MPI_Datatype mpi_type(const at::Tensor& t);
// Polls a request to completion without pinning a core.
void wait_request(MPI_Request* req);

struct Ring {
  MPI_Comm comm;
  int rank;
  int size;
  // The point-to-point tag of this collective's messages. A communicator gives each of its collectives the next
  // one (every member launches the same sequence), so a message that a collective abandoned after a failure left
  // on its way cannot match a later collective's receive (seen: a ring neighbour one collective ahead writing past
  // a receive buffer after a revoke).
  int tag = 0;
};

// All of these take contiguous CPU tensors, block until done, sum in the tensors' dtype, and return the bytes
// this rank handed to MPI_Isend (what the Ledger records as sent). A buffer of n elements is cut into p
// segments, segment i = [n*i/p, n*(i+1)/p) (integer division), so with n not divisible by p they differ by
// one element and so do the ranks' sent bytes; summed over the ranks they are exact multiples of the buffer.
// out (m elements) = sum over ranks of in[rank*m : (rank+1)*m]; in (size*m elements) is not modified.
// Sends every segment but its own: n - |seg(rank)| elements (n = size*m).
int64_t ring_reduce_scatter(const Ring& ring, const at::Tensor& in, const at::Tensor& out);
// buf (n elements): on entry segment `rank` holds this rank's part, on return every segment.
// Sends every segment but the next rank's: n - |seg(rank+1)| elements.
int64_t ring_all_gather(const Ring& ring, const at::Tensor& buf);
// io = sum over ranks of io, any length: reduce-scatter then all-gather, 2n - |seg(rank)| - |seg(rank+1)|.
int64_t ring_all_reduce(const Ring& ring, const at::Tensor& io);
// Part r of out (size equal parts) = part `rank` of rank r's in: step s sends part rank+s to rank+s and
// receives part rank-s from rank-s, so each rank sends (p-1)/p of its buffer.
int64_t pairwise_all_to_all(const Ring& ring, const at::Tensor& in, const at::Tensor& out);
// buf = root's buf, passed along the ring from the root in pipelined chunks: every rank but the one before
// the root sends the whole buffer once, (p-1) buffers in all as the formula's (p-1)/p per rank on average.
int64_t chain_broadcast(const Ring& ring, const at::Tensor& buf, int root);

}  // namespace fedshard::comm
