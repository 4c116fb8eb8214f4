#include "comm/mpi_ops.h"

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/survivors.h"
#include "comm/work.h"
#include "util/error.h"

namespace fedshard::comm {

int serialized(const std::function<int()>& call) {
  std::lock_guard<std::mutex> lock(progress_mutex());
  return call();
}

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  if (is_peer_failure(rc)) throw PeerLost(cat(call, ": ", mpi_error_string(rc)), is_revoked(rc));
  throw std::runtime_error(cat(call, ": ", mpi_error_string(rc)));
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

namespace {

// Tests until done, spinning briefly (small messages finish in microseconds), then sleeping between tests so the
// comm thread does not compete with compute on an oversubscribed node; the error code of the last test.
int poll(MPI_Request* req) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    const int rc = serialized([&] { return MPI_Test(req, &done, MPI_STATUS_IGNORE); });
    if (rc != MPI_SUCCESS || done) return rc;
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Throws for `rc`, the failed call of an exchange over comm, once the exchange's other requests have ended: after a
// lost peer comm is revoked first, so that they do (a receive left posted into a buffer that is freed on the way
// out would be written into later).
[[noreturn]] void fail_exchange(int rc, const char* call, MPI_Comm comm, std::initializer_list<MPI_Request*> others) {
  if (is_peer_failure(rc)) {
    revoke_mpi_comm(comm);
    for (MPI_Request* r : others)
      if (*r != MPI_REQUEST_NULL) poll(r);
  }
  mpi_check(rc, call);
  throw std::logic_error("fail_exchange without an error");
}

// Waits for a receive and a send posted together.
void wait_pair(MPI_Comm comm, MPI_Request* recv, MPI_Request* send) {
  if (const int rc = poll(recv); rc != MPI_SUCCESS) fail_exchange(rc, "MPI_Test", comm, {send});
  mpi_check(poll(send), "MPI_Test");
}

// The buffers of an exchange that failed on a lost peer are never freed: after a revoke MPI may end a receive in
// error while a live peer's fragments of it are still on their way (ob1 copies them in by the request's buffer
// address), and freed memory they landed in would corrupt the heap (seen: a survivor's malloc aborting). A few
// buffers per loss stay allocated until the process ends.
void keep_after_failure(std::initializer_list<at::Tensor> buffers) {
  static std::mutex mutex;
  static std::vector<at::Tensor> kept;
  std::lock_guard<std::mutex> lock(mutex);
  kept.insert(kept.end(), buffers.begin(), buffers.end());
}

// Runs an exchange over `buffers`, keeping them (keep_after_failure) if it fails on a lost peer.
template <typename Exchange>
int64_t keeping(std::initializer_list<at::Tensor> buffers, Exchange&& exchange) {
  try {
    return exchange();
  } catch (const PeerLost&) {
    keep_after_failure(buffers);
    throw;
  }
}

}  // namespace

void wait_request(MPI_Request* req) { mpi_check(poll(req), "MPI_Test"); }

namespace {

int mod(int a, int p) { return ((a % p) + p) % p; }

// Sends `send` to the next rank and receives `recv` from the previous one, concurrently; returns the bytes sent.
int64_t shift(const Ring& ring, const at::Tensor& send, const at::Tensor& recv) {
  FS_ASSERT(send.numel() <= std::numeric_limits<int>::max() && recv.numel() <= std::numeric_limits<int>::max(),
            "ring message exceeds MPI's int count");
  return keeping({send, recv}, [&] {
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    mpi_check(serialized([&] {
                return MPI_Irecv(recv.data_ptr(), static_cast<int>(recv.numel()), mpi_type(recv),
                                 mod(ring.rank - 1, ring.size), ring.tag, ring.comm, &reqs[0]);
              }),
              "MPI_Irecv");
    if (const int rc = serialized([&] {
          return MPI_Isend(send.data_ptr(), static_cast<int>(send.numel()), mpi_type(send),
                           mod(ring.rank + 1, ring.size), ring.tag, ring.comm, &reqs[1]);
        });
        rc != MPI_SUCCESS)
      fail_exchange(rc, "MPI_Isend", ring.comm, {&reqs[0]});
    wait_pair(ring.comm, &reqs[0], &reqs[1]);
    return static_cast<int64_t>(send.nbytes());
  });
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
int64_t reduce_scatter_segments(const Ring& ring, const at::Tensor& in, const Segments& seg, const at::Tensor& out) {
  const int p = ring.size, r = ring.rank;
  int64_t largest = 0;
  for (int i = 0; i < p; ++i) largest = std::max(largest, seg.size(i));
  auto acc = at::empty({largest}, in.options()), recv = at::empty({largest}, in.options());
  acc.narrow(0, 0, seg.size(mod(r - 1, p))).copy_(seg.of(in, mod(r - 1, p)));
  int64_t bytes = 0;
  for (int s = 0; s < p - 1; ++s) {
    const int sent = mod(r - s - 1, p), got = mod(r - s - 2, p);
    const auto recv_seg = recv.narrow(0, 0, seg.size(got));
    bytes += shift(ring, acc.narrow(0, 0, seg.size(sent)), recv_seg);
    at::Tensor dst = s == p - 2 ? out : acc.narrow(0, 0, seg.size(got));
    at::add_out(dst, recv_seg, seg.of(in, got));
  }
  return bytes;
}

// Step s: pass on segment rank-s (own or just received), receive segment rank-s-1.
int64_t all_gather_segments(const Ring& ring, const at::Tensor& buf, const Segments& seg) {
  const int p = ring.size, r = ring.rank;
  int64_t bytes = 0;
  for (int s = 0; s < p - 1; ++s) bytes += shift(ring, seg.of(buf, mod(r - s, p)), seg.of(buf, mod(r - s - 1, p)));
  return bytes;
}

}  // namespace

int64_t ring_reduce_scatter(const Ring& ring, const at::Tensor& in, const at::Tensor& out) {
  if (ring.size == 1) {
    out.copy_(in);
    return 0;
  }
  return reduce_scatter_segments(ring, in.reshape({-1}), Segments{in.numel(), ring.size}, out.reshape({-1}));
}

int64_t ring_all_gather(const Ring& ring, const at::Tensor& buf) {
  if (ring.size == 1) return 0;
  return all_gather_segments(ring, buf.reshape({-1}), Segments{buf.numel(), ring.size});
}

int64_t ring_all_reduce(const Ring& ring, const at::Tensor& io) {
  if (ring.size == 1) return 0;
  const auto flat = io.reshape({-1});
  const Segments seg{flat.numel(), ring.size};
  auto mine = at::empty({seg.size(ring.rank)}, flat.options());
  const int64_t bytes = reduce_scatter_segments(ring, flat, seg, mine);
  seg.of(flat, ring.rank).copy_(mine);
  return bytes + all_gather_segments(ring, flat, seg);
}

int64_t pairwise_all_to_all(const Ring& ring, const at::Tensor& in, const at::Tensor& out) {
  const int p = ring.size, r = ring.rank;
  const Segments seg{in.numel(), p};
  const auto src = in.reshape({-1}), dst = out.reshape({-1});
  FS_ASSERT(in.numel() % p == 0 && seg.size(0) <= std::numeric_limits<int>::max(), "all_to_all part sizes");
  seg.of(dst, r).copy_(seg.of(src, r));
  const int n = static_cast<int>(seg.size(0));
  return keeping({in, out}, [&] {
    int64_t bytes = 0;
    for (int s = 1; s < p; ++s) {
      const int to = mod(r + s, p), from = mod(r - s, p);
      MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
      mpi_check(serialized([&] {
                  return MPI_Irecv(seg.of(dst, from).data_ptr(), n, mpi_type(in), from, ring.tag, ring.comm, &reqs[0]);
                }),
                "MPI_Irecv");
      if (const int rc = serialized([&] {
            return MPI_Isend(seg.of(src, to).data_ptr(), n, mpi_type(in), to, ring.tag, ring.comm, &reqs[1]);
          });
          rc != MPI_SUCCESS)
        fail_exchange(rc, "MPI_Isend", ring.comm, {&reqs[0]});
      wait_pair(ring.comm, &reqs[0], &reqs[1]);
      bytes += static_cast<int64_t>(seg.of(src, to).nbytes());
    }
    return bytes;
  });
}

int64_t chain_broadcast(const Ring& ring, const at::Tensor& buf, int root) {
  const int p = ring.size, pos = mod(ring.rank - root, p);  // position along the chain, root first
  if (p == 1 || buf.numel() == 0) return 0;
  // Chunks let rank k+1 forward chunk c while rank k sends chunk c+1, so a long chain costs about one
  // buffer's time plus (p-2) chunks, not (p-1) buffers.
  constexpr int64_t kChunkBytes = 1 << 20;
  const auto flat = buf.reshape({-1});
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / static_cast<int64_t>(flat.element_size()));
  const int64_t n = flat.numel();
  const int prev = mod(ring.rank - 1, p), next = mod(ring.rank + 1, p);
  const bool receives = pos > 0, sends = pos < p - 1;
  return keeping({buf}, [&] {
    int64_t bytes = 0;
    MPI_Request send_req = MPI_REQUEST_NULL;
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const auto part = flat.narrow(0, begin, std::min(chunk, n - begin));
      const int count = static_cast<int>(part.numel());
      if (receives) {
        MPI_Request req = MPI_REQUEST_NULL;
        if (const int rc = serialized([&] {
              return MPI_Irecv(part.data_ptr(), count, mpi_type(part), prev, ring.tag, ring.comm, &req);
            });
            rc != MPI_SUCCESS)
          fail_exchange(rc, "MPI_Irecv", ring.comm, {&send_req});
        if (const int rc = poll(&req); rc != MPI_SUCCESS) fail_exchange(rc, "MPI_Test", ring.comm, {&send_req});
      }
      if (sends) {
        if (send_req != MPI_REQUEST_NULL) wait_request(&send_req);
        mpi_check(serialized([&] {
                    return MPI_Isend(part.data_ptr(), count, mpi_type(part), next, ring.tag, ring.comm, &send_req);
                  }),
                  "MPI_Isend");
        bytes += static_cast<int64_t>(part.nbytes());
      }
    }
    if (send_req != MPI_REQUEST_NULL) wait_request(&send_req);
    return bytes;
  });
}

}  // namespace fedshard::comm
