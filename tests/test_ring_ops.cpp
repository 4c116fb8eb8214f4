// The ring collectives of src/comm/mpi_ops.cpp on their own, against sums computed here in float64 from every
// rank's inputs: every size (smaller than the ring, odd, uneven last segments), fp32 / fp64 / bf16, on the
// world and on a split communicator. Inputs are small integers, so every dtype sums them exactly and a dropped
// or doubled ring step shows as a wrong element. The bytes each call says it handed to MPI_Isend are checked
// against the exact per-rank count (mpi_ops.h) and, summed over the ranks, against the ring formula (to
// rounding: the formula computes (p-1)/p in floating point).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_ops.h"
#include "comm/mpi_runtime.h"

using namespace fedshard;

namespace {

// Rank r's input element i: (7r + 3i + floor(i/5)) mod 7 - 3, an integer in [-3, 3], so sums over 8 ranks
// stay exact even in bf16.
at::Tensor inputs(int r, int64_t n, at::ScalarType dtype) {
  const auto i = at::arange(n, at::kLong);
  return ((i * 3 + i.div(5, "floor") + r * 7).remainder(7) - 3).to(dtype);
}

// Segment i of n elements over p ranks, as mpi_ops.h defines it.
int64_t seg(int64_t n, int p, int i) { return n * (i + 1) / p - n * i / p; }

int64_t sum_over_ranks(const comm::Ring& ring, int64_t mine) {
  int64_t total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, ring.comm);
  return total;
}

void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const auto g = got.to(at::kDouble), w = want.to(at::kDouble);
  ASSERT_EQ(g.numel(), w.numel()) << what;
  EXPECT_TRUE(at::equal(g, w)) << what << ": first difference at "
                               << (g != w).nonzero().flatten().slice(0, 0, 1) << " of " << g.numel();
}

// This rank sent exactly `want` bytes; summed over the ranks, what the ring formula says p ranks send.
void expect_sent(const comm::Ring& ring, int64_t sent, int64_t want, comm::Collective c, int64_t full_bytes,
                 const std::string& what) {
  EXPECT_EQ(sent, want) << what;
  EXPECT_DOUBLE_EQ(static_cast<double>(sum_over_ranks(ring, sent)),
                   ring.size * comm::ring_bus_bytes(c, static_cast<double>(full_bytes), ring.size))
      << what;
}

struct RingCase {
  comm::Ring ring;
  std::string name;
};

std::vector<RingCase> make_rings() {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<RingCase> out = {{{MPI_COMM_WORLD, rank, size}, "world"}};
  if (size >= 3) {  // every other rank, reversed: a ring whose neighbours are not world neighbours
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    int r = 0, p = 0;
    MPI_Comm_rank(half, &r);
    MPI_Comm_size(half, &p);
    out.push_back({{half, r, p}, "split"});
  }
  return out;
}

// Made once: the split communicator lives for the whole test binary.
const std::vector<RingCase>& rings() {
  static const std::vector<RingCase> cases = make_rings();
  return cases;
}

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kBFloat16};

std::vector<int64_t> sizes(int p) { return {1, 2, static_cast<int64_t>(p) - 1, p, p + 1, 7, 1000, 1001, 65537}; }

TEST(RingOps, AllReduceSumsEveryElementAndSendsTheExactBytes) {
  for (const auto& rc : rings()) {
    const auto& ring = rc.ring;
    const int p = ring.size, r = ring.rank;
    for (auto dtype : kDtypes)
      for (int64_t n : sizes(p)) {
        if (n <= 0) continue;
        auto io = inputs(r, n, dtype);
        auto want = at::zeros({n}, at::kDouble);
        for (int q = 0; q < p; ++q) want += inputs(q, n, at::kDouble);
        const int64_t sent = comm::ring_all_reduce(ring, io);
        const std::string what = rc.name + " all_reduce n=" + std::to_string(n) + " " + c10::toString(dtype);
        expect_equal(io, want, what);
        const int64_t elem = at::elementSize(dtype);
        expect_sent(ring, sent, p == 1 ? 0 : (2 * n - seg(n, p, r) - seg(n, p, (r + 1) % p)) * elem,
                    comm::Collective::AllReduce, n * elem, what);
      }
  }
}

