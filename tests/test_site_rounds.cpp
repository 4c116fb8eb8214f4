// The round server's robust aggregation (sites/round_math.h, sites/coordinator.h): the trimmed mean, the median and
// the clipped mean of the sites' deltas against a float64 reference computed coordinate by coordinate here, and the
// coordinator's norm bound over the shards' partial norms (clip or refuse), kept across its restart.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "sites/coordinator.h"
#include "sites/round_math.h"
#include "util/error.h"

namespace fs = std::filesystem;
using namespace fedshard;
using namespace fedshard::sites;

namespace {

constexpr int64_t kElements = 257;

ShardModel model_at(const at::Tensor& global) {
  ShardModel m;
  m.global = global.clone();
  m.outer = federation::make_outer_optimizer({"fedavg", 1.0, 0.9}, {m.global});
  return m;
}

std::vector<SiteData> random_sites(int n, Payload payload, const at::Tensor& global) {
  std::vector<SiteData> sites;
  for (int i = 0; i < n; ++i) {
    // Sites' deltas of different sizes, one of them an attacker's 50x.
    auto d = at::randn({kElements}, at::kFloat) * (0.01 * (i + 1)) * (i == n - 1 ? 50.0 : 1.0);
    sites.push_back({"site-" + std::to_string(i), 100.0 * (i + 1), payload == Payload::Model ? global + d : d});
  }
  return sites;
}

// Coordinate e's deltas in float64, each times its site's scale.
std::vector<double> deltas_at(const std::vector<SiteData>& sites, Payload payload, const at::Tensor& global, int64_t e) {
  std::vector<double> v;
  for (const auto& s : sites) {
    double d = s.values[e].item<double>();
    if (payload == Payload::Model) d -= global[e].item<double>();
    v.push_back(d * s.scale);
  }
  return v;
}

}  // namespace

TEST(SiteRounds, AggregationSpecs) {
  EXPECT_EQ(Aggregation::parse("mean").kind, Aggregation::Kind::Mean);
  EXPECT_EQ(Aggregation::parse("median").kind, Aggregation::Kind::Median);
  const auto t = Aggregation::parse("trimmed:0.25");
  EXPECT_EQ(t.kind, Aggregation::Kind::Trimmed);
  EXPECT_DOUBLE_EQ(t.trim, 0.25);
  for (const char* bad : {"trimmed:0.5", "trimmed:-0.1", "trimmed:", "trimmed:0.2x", "krum", ""})
    EXPECT_THROW(Aggregation::parse(bad), Error) << bad;
  // Sites dropped at each end: never all of them.
  EXPECT_EQ(Aggregation::parse("trimmed:0.25").dropped(4), 1);
  EXPECT_EQ(Aggregation::parse("trimmed:0.49").dropped(2), 0);
  EXPECT_EQ(Aggregation::parse("median").dropped(4), 1);
  EXPECT_EQ(Aggregation::parse("median").dropped(5), 2);
}

TEST(SiteRounds, TrimmedMeanAndMedianPerCoordinate) {
  at::manual_seed(7);
  const auto global = at::randn({kElements}, at::kFloat);
  for (const auto payload : {Payload::Delta, Payload::Model}) {
    for (const int n : {3, 4, 5}) {
      for (const char* spec : {"trimmed:0.2", "trimmed:0.34", "median"}) {
        auto sites = random_sites(n, payload, global);
        sites[0].scale = 0.5;  // a clipped site
        auto m = model_at(global);
        apply_round(m, 3, payload, sites, std::nullopt, Aggregation::parse(spec));
        const std::string what = std::string(spec) + " of " + std::to_string(n);
        // The reference: each coordinate's deltas sorted, the trimmed ends dropped, the rest averaged.
        const int64_t cut = std::string(spec) == "median"        ? (n - 1) / 2
                            : std::string(spec) == "trimmed:0.2" ? static_cast<int64_t>(0.2 * n)
                                                                 : std::min<int64_t>((n - 1) / 2, 0.34 * n);
        for (int64_t e = 0; e < kElements; ++e) {
          auto v = deltas_at(sites, payload, global, e);
          std::sort(v.begin(), v.end());
          double sum = 0;
          for (int64_t i = cut; i < n - cut; ++i) sum += v[static_cast<size_t>(i)];
          const double want = global[e].item<double>() + sum / static_cast<double>(n - 2 * cut);
          ASSERT_NEAR(m.global[e].item<double>(), want, 1e-5) << what << ", element " << e;
        }
      }
    }
  }
}

