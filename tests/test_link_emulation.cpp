// Link emulation timing: a collective's handle completes when the alpha-beta time of its ring algorithm on its
// tier has passed, overlaps with compute, and queues behind the previous emulated collective. Tolerance: never
// earlier than the formula, at most 15 ms later (thread wake-ups and the real collective on a loaded box).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm/link_emulation.h"
#include "comm/mpi_runtime.h"
#include "comm/topology.h"

using namespace fedshard;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kSlack = 0.015;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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
  const double took = since(t0);
  EXPECT_GE(took, want);
  EXPECT_LE(took, want + kSlack) << "held " << took << " s for a modelled " << want << " s";
  EXPECT_EQ(buf[0].item<float>(), static_cast<float>(w.size()));  // it still ran for real
}

TEST_F(LinkEmulation, ComputeOverlapsTheHold) {
  auto& w = topo_->world();
  if (w.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto buf = at::ones({1 << 20});
  const double want = link_.seconds(comm::Collective::AllReduce, 4.0 * (1 << 20), w.size());
  w.barrier()->wait();
  const auto t0 = Clock::now();
  auto h = w.all_reduce(buf, comm::ReduceOp::Sum);
  std::this_thread::sleep_for(std::chrono::duration<double>(want * 0.75));  // "compute" for 3/4 of it
  h->wait();
  const double took = since(t0);
  EXPECT_GE(took, want);
  EXPECT_LE(took, want + kSlack) << "compute and the emulated link did not overlap";
}

TEST_F(LinkEmulation, BackToBackCollectivesSerialize) {
  auto& w = topo_->world();
  if (w.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto a = at::ones({1 << 20}), b = at::ones({1 << 20});
  const double one = link_.seconds(comm::Collective::AllReduce, 4.0 * (1 << 20), w.size());
  w.barrier()->wait();
  const auto t0 = Clock::now();
  auto ha = w.all_reduce(a, comm::ReduceOp::Sum);
  auto hb = w.all_reduce(b, comm::ReduceOp::Sum);
  ha->wait();
  const double first = since(t0);
  hb->wait();
  const double second = since(t0);
  EXPECT_GE(first, one);
  EXPECT_LE(first, one + kSlack);
  EXPECT_GE(second, 2 * one);
  EXPECT_LE(second, 2 * one + kSlack);
}