TEST(RingOps, ReduceScatterGivesEachRankItsSummedPart) {
  for (const auto& rc : rings()) {
    const auto& ring = rc.ring;
    const int p = ring.size, r = ring.rank;
    for (auto dtype : kDtypes)
      for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{1001}}) {
        auto in = inputs(r, p * m, dtype), in_copy = in.clone();
        auto out = at::empty({m}, in.options());
        auto want = at::zeros({m}, at::kDouble);
        for (int q = 0; q < p; ++q) want += inputs(q, p * m, at::kDouble).narrow(0, r * m, m);
        const int64_t sent = comm::ring_reduce_scatter(ring, in, out);
        const std::string what = rc.name + " reduce_scatter m=" + std::to_string(m) + " " + c10::toString(dtype);
        expect_equal(out, want, what);
        expect_equal(in, in_copy, what + " (input left as it was)");
        const int64_t elem = at::elementSize(dtype);
        expect_sent(ring, sent, (p - 1) * m * elem, comm::Collective::ReduceScatter, p * m * elem, what);
      }
  }
}

TEST(RingOps, AllGatherOfUnevenSegmentsGivesEveryRankEverySegment) {
  for (const auto& rc : rings()) {
    const auto& ring = rc.ring;
    const int p = ring.size, r = ring.rank;
    for (auto dtype : kDtypes)
      for (int64_t n : sizes(p)) {
        if (n <= 0) continue;
        // Segment q holds ring rank q's values; on entry only this rank's own segment is filled.
        auto want = at::empty({n}, at::kDouble);
        for (int q = 0; q < p; ++q)
          want.narrow(0, n * q / p, seg(n, p, q)).copy_(inputs(q, n, at::kDouble).narrow(0, n * q / p, seg(n, p, q)));
        auto buf = at::full({n}, 99.0, dtype);
        buf.narrow(0, n * r / p, seg(n, p, r)).copy_(want.narrow(0, n * r / p, seg(n, p, r)));
        const int64_t sent = comm::ring_all_gather(ring, buf);
        const std::string what = rc.name + " all_gather n=" + std::to_string(n) + " " + c10::toString(dtype);
        expect_equal(buf, want, what);
        const int64_t elem = at::elementSize(dtype);
        expect_sent(ring, sent, p == 1 ? 0 : (n - seg(n, p, (r + 1) % p)) * elem, comm::Collective::AllGather,
                    n * elem, what);
      }
  }
}

TEST(RingOps, AllToAllDeliversEveryPartToItsRank) {
  for (const auto& rc : rings()) {
    const auto& ring = rc.ring;
    const int p = ring.size, r = ring.rank;
    for (auto dtype : kDtypes)
      for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{1001}}) {
        auto in = inputs(r, p * m, dtype), out = at::full({p * m}, 99.0, dtype);
        auto want = at::empty({p * m}, at::kDouble);
        for (int q = 0; q < p; ++q) want.narrow(0, q * m, m).copy_(inputs(q, p * m, at::kDouble).narrow(0, r * m, m));
        const int64_t sent = comm::pairwise_all_to_all(ring, in, out);
        const std::string what = rc.name + " all_to_all m=" + std::to_string(m) + " " + c10::toString(dtype);
        expect_equal(out, want, what);
        const int64_t elem = at::elementSize(dtype);
        expect_sent(ring, sent, (p - 1) * m * elem, comm::Collective::AllToAll, p * m * elem, what);
      }
  }
}