TEST(SiteRounds, ClippedWeightedMean) {
  at::manual_seed(11);
  const auto global = at::randn({kElements}, at::kFloat);
  for (const auto payload : {Payload::Delta, Payload::Model}) {
    auto sites = random_sites(4, payload, global);
    sites[3].scale = 0.02;
    auto m = model_at(global);
    apply_round(m, 1, payload, sites, std::nullopt, Aggregation::parse("mean"));
    double tokens = 0;
    for (const auto& s : sites) tokens += s.tokens;
    for (int64_t e = 0; e < kElements; ++e) {
      const auto v = deltas_at(sites, payload, global, e);
      double want = global[e].item<double>();
      for (size_t i = 0; i < sites.size(); ++i) want += sites[i].tokens / tokens * v[i];
      ASSERT_NEAR(m.global[e].item<double>(), want, 1e-5) << "element " << e;
    }
  }
  // Every site refused: the global model stays.
  auto m = model_at(global);
  apply_round(m, 2, Payload::Delta, {}, std::nullopt, Aggregation::parse("median"));
  EXPECT_TRUE(at::equal(m.global, global));
}

TEST(SiteRounds, DeltaNorm) {
  const auto global = at::tensor({1.0f, 2.0f, 3.0f});
  EXPECT_DOUBLE_EQ(delta_norm2(Payload::Model, at::tensor({4.0f, 6.0f, 3.0f}), global), 25.0);
  EXPECT_DOUBLE_EQ(delta_norm2(Payload::Delta, at::tensor({3.0f, 4.0f, 0.0f}), global), 25.0);
}

class CoordinatorBound : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() / ("fedshard-coordinator-" + std::to_string(getpid()) + ".json");
    fs::remove(path_);
  }
  void TearDown() override { fs::remove(path_); }

  // Round 1 on 2 shards: each reports sites a (norm 3 over both: 2^2 + sqrt(5)^2) and b (norm 10: 6^2 + 8^2).
  static Report report(uint32_t shard) {
    Report r;
    r.round = 1;
    r.shard = shard;
    r.complete = {{"a", 10, shard == 0 ? 4.0 : 5.0}, {"b", 30, shard == 0 ? 36.0 : 64.0}};
    return r;
  }
  Decision decide(Coordinator& c) {
    c.seen("a");
    c.seen("b");
    EXPECT_EQ(c.report(report(0)).verdict, Verdict::Wait);
    return c.report(report(1));
  }
  fs::path path_;
};

TEST_F(CoordinatorBound, ClipsASiteAboveTheBoundToIt) {
  Coordinator c(2, 0, 600, path_.string(), 1, RoundRules{"trimmed:0.25", 5.0, false});
  const auto d = decide(c);
  ASSERT_EQ(d.verdict, Verdict::Prepare);
  ASSERT_EQ(d.participants.size(), 2u);
  EXPECT_EQ(d.aggregate, "trimmed:0.25");
  EXPECT_DOUBLE_EQ(d.participants[0].norm2, 9.0);
  EXPECT_DOUBLE_EQ(d.participants[0].scale, 1.0);
  EXPECT_DOUBLE_EQ(d.participants[1].norm2, 100.0);
  EXPECT_DOUBLE_EQ(d.participants[1].scale, 0.5);
  // A coordinator started again with other rules sends the decided round's.
  Coordinator again(2, 0, 600, path_.string(), 1, RoundRules{"median", 1.0, true});
  auto r = report(0);
  const auto d2 = again.report(r);
  ASSERT_EQ(d2.verdict, Verdict::Prepare);
  EXPECT_EQ(d2.aggregate, "trimmed:0.25");
  ASSERT_EQ(d2.participants.size(), 2u);
  EXPECT_DOUBLE_EQ(d2.participants[1].scale, 0.5);
}

TEST_F(CoordinatorBound, RefusesASiteAboveTheBoundAndStillWaitsForIt) {
  Coordinator c(2, 0, 600, path_.string(), 1, RoundRules{"mean", 5.0, true});
  const auto d = decide(c);
  ASSERT_EQ(d.verdict, Verdict::Prepare);
  ASSERT_EQ(d.participants.size(), 1u);
  EXPECT_EQ(d.participants[0].site, "a");
  // Both shards prepare; round 1 commits with a alone.
  Report p = report(0);
  p.state = ShardState::Prepared;
  EXPECT_EQ(c.report(p).verdict, Verdict::Prepare);
  p.shard = 1;
  EXPECT_EQ(c.report(p).verdict, Verdict::Commit);
  // Round 2: b was refused, not late: a round still waits for it (the quorum is every active site).
  Report next;
  next.round = 2;
  next.complete = {{"a", 10, 1.0}};
  EXPECT_EQ(c.report(next).verdict, Verdict::Wait);
  next.shard = 1;
  EXPECT_EQ(c.report(next).verdict, Verdict::Wait);
}

TEST_F(CoordinatorBound, NoBoundTakesEverySite) {
  Coordinator c(2, 0, 600, path_.string(), 1);
  const auto d = decide(c);
  ASSERT_EQ(d.participants.size(), 2u);
  EXPECT_DOUBLE_EQ(d.participants[1].scale, 1.0);
  EXPECT_EQ(d.aggregate, "mean");
}
