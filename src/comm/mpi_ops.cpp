#include "comm/mpi_ops.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

#include "util/error.h"

namespace fedshard::comm {

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(cat(call, ": ", std::string(msg, len)));
}

MPI_Datatype mpi_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kBFloat16: return MPI_UINT16_T;  // moved as 16-bit words; rings sum with ATen, not MPI
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kByte: return MPI_UINT8_T;
    default: throw std::logic_error(cat("no MPI type for ", t.dtype().name()));
  }
}

// Spin briefly (small messages finish in microseconds), then sleep between tests so the comm thread does not
// compete with compute on an oversubscribed node.
void wait_request(MPI_Request* req) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

namespace {

// Point-to-point traffic of the rings: one collective at a time per communicator (its lane's thread runs them
// in order), and MPI matches messages per communicator.
constexpr int kRingTag = 0x5249;

int mod(int a, int p) { return ((a % p) + p) % p; }

// Sends `send` to the next rank and receives `recv` from the previous one, concurrently.
void shift(const Ring& ring, const at::Tensor& send, const at::Tensor& recv) {
  FS_ASSERT(send.numel() <= std::numeric_limits<int>::max() && recv.numel() <= std::numeric_limits<int>::max(),
            "ring message exceeds MPI's int count");
  MPI_Request reqs[2];
  mpi_check(MPI_Irecv(recv.data_ptr(), static_cast<int>(recv.numel()), mpi_type(recv), mod(ring.rank - 1, ring.size),
                      kRingTag, ring.comm, &reqs[0]),
            "MPI_Irecv");
  mpi_check(MPI_Isend(send.data_ptr(), static_cast<int>(send.numel()), mpi_type(send), mod(ring.rank + 1, ring.size),
                      kRingTag, ring.comm, &reqs[1]),
            "MPI_Isend");
  wait_request(&reqs[0]);
  wait_request(&reqs[1]);
}

// Segment i of a buffer of `count` elements split into p nearly equal parts.
struct Segments {
  int64_t count, p;
  int64_t begin(int i) const { return count * i / p; }
  int64_t size(int i) const { return begin(i + 1) - begin(i); }
  at::Tensor of(const at::Tensor& t, int i) const { return t.narrow(0, begin(i), size(i)); }
};

// Step s: send the partial sum of segment rank-s-1, receive that of rank-s-2 and add this rank's part to it.
// After p-1 steps `out` holds segment `rank` summed over all ranks (order: rank+1, rank+2, ..., rank).
void reduce_scatter_segments(const Ring& ring, const at::Tensor& in, const Segments& seg, const at::Tensor& out) {
  const int p = ring.size, r = ring.rank;
  int64_t largest = 0;
  for (int i = 0; i < p; ++i) largest = std::max(largest, seg.size(i));
  auto acc = at::empty({largest}, in.options()), recv = at::empty({largest}, in.options());
  acc.narrow(0, 0, seg.size(mod(r - 1, p))).copy_(seg.of(in, mod(r - 1, p)));
  for (int s = 0; s < p - 1; ++s) {
    const int sent = mod(r - s - 1, p), got = mod(r - s - 2, p);
    const auto recv_seg = recv.narrow(0, 0, seg.size(got));
    shift(ring, acc.narrow(0, 0, seg.size(sent)), recv_seg);
    at::Tensor dst = s == p - 2 ? out : acc.narrow(0, 0, seg.size(got));
    at::add_out(dst, recv_seg, seg.of(in, got));
  }
}

// Step s: pass on segment rank-s (own or just received), receive segment rank-s-1.
void all_gather_segments(const Ring& ring, const at::Tensor& buf, const Segments& seg) {
  const int p = ring.size, r = ring.rank;
  for (int s = 0; s < p - 1; ++s) shift(ring, seg.of(buf, mod(r - s, p)), seg.of(buf, mod(r - s - 1, p)));
}

}  // namespace

void ring_reduce_scatter(const Ring& ring, const at::Tensor& in, const at::Tensor& out) {
  if (ring.size == 1) {
    out.copy_(in);
    return;
  }
  reduce_scatter_segments(ring, in.reshape({-1}), Segments{in.numel(), ring.size}, out.reshape({-1}));
}

void ring_all_gather(const Ring& ring, const at::Tensor& buf) {
  if (ring.size > 1) all_gather_segments(ring, buf.reshape({-1}), Segments{buf.numel(), ring.size});
}

void ring_all_reduce(const Ring& ring, const at::Tensor& io) {
  if (ring.size == 1) return;
  const auto flat = io.reshape({-1});
  const Segments seg{flat.numel(), ring.size};
  auto mine = at::empty({seg.size(ring.rank)}, flat.options());
  reduce_scatter_segments(ring, flat, seg, mine);
  seg.of(flat, ring.rank).copy_(mine);
  all_gather_segments(ring, flat, seg);
}

void pairwise_all_to_all(const Ring& ring, const at::Tensor& in, const at::Tensor& out) {
  const int p = ring.size, r = ring.rank;
  const Segments seg{in.numel(), p};
  const auto src = in.reshape({-1}), dst = out.reshape({-1});
  FS_ASSERT(in.numel() % p == 0 && seg.size(0) <= std::numeric_limits<int>::max(), "all_to_all part sizes");
  seg.of(dst, r).copy_(seg.of(src, r));
  const int n = static_cast<int>(seg.size(0));
  for (int s = 1; s < p; ++s) {
    const int to = mod(r + s, p), from = mod(r - s, p);
    MPI_Request reqs[2];
    mpi_check(MPI_Irecv(seg.of(dst, from).data_ptr(), n, mpi_type(in), from, kRingTag, ring.comm, &reqs[0]), "MPI_Irecv");
    mpi_check(MPI_Isend(seg.of(src, to).data_ptr(), n, mpi_type(in), to, kRingTag, ring.comm, &reqs[1]), "MPI_Isend");
    wait_request(&reqs[0]);
    wait_request(&reqs[1]);
  }
}

}  // namespace fedshard::comm