TEST(RingOps, ChainBroadcastFromEveryRoot) {
  for (const auto& rc : rings()) {
    const auto& ring = rc.ring;
    const int p = ring.size, r = ring.rank;
    // 600,000 float64 = 4.8 MB: several pipelined chunks of 1 MiB, the last one short.
    for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{600000}})
      for (int root = 0; root < p; ++root) {
        auto buf = r == root ? inputs(root, n, at::kDouble) : at::zeros({n}, at::kDouble);
        const int64_t sent = comm::chain_broadcast(ring, buf, root);
        const std::string what = rc.name + " broadcast n=" + std::to_string(n) + " root " + std::to_string(root);
        expect_equal(buf, inputs(root, n, at::kDouble), what);
        const bool last_in_chain = (r + 1) % p == root;
        expect_sent(ring, sent, p == 1 || last_in_chain ? 0 : n * 8, comm::Collective::Broadcast, n * 8, what);
      }
  }
}

// Through the communicator: what the Ledger records as sent is what the ring handed to MPI, next to the
// formula's figure for the same call.
TEST(RingOps, LedgerRecordsTheBytesHandedToMpi) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  comm::MpiCommunicator world(dup, "ring-test", comm::Tier::InterNode);
  const int p = world.size(), r = world.rank();
  if (p == 1) GTEST_SKIP() << "a communicator of one rank sends nothing";
  const int64_t n = 1001;
  auto io = inputs(r, n, at::kFloat);
  const auto before = comm::Ledger::instance().snapshot();
  world.all_reduce(io, comm::ReduceOp::Sum, comm::Traffic::Data)->wait();
  const auto d = comm::Ledger::instance().snapshot() - before;
  const auto& t = d.by_comm.at("ring-test");
  EXPECT_EQ(t.sent_bytes, static_cast<double>((2 * n - seg(n, p, r) - seg(n, p, (r + 1) % p)) * 4));
  EXPECT_DOUBLE_EQ(t.formula_bytes, comm::ring_bus_bytes(comm::Collective::AllReduce, n * 4.0, p));
  EXPECT_EQ(d.at(comm::Tier::InterNode, comm::Traffic::Data).sent_bytes, t.sent_bytes);
  EXPECT_EQ(t.calls, 1);
}


// A rank that abandons a collective after a failure may leave a message of it on its way (a ring step's send whose
// receive its neighbour never posts). The communicator's next collective must not take it for one of its own: each
// collective has its own tag (mpi_ops.h: Ring::tag; the first one's is 0).
TEST(RingOps, AMessageLeftByAnEarlierCollectiveIsNotTakenByTheNext) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  comm::MpiCommunicator c(dup, "tags", comm::Tier::Node);
  const int p = c.size(), r = c.rank();
  if (p == 1) GTEST_SKIP() << "a communicator of one rank sends nothing";
  const int64_t n = 1001;
  auto first = inputs(r, n, at::kFloat);
  c.all_reduce(first, comm::ReduceOp::Sum, comm::Traffic::Data)->wait();
  const float stray_value = 1e6f;
  MPI_Request stray;
  MPI_Isend(&stray_value, 1, MPI_FLOAT, (r + 1) % p, /*the first collective's tag*/ 0, dup, &stray);
  auto io = inputs(r, n, at::kFloat);
  auto want = at::zeros({n}, at::kDouble);
  for (int q = 0; q < p; ++q) want += inputs(q, n, at::kDouble);
  c.all_reduce(io, comm::ReduceOp::Sum, comm::Traffic::Data)->wait();
  expect_equal(io, want, "the all_reduce after a stray message");
  // Still there, for whoever posts a receive under its tag.
  float got = 0;
  MPI_Status status;
  MPI_Recv(&got, 1, MPI_FLOAT, (r + p - 1) % p, MPI_ANY_TAG, dup, &status);
  EXPECT_EQ(got, stray_value);
  EXPECT_EQ(status.MPI_TAG, 0);
  MPI_Wait(&stray, MPI_STATUS_IGNORE);
}

}  // namespace
