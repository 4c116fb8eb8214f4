// Link emulation: a collective's handle completes when the alpha-beta time of its ring algorithm on its tier
// has passed since the collective started (so compute overlaps the hold), and queues behind the previous
// emulated collective of its lane. The model is checked on given time points (LinkEmulator::release_time), so
// no assertion depends on how fast or loaded the machine is; one real collective checks that a handle is never
// released before its modelled time (a lower bound, which no load can break).
#include <gtest/gtest.h>

#include <chrono>

#include "comm/link_emulation.h"
#include "comm/mpi_runtime.h"
#include "comm/topology.h"

using namespace fedshard;
using Clock = comm::LinkEmulator::Clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
Clock::duration secs(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }
double between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

class LinkEmulation : public ::testing::Test {
 protected:
  void SetUp() override {
    // One rank per emulated node: the world communicator is inter-node.
    topo_ = std::make_unique<comm::Topology>(comm::Layout::uniform(comm::MpiRuntime::get().world_size(), 0, 0),
                                             comm::TopologySpec{1});
    link_ = comm::parse_link_spec("100MB/s,1ms");
    comm::LinkEmulator::instance().set(comm::Tier::InterNode, link_);
  }
  void TearDown() override { comm::LinkEmulator::instance().clear(); }
  // The release time of a 4 MiB all-reduce over 4 ranks that really ran [start, end) on `lane`.
  Clock::time_point release(comm::Lane lane, Clock::time_point start, Clock::time_point end) {
    return comm::LinkEmulator::instance().release_time(comm::Tier::InterNode, lane, comm::Collective::AllReduce,
                                                       4.0 * (1 << 20), 4, start, end);
  }
  std::unique_ptr<comm::Topology> topo_;
  comm::LinkSpec link_;
};

}  // namespace

TEST_F(LinkEmulation, HoldsACollectiveForItsAlphaBetaTime) {
  auto& w = topo_->world();
  ASSERT_EQ(w.tier(), comm::Tier::InterNode);
  auto buf = at::ones({1 << 20});  // 4 MiB
  const double want = link_.seconds(comm::Collective::AllReduce, 4.0 * (1 << 20), w.size());
  EXPECT_NEAR(want, w.size() > 1 ? 2.0 * (w.size() - 1) * 1e-3 + 2.0 * (w.size() - 1) / w.size() * 4194304 / 1e8 : 0.0,
              1e-12);
  w.barrier()->wait();
  const auto t0 = Clock::now();
  w.all_reduce(buf, comm::ReduceOp::Sum)->wait();
  EXPECT_GE(since(t0), want) << "released before its modelled time";
  EXPECT_EQ(buf[0].item<float>(), static_cast<float>(w.size()));  // it still ran for real
}

TEST_F(LinkEmulation, TheHoldCountsFromTheCollectivesStartSoComputeOverlapsIt) {
  const double model = link_.seconds(comm::Collective::AllReduce, 4.0 * (1 << 20), 4);
  const auto t0 = Clock::now() + std::chrono::hours(1);  // after any collective of the other tests
  // Ran for 1 ms of its modelled time: released when the model says, whenever its caller waits.
  EXPECT_NEAR(between(t0, release(comm::Lane::Inner, t0, t0 + secs(1e-3))), model, 1e-9);
  // A real run slower than the model is released when it really ended.
  const auto t1 = t0 + secs(10);
  EXPECT_NEAR(between(t1, release(comm::Lane::Inner, t1, t1 + secs(3 * model))), 3 * model, 1e-9);
}

TEST_F(LinkEmulation, BackToBackCollectivesSerializePerLane) {
  const double model = link_.seconds(comm::Collective::AllReduce, 4.0 * (1 << 20), 4);
  const auto t0 = Clock::now() + std::chrono::hours(2);
  const auto first = release(comm::Lane::Inner, t0, t0 + secs(1e-4));
  // Queued at the same moment: the link carries it after the first.
  const auto second = release(comm::Lane::Inner, t0, t0 + secs(2e-4));
  EXPECT_NEAR(between(t0, first), model, 1e-9);
  EXPECT_NEAR(between(t0, second), 2 * model, 1e-9);
  // The federation lane is a link of its own: not queued behind the inner lane's.
  EXPECT_NEAR(between(t0, release(comm::Lane::Federation, t0, t0 + secs(1e-4))), model, 1e-9);
  // One that starts after the link is free again waits for nothing.
  const auto later = second + secs(1);
  EXPECT_NEAR(between(later, release(comm::Lane::Inner, later, later + secs(1e-4))), model, 1e-9);
}
